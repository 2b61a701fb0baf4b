//! The standards' checks and the labels' parsing, case by case, with kube's messages.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Level, LevelVersion, Policy, Version};

fn at(level: Level, version: &str) -> LevelVersion {
    LevelVersion {
        level,
        version: Version::parse(version).unwrap(),
    }
}

fn forbids(lv: LevelVersion, pod: &Value) -> Option<String> {
    lv.forbids(&pod["metadata"], &pod["spec"])
}

fn policy(labels: &[(&str, &str)]) -> (Policy, usize) {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (format!("pod-security.kubernetes.io/{k}"), (*v).to_owned()))
        .collect();
    let (policy, errors) = Policy::from_labels(&labels, &Policy::default());
    (policy, errors.len())
}

#[test]
fn labels_choose_levels_and_versions_as_kube_parses_them() {
    let (p, errors) = policy(&[("enforce", "baseline")]);
    assert_eq!(
        (p.enforce.to_string(), p.warn.to_string(), errors),
        ("baseline:latest".into(), "baseline:latest".into(), 0)
    );
    let (p, _) = policy(&[
        ("enforce", "restricted"),
        ("enforce-version", "v1.24"),
        ("warn", "baseline"),
    ]);
    assert_eq!(
        (p.enforce.to_string(), p.warn.to_string()),
        ("restricted:v1.24".into(), "baseline:latest".into())
    );
    let (p, _) = policy(&[
        ("enforce", "restricted"),
        ("enforce-version", "v1.24"),
        ("warn-version", "v1.30"),
    ]);
    assert_eq!(p.warn.to_string(), "restricted:v1.30");
    // An enforce level that does not parse enforces the strictest; audit and warn fail open.
    let (p, errors) = policy(&[("enforce", "bogus"), ("audit", "bogus"), ("warn", "bogus")]);
    assert_eq!(
        (p.enforce.level, p.audit.level, p.warn.level, errors),
        (Level::Restricted, Level::Privileged, Level::Privileged, 3)
    );
    for good in ["latest", "v1.0", "v1.32", "v1.99"] {
        assert!(Version::parse(good).is_ok(), "{good}");
    }
    for bad in ["v1.01", "1.30", "v2.1", "v1.", "v1.x", "v1.-1", ""] {
        assert_eq!(
            Version::parse(bad),
            Err("must be \"latest\" or \"v1.x\""),
            "{bad}"
        );
    }
}

#[test]
fn restricted_checks_follow_the_version_of_the_standard() {
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
    ]}});
    // Before 1.22 the restricted level checks capabilities as baseline does; before 1.19 it
    // has no seccomp check of its own, before 1.8 no privilege escalation check.
    assert_eq!(
        forbids(at(Level::Restricted, "v1.7"), &pod).unwrap(),
        r#"non-default capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)"#
    );
    assert_eq!(
        forbids(at(Level::Restricted, "latest"), &pod).unwrap(),
        r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
    );
    // Windows pods skip three restricted checks from 1.25.
    let windows = json!({"metadata": {}, "spec": {"os": {"name": "windows"}, "containers": [{"name": "w", "image": "i"}]}});
    assert_eq!(
        forbids(at(Level::Restricted, "v1.25"), &windows).unwrap(),
        r#"runAsNonRoot != true (pod or container "w" must set securityContext.runAsNonRoot=true)"#
    );
    assert!(
        forbids(at(Level::Restricted, "v1.24"), &windows)
            .unwrap()
            .starts_with("allowPrivilegeEscalation != false")
    );
    assert_eq!(forbids(at(Level::Baseline, "latest"), &windows), None);
    assert_eq!(forbids(at(Level::Privileged, "latest"), &pod), None);
}

#[test]
fn baseline_checks_word_each_violation_as_kube_does() {
    let pod = json!({"metadata": {"annotations": {
        "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/a": "unconfined"
    }}, "spec": {
        "hostNetwork": true, "hostPID": true,
        "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}],
                            "seLinuxOptions": {"type": "spc_t", "user": "root"}},
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}, {"name": "n", "nfs": {"server": "s", "path": "/"}}],
        "initContainers": [{"name": "i", "image": "x", "ports": [{"containerPort": 1, "hostPort": 80}]}],
        "containers": [
            {"name": "a", "image": "x", "ports": [{"containerPort": 1, "hostPort": 8080}],
             "securityContext": {"procMount": "Unmasked", "seccompProfile": {"type": "Unconfined"}, "windowsOptions": {"hostProcess": true}}},
        ]
    }});
    assert_eq!(
        forbids(at(Level::Baseline, "latest"), &pod).unwrap(),
        concat!(
            r#"forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/a="unconfined""), "#,
            r#"host namespaces (hostNetwork=true, hostPID=true), "#,
            r#"hostPath volumes (volume "h"), "#,
            r#"hostPort (containers "i", "a" use hostPorts 80, 8080), "#,
            r#"procMount (container "a" must not set securityContext.procMount to "Unmasked"), "#,
            r#"seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set), "#,
            r#"seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined"), "#,
            r#"forbidden sysctls (kernel.msgmax), "#,
            r#"hostProcess (container "a" must not set securityContext.windowsOptions.hostProcess=true)"#,
        )
    );
    // At 1.31, tcp_rmem was not allowed yet; before 1.19, seccomp was annotations.
    let older = forbids(at(Level::Baseline, "v1.18"), &pod).unwrap();
    assert!(
        older.contains("forbidden sysctls (net.ipv4.tcp_rmem, kernel.msgmax)"),
        "{older}"
    );
    assert!(older.contains(r#"seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined")"#), "{older}");
    // Restricted replaces hostPath with its list of allowed volume types.
    let restricted = forbids(at(Level::Restricted, "latest"), &pod).unwrap();
    assert!(!restricted.contains("hostPath volumes"), "{restricted}");
    assert!(restricted.contains(r#"restricted volume types (volumes "h", "n" use restricted volume types "hostPath", "nfs")"#), "{restricted}");
}

#[test]
fn the_configuration_is_read_as_kube_reads_it() {
    let config = super::Config::from_value(&json!({
        "defaults": {"enforce": "baseline", "enforce-version": "v1.30", "warn": "restricted"},
        "exemptions": {"usernames": ["ci"], "namespaces": ["kube-system"], "runtimeClasses": ["kata"]}
    }))
    .unwrap();
    assert_eq!(config.defaults.enforce.to_string(), "baseline:v1.30");
    assert_eq!(config.defaults.warn.to_string(), "restricted:latest");
    assert_eq!(config.defaults.audit.to_string(), "privileged:latest");
    assert_eq!(
        (
            config.exempt_users.len(),
            config.exempt_namespaces.len(),
            config.exempt_runtime_classes.len()
        ),
        (1, 1, 1)
    );
    let bad = super::Config::from_value(&json!({"defaults": {"enforce": "strict"}})).unwrap_err();
    assert_eq!(
        bad,
        r#"defaults.enforce: Invalid value: "strict": must be one of privileged, baseline, restricted"#
    );
    assert!(super::Config::from_value(&json!({"exemptions": {"usernames": "ci"}})).is_err());
}

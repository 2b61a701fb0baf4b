//! The Pod Security Standards as checks of a pod's metadata and spec, each with the versions
//! of the standard it changed in (kube's `k8s.io/pod-security-admission/policy`): what a check
//! forbids, and the reason and detail it gives, in kube's words.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Level;

/// Why a check forbids a pod: the short reason and the detail (`privileged` and
/// `container "c" must not set securityContext.privileged=true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    /// The short reason.
    pub reason: String,
    /// What exactly is forbidden.
    pub detail: String,
}

/// A check at one version of the standard: the pod's metadata and spec in, the forbidden
/// part (if any) out.
type CheckFn = fn(&Value, &Value) -> Option<Forbidden>;

/// One version of a check: from which minor version of 1.x it applies, what it does, and
/// which baseline checks it replaces in the restricted level.
struct Versioned {
    since: u32,
    check: CheckFn,
    overrides: &'static [&'static str],
}

/// A check of the standard.
struct Check {
    id: &'static str,
    level: Level,
    versions: &'static [Versioned],
}

const fn at(since: u32, check: CheckFn) -> Versioned {
    Versioned {
        since,
        check,
        overrides: &[],
    }
}

/// The newest version of the standard the checks know (kube 1.32's); later ones and `latest`
/// are evaluated as it.
pub const NEWEST: u32 = 32;

/// Every check, in kube's evaluation order: the baseline checks by ID, then the restricted
/// ones by ID (byte order, as Go sorts strings).
const CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[at(0, app_armor)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[at(0, capabilities_baseline)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[at(0, host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[at(0, host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[at(0, host_ports)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[at(0, privileged)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[at(0, proc_mount)],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[at(0, se_linux_1_0), at(31, se_linux_1_31)],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[at(0, seccomp_annotations), at(19, seccomp_baseline)],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            at(0, sysctls_1_0),
            at(27, sysctls_1_27),
            at(29, sysctls_1_29),
            at(32, sysctls_1_32),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[at(0, windows_host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            at(8, privilege_escalation),
            at(25, privilege_escalation_1_25),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            Versioned {
                since: 22,
                check: capabilities_restricted,
                overrides: &["capabilities_baseline"],
            },
            Versioned {
                since: 25,
                check: capabilities_restricted_1_25,
                overrides: &["capabilities_baseline"],
            },
        ],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[Versioned {
            since: 0,
            check: restricted_volumes,
            overrides: &["hostPathVolumes"],
        }],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[at(0, run_as_non_root)],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[at(23, run_as_user)],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[
            Versioned {
                since: 19,
                check: seccomp_restricted,
                overrides: &["seccompProfile_baseline"],
            },
            Versioned {
                since: 25,
                check: seccomp_restricted_1_25,
                overrides: &["seccompProfile_baseline"],
            },
        ],
    },
];

/// What the checks of `level` at version 1.`minor` forbid in a pod (its `metadata` and
/// `spec`), in order; nothing for `privileged`.
pub(super) fn evaluate(level: Level, minor: u32, metadata: &Value, spec: &Value) -> Vec<Forbidden> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let minor = minor.min(NEWEST);
    // Each check's version in force at `minor`, if it exists there yet.
    let in_force = |check: &'static Check| check.versions.iter().rev().find(|v| v.since <= minor);
    let overridden: BTreeSet<&str> = if level == Level::Restricted {
        CHECKS
            .iter()
            .filter(|c| c.level == Level::Restricted)
            .filter_map(in_force)
            .flat_map(|v| v.overrides.iter().copied())
            .collect()
    } else {
        BTreeSet::new()
    };
    CHECKS
        .iter()
        .filter(|c| c.level == Level::Baseline || level == Level::Restricted)
        .filter(|c| !(c.level == Level::Baseline && overridden.contains(c.id)))
        .filter_map(in_force)
        .filter_map(|v| (v.check)(metadata, spec))
        .collect()
}

/// Every container of a pod: init containers, containers, ephemeral containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|list| spec.get(list).and_then(Value::as_array))
        .flatten()
}

fn name(container: &Value) -> String {
    container["name"].as_str().unwrap_or_default().to_owned()
}

/// The names of the containers for which `bad` holds.
fn bad_containers(spec: &Value, mut bad: impl FnMut(&Value) -> bool) -> Vec<String> {
    containers(spec).filter(|c| bad(c)).map(name).collect()
}

/// `"a", "b"`, as kube quotes a list.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

fn pluralize(singular: &'static str, plural: &'static str, count: usize) -> &'static str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

fn forbidden(reason: impl Into<String>, detail: impl Into<String>) -> Option<Forbidden> {
    Some(Forbidden {
        reason: reason.into(),
        detail: detail.into(),
    })
}

fn security_context(container: &Value) -> &Value {
    &container["securityContext"]
}

fn is_windows(spec: &Value) -> bool {
    spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
}

/// From 1.25, these restricted checks do not apply to Windows pods.
fn privilege_escalation_1_25(metadata: &Value, spec: &Value) -> Option<Forbidden> {
    (!is_windows(spec)).then_some(())?;
    privilege_escalation(metadata, spec)
}

fn capabilities_restricted_1_25(metadata: &Value, spec: &Value) -> Option<Forbidden> {
    (!is_windows(spec)).then_some(())?;
    capabilities_restricted(metadata, spec)
}

fn seccomp_restricted_1_25(metadata: &Value, spec: &Value) -> Option<Forbidden> {
    (!is_windows(spec)).then_some(())?;
    seccomp_restricted(metadata, spec)
}

fn privileged(_: &Value, spec: &Value) -> Option<Forbidden> {
    let bad = bad_containers(spec, |c| security_context(c)["privileged"] == true);
    (!bad.is_empty()).then_some(())?;
    forbidden(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn host_namespaces(_: &Value, spec: &Value) -> Option<Forbidden> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|f| spec[*f] == true)
        .map(|f| format!("{f}=true"))
        .collect();
    (!set.is_empty()).then_some(())?;
    forbidden("host namespaces", set.join(", "))
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn host_path_volumes(_: &Value, spec: &Value) -> Option<Forbidden> {
    let bad: Vec<String> = volumes(spec)
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name)
        .collect();
    (!bad.is_empty()).then_some(())?;
    forbidden(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

fn host_ports(_: &Value, spec: &Value) -> Option<Forbidden> {
    let mut ports = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let used: Vec<i64> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|p| *p != 0)
            .collect();
        ports.extend(used.iter().map(ToString::to_string));
        !used.is_empty()
    });
    (!bad.is_empty()).then_some(())?;
    let ports: Vec<String> = ports.into_iter().collect();
    forbidden(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

/// The capabilities baseline allows a container to add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(container: &Value) -> Vec<String> {
    security_context(container)
        .pointer("/capabilities/add")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap_or_default().to_owned())
        .collect()
}

fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Forbidden> {
    let mut extra = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let added: Vec<String> = added_capabilities(c)
            .into_iter()
            .filter(|a| !BASELINE_CAPABILITIES.contains(&a.as_str()))
            .collect();
        let bad = !added.is_empty();
        extra.extend(added);
        bad
    });
    (!bad.is_empty()).then_some(())?;
    let extra: Vec<String> = extra.into_iter().collect();
    forbidden(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&extra)
        ),
    )
}

fn capabilities_restricted(_: &Value, spec: &Value) -> Option<Forbidden> {
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut extra = BTreeSet::new();
    for c in containers(spec) {
        let capabilities = &security_context(c)["capabilities"];
        if !capabilities.is_object() {
            missing_drop_all.push(name(c));
            continue;
        }
        let dropped_all = capabilities["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !dropped_all {
            missing_drop_all.push(name(c));
        }
        let added: Vec<String> = added_capabilities(c)
            .into_iter()
            .filter(|a| a != "NET_BIND_SERVICE")
            .collect();
        if !added.is_empty() {
            adding.push(name(c));
            extra.extend(added);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        let extra: Vec<String> = extra.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&extra)
        ));
    }
    (!details.is_empty()).then_some(())?;
    forbidden("unrestricted capabilities", details.join("; "))
}

fn proc_mount(_: &Value, spec: &Value) -> Option<Forbidden> {
    let mut types = BTreeSet::new();
    let bad = bad_containers(spec, |c| match security_context(c)["procMount"].as_str() {
        Some(t) if t != "Default" => {
            types.insert(t.to_owned());
            true
        }
        _ => false,
    });
    (!bad.is_empty()).then_some(())?;
    let types: Vec<String> = types.into_iter().collect();
    forbidden(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

/// "pod", the containers, or both, who set something forbidden (`pod and container "c"`).
fn setters(pod: bool, bad: &[String]) -> Vec<String> {
    let mut setters = Vec::new();
    if pod {
        setters.push("pod".to_owned());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(bad));
    }
    setters
}

fn se_linux(spec: &Value, allowed: &[&str]) -> Option<Forbidden> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |options: &Value| -> bool {
        if !options.is_object() {
            return true;
        }
        let mut ok = true;
        let kind = options["type"].as_str().unwrap_or_default();
        if !allowed.contains(&kind) {
            ok = false;
            bad_types.insert(kind.to_owned());
        }
        if !options["user"].as_str().unwrap_or_default().is_empty() {
            ok = false;
            set_user = true;
        }
        if !options["role"].as_str().unwrap_or_default().is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let pod = !valid(&spec["securityContext"]["seLinuxOptions"]);
    let bad: Vec<String> = containers(spec)
        .filter(|c| !valid(&security_context(c)["seLinuxOptions"]))
        .map(name)
        .collect();
    let setters = setters(pod, &bad);
    (!setters.is_empty()).then_some(())?;
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_owned());
    }
    if set_role {
        data.push("role may not be set".to_owned());
    }
    forbidden(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn se_linux_1_0(_: &Value, spec: &Value) -> Option<Forbidden> {
    se_linux(
        spec,
        &["", "container_t", "container_init_t", "container_kvm_t"],
    )
}

fn se_linux_1_31(_: &Value, spec: &Value) -> Option<Forbidden> {
    se_linux(
        spec,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

fn annotations(metadata: &Value) -> impl Iterator<Item = (&String, &str)> {
    metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

fn app_armor(metadata: &Value, spec: &Value) -> Option<Forbidden> {
    let allowed_type = |profile: &Value| -> Option<String> {
        let kind = profile["type"].as_str().unwrap_or_default();
        (profile.is_object() && !matches!(kind, "RuntimeDefault" | "Localhost"))
            .then(|| kind.to_owned())
    };
    let mut values = BTreeSet::new();
    let mut setters = Vec::new();
    if let Some(bad) = allowed_type(&spec["securityContext"]["appArmorProfile"]) {
        setters.push("pod".to_owned());
        values.insert(bad);
    }
    let bad = bad_containers(spec, |c| {
        match allowed_type(&security_context(c)["appArmorProfile"]) {
            Some(v) => {
                values.insert(v);
                true
            }
            None => false,
        }
    });
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut values: Vec<String> = values.into_iter().collect();
    let mut bad_annotations: Vec<String> = annotations(metadata)
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    if !bad_annotations.is_empty() {
        bad_annotations.sort();
        setters.push(pluralize("annotation", "annotations", bad_annotations.len()).to_owned());
        values.extend(bad_annotations);
    }
    (!setters.is_empty()).then_some(())?;
    forbidden(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn seccomp_annotations(metadata: &Value, spec: &Value) -> Option<Forbidden> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let annotated = |key: &str| -> Option<String> {
        let value = metadata["annotations"]
            .get(key)?
            .as_str()
            .unwrap_or_default();
        (!valid(value)).then(|| format!("{key}={value:?}"))
    };
    let mut bad = BTreeSet::new();
    bad.extend(annotated("seccomp.security.alpha.kubernetes.io/pod"));
    for c in containers(spec) {
        bad.extend(annotated(&format!(
            "container.seccomp.security.alpha.kubernetes.io/{}",
            name(c)
        )));
    }
    (!bad.is_empty()).then_some(())?;
    let bad: Vec<String> = bad.into_iter().collect();
    forbidden(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", bad.len()),
            bad.join(", ")
        ),
    )
}

/// How a seccomp profile stands: not set, set to an allowed type, or set to another.
enum Seccomp {
    Unset,
    Allowed,
    Forbidden(String),
}

fn seccomp(context: &Value) -> Seccomp {
    let profile = &context["seccompProfile"];
    if !profile.is_object() {
        return Seccomp::Unset;
    }
    match profile["type"].as_str().unwrap_or_default() {
        "RuntimeDefault" | "Localhost" => Seccomp::Allowed,
        other => Seccomp::Forbidden(other.to_owned()),
    }
}

/// The seccomp check; `required`: a container must have an allowed profile, its own or the
/// pod's (restricted), else only explicitly forbidden ones are (baseline).
fn seccomp_profile(spec: &Value, required: bool) -> Option<Forbidden> {
    let mut values = BTreeSet::new();
    let (pod_bad, pod_set) = match seccomp(&spec["securityContext"]) {
        Seccomp::Forbidden(v) => {
            values.insert(v);
            (true, false)
        }
        Seccomp::Allowed => (false, true),
        Seccomp::Unset => (false, false),
    };
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match seccomp(security_context(c)) {
            Seccomp::Forbidden(v) => {
                values.insert(v);
                explicit.push(name(c));
            }
            Seccomp::Allowed => {}
            Seccomp::Unset if !pod_set => implicit.push(name(c)),
            Seccomp::Unset => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return forbidden(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    (required && !implicit.is_empty()).then_some(())?;
    forbidden(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

fn seccomp_baseline(_: &Value, spec: &Value) -> Option<Forbidden> {
    seccomp_profile(spec, false)
}

fn seccomp_restricted(_: &Value, spec: &Value) -> Option<Forbidden> {
    seccomp_profile(spec, true)
}

/// The sysctls baseline allows, by the version that added them.
const SYSCTLS: [(u32, &str); 12] = [
    (0, "kernel.shm_rmid_forced"),
    (0, "net.ipv4.ip_local_port_range"),
    (0, "net.ipv4.tcp_syncookies"),
    (0, "net.ipv4.ping_group_range"),
    (0, "net.ipv4.ip_unprivileged_port_start"),
    (27, "net.ipv4.ip_local_reserved_ports"),
    (29, "net.ipv4.tcp_keepalive_time"),
    (29, "net.ipv4.tcp_fin_timeout"),
    (29, "net.ipv4.tcp_keepalive_intvl"),
    (29, "net.ipv4.tcp_keepalive_probes"),
    (32, "net.ipv4.tcp_rmem"),
    (32, "net.ipv4.tcp_wmem"),
];

fn sysctls(spec: &Value, minor: u32) -> Option<Forbidden> {
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["name"].as_str().unwrap_or_default())
        .filter(|n| !SYSCTLS.iter().any(|(since, s)| *since <= minor && s == n))
        .collect();
    (!bad.is_empty()).then_some(())?;
    forbidden("forbidden sysctls", bad.join(", "))
}

fn sysctls_1_0(_: &Value, spec: &Value) -> Option<Forbidden> {
    sysctls(spec, 0)
}

fn sysctls_1_27(_: &Value, spec: &Value) -> Option<Forbidden> {
    sysctls(spec, 27)
}

fn sysctls_1_29(_: &Value, spec: &Value) -> Option<Forbidden> {
    sysctls(spec, 29)
}

fn sysctls_1_32(_: &Value, spec: &Value) -> Option<Forbidden> {
    sysctls(spec, 32)
}

fn windows_host_process(_: &Value, spec: &Value) -> Option<Forbidden> {
    let host_process = |context: &Value| {
        context.pointer("/windowsOptions/hostProcess") == Some(&Value::Bool(true))
    };
    let pod = host_process(&spec["securityContext"]);
    let bad = bad_containers(spec, |c| host_process(security_context(c)));
    let setters = setters(pod, &bad);
    (!setters.is_empty()).then_some(())?;
    forbidden(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

fn privilege_escalation(_: &Value, spec: &Value) -> Option<Forbidden> {
    let bad = bad_containers(spec, |c| {
        security_context(c)["allowPrivilegeEscalation"] != false
    });
    (!bad.is_empty()).then_some(())?;
    forbidden(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn restricted_volumes(_: &Value, spec: &Value) -> Option<Forbidden> {
    const ALLOWED: [&str; 8] = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    const KNOWN: [&str; 21] = [
        "hostPath",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "nfs",
        "iscsi",
        "glusterfs",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "fc",
        "azureFile",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "storageos",
    ];
    let has = |volume: &Value, source: &str| volume.get(source).is_some_and(|s| !s.is_null());
    let mut types = BTreeSet::new();
    let bad: Vec<String> = volumes(spec)
        .filter(|v| !ALLOWED.iter().any(|a| has(v, a)))
        .inspect(|v| {
            let kind = KNOWN
                .iter()
                .find(|k| has(v, k))
                .copied()
                .unwrap_or("unknown");
            types.insert(kind);
        })
        .map(name)
        .collect();
    (!bad.is_empty()).then_some(())?;
    let types: Vec<&str> = types.into_iter().collect();
    forbidden(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value) -> Option<Forbidden> {
    let pod_value = &spec["securityContext"]["runAsNonRoot"];
    let pod_bad = *pod_value == false;
    let pod_set = *pod_value == true;
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match security_context(c)["runAsNonRoot"].as_bool() {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        return forbidden(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    (!implicit.is_empty()).then_some(())?;
    forbidden(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

fn run_as_user(_: &Value, spec: &Value) -> Option<Forbidden> {
    let pod = spec["securityContext"]["runAsUser"].as_i64() == Some(0);
    let bad = bad_containers(spec, |c| {
        security_context(c)["runAsUser"].as_i64() == Some(0)
    });
    let setters = setters(pod, &bad);
    (!setters.is_empty()).then_some(())?;
    forbidden(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

//! ResourceQuota end to end through kubectl: object counts (the (n+1)th object is refused with
//! kube's message, a deleted one gives its place back, custom resources count as
//! `count/<plural>.<group>`, concurrent creates never pass the limit, and kubectl shows the
//! usage) and what pods and Services use (compute, node ports; scoped quotas).

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth};

const WIDGETS: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

fn quota(namespace: &str, hard: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: objects, namespace: {namespace}}}\nspec:\n  hard: {{{hard}}}\n"
    )
}

fn counted(plinth: &Plinth, namespace: &str, resource: &str) -> Option<String> {
    let quota = plinth.json(&["-n", namespace, "get", "resourcequota", "objects"]);
    quota["status"]["used"][resource]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn quotas_count_objects_and_refuse_past_the_limit() {
    let plinth = Plinth::start(Backend::Embedded);
    let crd = plinth.dir.path().join("widgets.yaml");
    std::fs::write(&crd, WIDGETS).unwrap();
    plinth.install_crds(&[crd], "60s");
    plinth.kubectl(&["create", "namespace", "limited"]);
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        &quota(
            "limited",
            "secrets: \"2\", count/widgets.example.com: \"1\", count/configmaps: \"10\"",
        ),
    );
    plinth.eventually("the quota's status", || {
        counted(&plinth, "limited", "secrets").as_deref() == Some("0")
    });
    // The namespace's kube-root-ca.crt counts as a ConfigMap.
    plinth.eventually("ConfigMaps counted", || {
        counted(&plinth, "limited", "count/configmaps").as_deref() == Some("1")
    });

    for name in ["s1", "s2"] {
        plinth.kubectl(&[
            "-n",
            "limited",
            "create",
            "secret",
            "generic",
            name,
            "--from-literal=k=v",
        ]);
    }
    let refused = plinth.kubectl_output(&[
        "-n",
        "limited",
        "create",
        "secret",
        "generic",
        "s3",
        "--from-literal=k=v",
    ]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("secrets \"s3\" is forbidden: exceeded quota: objects, requested: secrets=1, used: secrets=2, limited: secrets=2"),
        "{message}"
    );
    assert_eq!(
        plinth
            .kubectl_output(&["-n", "limited", "get", "secret", "s3"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
    // A dry run is judged the same, and counts nothing.
    let dry = plinth.kubectl_output(&[
        "-n",
        "limited",
        "create",
        "secret",
        "generic",
        "s3",
        "--from-literal=k=v",
        "--dry-run=server",
    ]);
    assert!(!dry.status.success());
    // A deleted Secret gives its place back.
    plinth.kubectl(&["-n", "limited", "delete", "secret", "s1"]);
    plinth.eventually("the freed place", || {
        counted(&plinth, "limited", "secrets").as_deref() == Some("1")
    });
    plinth.kubectl(&[
        "-n",
        "limited",
        "create",
        "secret",
        "generic",
        "s3",
        "--from-literal=k=v",
    ]);

    // Custom resources: count/<plural>.<group>.
    let widget = |name: &str| {
        format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: limited}}\n"
        )
    };
    plinth.kubectl_with(&["create", "-f", "-"], &widget("w1"));
    let refused = plinth.kubectl_stdin(&["create", "-f", "-"], &widget("w2"));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(
            "exceeded quota: objects, requested: count/widgets.example.com=1, used: count/widgets.example.com=1, limited: count/widgets.example.com=1"
        ),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Other namespaces are not limited.
    plinth.kubectl(&[
        "create",
        "secret",
        "generic",
        "elsewhere",
        "--from-literal=k=v",
    ]);

    // kubectl's view: used/hard per resource.
    plinth.eventually("kubectl shows the usage", || {
        let table = plinth.kubectl(&["-n", "limited", "get", "quota"]);
        table.contains("secrets: 2/2") && table.contains("count/widgets.example.com: 1/1")
    });
    let header: Vec<String> = plinth
        .kubectl(&["-n", "limited", "get", "quota"])
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"]);
}

#[test]
fn concurrent_creates_never_pass_the_limit() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "race"]);
    plinth.kubectl_with(&["apply", "-f", "-"], &quota("race", "secrets: \"3\""));
    plinth.eventually("the quota's status", || {
        counted(&plinth, "race", "secrets").as_deref() == Some("0")
    });
    let creates: Vec<_> = (0..8)
        .map(|i| {
            let (kubeconfig, cache) = (
                plinth.kubeconfig.clone(),
                plinth.dir.path().join(format!("cache-{i}")),
            );
            std::thread::spawn(move || {
                std::process::Command::new("kubectl")
                    .args([
                        "-n",
                        "race",
                        "create",
                        "secret",
                        "generic",
                        &format!("s{i}"),
                        "--from-literal=k=v",
                    ])
                    .env("KUBECONFIG", kubeconfig)
                    .env("KUBECACHEDIR", cache)
                    .output()
                    .unwrap()
                    .status
                    .success()
            })
        })
        .collect();
    let succeeded = creates
        .into_iter()
        .map(|c| c.join().unwrap())
        .filter(|ok| *ok)
        .count();
    assert_eq!(succeeded, 3, "exactly the quota's three");
    let listed = plinth.json(&["-n", "race", "get", "secrets"]);
    assert_eq!(listed["items"].as_array().unwrap().len(), 3);
}

#[test]
fn bad_quotas_are_refused_with_kubes_messages() {
    let plinth = Plinth::start(Backend::Embedded);
    let out = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        &quota("default", "secrets: \"lots\", configmaps: \"-1\""),
    );
    assert!(!out.status.success());
    let message = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "spec.hard[secrets]: Invalid value: \"lots\": quantities must match the regular expression",
        "spec.hard[configmaps]: Invalid value: \"-1\": must be greater than or equal to 0",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    assert_eq!(
        plinth
            .kubectl_output(&["get", "resourcequota", "objects"])
            .status
            .code(),
        Some(1),
        "nothing stored"
    );
}

/// A ReplicaSet whose pod the quota refuses retries after its backoff (kube's controllers
/// requeue a failed sync with an exponential backoff): once the quota is raised, the missing
/// pod is created with nothing else changing (the pods are bound to a node that does not exist:
/// neither the scheduler nor an agent touches them), and the `ReplicaFailure` condition is gone.
#[test]
fn a_replicaset_refused_by_quota_retries_once_the_quota_allows() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "capped"]);
    plinth.kubectl_with(&["apply", "-f", "-"], &quota("capped", "pods: \"1\""));
    plinth.eventually("the quota's status", || {
        counted(&plinth, "capped", "pods").as_deref() == Some("0")
    });
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        r#"apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: capped}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {nodeName: absent, containers: [{name: c, image: busybox}]}
"#,
    );
    plinth.eventually("the refused pod is reported", || {
        let set = plinth.json(&["-n", "capped", "get", "replicaset", "web"]);
        set["status"]["replicas"] == 1
            && set["status"]["conditions"][0]["type"] == "ReplicaFailure"
            && set["status"]["conditions"][0]["reason"] == "FailedCreate"
            && set["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("exceeded quota: objects"))
    });
    plinth.kubectl(&[
        "-n",
        "capped",
        "patch",
        "resourcequota",
        "objects",
        "--type=merge",
        "-p",
        r#"{"spec":{"hard":{"pods":"2"}}}"#,
    ]);
    plinth.eventually("the second pod, created on a retry", || {
        let set = plinth.json(&["-n", "capped", "get", "replicaset", "web"]);
        set["status"]["replicas"] == 2 && set["status"]["conditions"].is_null()
    });
    let pods = plinth.json(&["-n", "capped", "get", "pods", "-l", "app=web"]);
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(2));
}

fn pod(name: &str, resources: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  {extra}\n  containers:\n  - name: c\n    image: busybox\n    resources: {resources}\n"
    )
}

/// kube's quota evaluators: a pod is charged its requests and limits (cpu, memory,
/// extended resources), a Service its node ports and load balancers; a write past `hard`
/// is refused naming each resource it would exceed; a scoped quota counts only the pods in
/// its scope; deleting gives the usage back.
#[test]
fn compute_quotas_charge_pods_and_services_as_kube_does() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "compute"]);
    plinth.kubectl_with(
        &["-n", "compute", "apply", "-f", "-"],
        &quota(
            "compute",
            "pods: \"5\", cpu: \"1\", memory: 500Mi, requests.example.com/dongle: \"3\", services.nodeports: \"1\", services.loadbalancers: \"1\"",
        ),
    );
    plinth.kubectl_with(
        &["-n", "compute", "apply", "-f", "-"],
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: idle}\nspec:\n  hard: {pods: \"5\"}\n  scopes: [BestEffort]\n",
    );
    plinth.eventually("the quotas' status", || {
        counted(&plinth, "compute", "cpu").as_deref() == Some("0")
    });
    plinth.kubectl_with(
        &["-n", "compute", "create", "-f", "-"],
        &pod(
            "fits",
            "{requests: {cpu: 500m, memory: 252Mi, example.com/dongle: \"2\"}, limits: {example.com/dongle: \"2\"}}",
            "restartPolicy: Never",
        ),
    );
    let used = |name: &str| counted(&plinth, "compute", name);
    assert_eq!(used("cpu").as_deref(), Some("500m"));
    assert_eq!(used("memory").as_deref(), Some("252Mi"));
    assert_eq!(used("requests.example.com/dongle").as_deref(), Some("2"));
    assert_eq!(used("pods").as_deref(), Some("1"));
    let out = plinth.kubectl_stdin(
        &["-n", "compute", "create", "-f", "-"],
        &pod(
            "too-big",
            "{requests: {cpu: 600m, memory: 300Mi}}",
            "restartPolicy: Never",
        ),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "pods \"too-big\" is forbidden: exceeded quota: objects, requested: cpu=600m,memory=300Mi, used: cpu=500m,memory=252Mi, limited: cpu=1,memory=500Mi"
        ),
        "{stderr}"
    );
    // A best-effort pod counts against the BestEffort quota; the other pod does not.
    plinth.kubectl_with(
        &["-n", "compute", "create", "-f", "-"],
        &pod("plain", "{}", "restartPolicy: Never"),
    );
    plinth.eventually("the scoped quota's count", || {
        let idle = plinth.json(&["-n", "compute", "get", "resourcequota", "idle"]);
        idle["status"]["used"]["pods"] == "1"
    });
    // Services: one node port fits, a load balancer's would not.
    plinth.kubectl(&[
        "-n", "compute", "create", "service", "nodeport", "np", "--tcp=80",
    ]);
    assert_eq!(used("services.nodeports").as_deref(), Some("1"));
    let out = plinth.kubectl_output(&[
        "-n",
        "compute",
        "create",
        "service",
        "loadbalancer",
        "lb",
        "--tcp=80",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exceeded quota: objects, requested: services.nodeports=1, used: services.nodeports=1, limited: services.nodeports=1"),
        "{stderr}"
    );
    // Deleting gives the usage back.
    plinth.kubectl(&[
        "-n",
        "compute",
        "delete",
        "pod",
        "fits",
        "--grace-period=0",
        "--force",
    ]);
    plinth.kubectl(&["-n", "compute", "delete", "service", "np"]);
    plinth.eventually("the usage given back", || {
        used("cpu").as_deref() == Some("0")
            && used("services.nodeports").as_deref() == Some("0")
            && used("pods").as_deref() == Some("1")
    });
}

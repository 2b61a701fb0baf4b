//! The built-in types added for kube 1.32's API surface, end to end through kubectl:
//! networking.k8s.io (Ingress, IngressClass, NetworkPolicy), scheduling.k8s.io
//! (PriorityClass), node.k8s.io (RuntimeClass) and storage.k8s.io's CSI types. Each is
//! created, read, listed, watched, updated, patched and deleted; bad input gets kube's 422
//! and nothing is stored; and the admission plugins that give them meaning (Priority,
//! RuntimeClass, DefaultIngressClass) act on pods and Ingresses as kube's do.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Backend, Plinth};
use serde_json::Value;

/// Every verb on one object of `resource`, written by `manifest` (a `-n` flag in `scope`
/// for namespaced ones): apply (create), get, list, a watch from the list's revision that
/// sees the update, replace (update), label (patch), delete — each as kubectl does it.
fn every_verb(plinth: &Plinth, resource: &str, name: &str, scope: &[&str], manifest: &str) {
    let with = |args: &[&str]| -> Vec<String> {
        scope
            .iter()
            .chain(args.iter())
            .map(|s| (*s).to_owned())
            .collect()
    };
    let run = |args: &[&str]| {
        let args = with(args);
        plinth.kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    plinth.kubectl_with(
        &with(&["apply", "-f", "-"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        manifest,
    );
    let got: Value = serde_json::from_str(&run(&["get", resource, name, "-o", "json"])).unwrap();
    assert_eq!(got["metadata"]["name"], name, "{resource}: {got}");
    // The list, read raw: kubectl's own `get -o json` of a list carries no resourceVersion.
    let group_version = got["apiVersion"].as_str().unwrap();
    let base = if group_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{group_version}")
    };
    let plural = resource.split('.').next().unwrap();
    let path = match got["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}"),
        None => format!("{base}/{plural}"),
    };
    let list: Value = serde_json::from_str(&plinth.kubectl(&["get", "--raw", &path])).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == name),
        "{resource} listed: {list}"
    );
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // Update: the object read back, annotated, written with `kubectl replace`.
    let mut replaced = got.clone();
    replaced["metadata"]["annotations"]["plinth.dev/replaced"] = Value::from("yes");
    plinth.kubectl_with(
        &with(&["replace", "-f", "-"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &replaced.to_string(),
    );
    // Patch.
    run(&["label", resource, name, "tier=test"]);
    let patched: Value =
        serde_json::from_str(&run(&["get", resource, name, "-o", "json"])).unwrap();
    assert_eq!(
        patched["metadata"]["annotations"]["plinth.dev/replaced"],
        "yes"
    );
    assert_eq!(patched["metadata"]["labels"]["tier"], "test");

    // Watch from the list's revision: the two changes arrive as MODIFIED events.
    let watched = plinth.kubectl(&[
        "get",
        "--raw",
        &format!("{path}?watch=true&resourceVersion={revision}&timeoutSeconds=2"),
    ]);
    let events: Vec<Value> = watched
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let modified = events
        .iter()
        .filter(|e| e["type"] == "MODIFIED" && e["object"]["metadata"]["name"] == name)
        .count();
    assert!(modified >= 2, "{resource}: watch saw {events:?}");

    run(&["delete", resource, name]);
    let gone = plinth.kubectl_fails(
        &with(&["get", resource, name])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(gone.contains("NotFound"), "{resource}: {gone}");
}

/// Applies `manifest`, expecting kube's 422 with each of `messages`; then checks that nothing
/// named `name` was stored.
fn refused(plinth: &Plinth, resource: &str, name: &str, manifest: &str, messages: &[&str]) {
    let out = plinth.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(!out.status.success(), "{resource} {name} was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is invalid"), "{resource}: {stderr}");
    for message in messages {
        assert!(
            stderr.contains(message),
            "{resource}: {message:?} not in {stderr}"
        );
    }
    let gone = plinth.kubectl_fails(&["get", resource, name]);
    assert!(gone.contains("NotFound"), "{resource}: {gone}");
}

#[test]
fn networking_types_take_every_verb_and_refuse_bad_input() {
    let plinth = Plinth::start(Backend::Embedded);
    every_verb(
        &plinth,
        "ingresses.networking.k8s.io",
        "web",
        &[],
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web}
spec:
  ingressClassName: nginx
  tls: [{hosts: [foo.example.com], secretName: web-tls}]
  rules:
  - host: foo.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#,
    );
    every_verb(
        &plinth,
        "ingressclasses.networking.k8s.io",
        "nginx",
        &[],
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nginx}\nspec: {controller: k8s.io/ingress-nginx}\n",
    );
    every_verb(
        &plinth,
        "networkpolicies.networking.k8s.io",
        "deny",
        &["-n", "default"],
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  egress: [{ports: [{port: 53}]}]\n",
    );

    // `kubectl create ingress` (its typed client speaks protobuf) and the table kubectl prints.
    plinth.kubectl(&[
        "create",
        "ingress",
        "shop",
        "--class=nginx",
        "--rule=shop.example.com/cart*=cart:8080,tls=shop-tls",
    ]);
    let table = plinth.kubectl(&["get", "ingress", "shop"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row[..5],
        ["shop", "nginx", "shop.example.com", "80,", "443"],
        "{table}"
    );
    let shop = plinth.json(&["get", "ingress", "shop"]);
    assert_eq!(
        shop["spec"]["rules"][0]["http"]["paths"][0]["pathType"],
        "Prefix"
    );
    assert_eq!(
        shop["spec"]["rules"][0]["http"]["paths"][0]["path"],
        "/cart"
    );

    // DefaultIngressClass: an Ingress naming no class gets the default one.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: standard\n  annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}\nspec: {controller: example.com/ingress}\n",
    );
    plinth.kubectl(&[
        "create",
        "ingress",
        "plain",
        "--rule=plain.example.com/=plain:80",
    ]);
    let plain = plinth.json(&["get", "ingress", "plain"]);
    assert_eq!(plain["spec"]["ingressClassName"], "standard");

    // NetworkPolicy defaults: policyTypes from the rules, each port's protocol TCP.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: dns}\nspec:\n  podSelector: {}\n  egress: [{ports: [{port: 53}]}]\n",
    );
    let dns = plinth.json(&["get", "networkpolicy", "dns"]);
    assert_eq!(
        dns["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    assert_eq!(dns["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");

    refused(
        &plinth,
        "ingress",
        "broken",
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: broken}
spec:
  rules:
  - host: 10.0.0.1
    http:
      paths:
      - {path: relative, pathType: Prefix, backend: {service: {name: svc}}}
      - {path: /x, backend: {service: {name: svc, port: {number: 80}}}}
      - {path: /y, pathType: Regex, backend: {service: {name: svc, port: {number: 70000}}}}
"#,
        &[
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            "spec.rules[0].http.paths[0].path: Invalid value: \"relative\": must be an absolute path",
            "spec.rules[0].http.paths[0].backend: Required value: port name or number is required",
            "spec.rules[0].http.paths[1].pathType: Required value: pathType must be specified",
            "spec.rules[0].http.paths[2].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            "spec.rules[0].http.paths[2].backend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ],
    );
    refused(
        &plinth,
        "ingress",
        "empty",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: empty}\nspec: {}\n",
        &[
            "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified",
        ],
    );
    refused(
        &plinth,
        "ingressclass",
        "nodomain",
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nodomain}\nspec: {controller: nginx}\n",
        &[
            "spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")",
        ],
    );
    refused(
        &plinth,
        "networkpolicy",
        "blocks",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: blocks}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{ipBlock: {cidr: 10.0.0.0/8, except: [192.168.0.0/16]}}, {}]\n    ports: [{protocol: ICMP, port: http, endPort: 90}]\n  policyTypes: [Sideways]\n",
        &[
            "spec.ingress[0].from[0].ipBlock.except[0]: Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`",
            "spec.ingress[0].from[1]: Required value: must specify a peer",
            "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
            "spec.ingress[0].ports[0].endPort: Invalid value: 90: may not be specified when `port` is non-numeric",
            "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\"",
        ],
    );
    // The controller of a class may not change.
    let changed = plinth.kubectl_fails(&[
        "patch",
        "ingressclass",
        "standard",
        "--type=merge",
        "-p",
        r#"{"spec":{"controller":"example.com/other"}}"#,
    ]);
    assert!(
        changed
            .contains("spec.controller: Invalid value: \"example.com/other\": field is immutable"),
        "{changed}"
    );
}

#[test]
fn priority_and_runtime_classes_admit_pods_as_kubes_plugins_do() {
    let plinth = Plinth::start(Backend::Embedded);
    // The system classes exist from the start.
    let classes = plinth.kubectl(&["get", "priorityclasses"]);
    assert!(
        classes.contains("system-node-critical      2000001000   false"),
        "{classes}"
    );
    assert!(
        classes.contains("system-cluster-critical   2000000000   false"),
        "{classes}"
    );
    every_verb(
        &plinth,
        "priorityclasses.scheduling.k8s.io",
        "batch-low",
        &[],
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: batch-low}\nvalue: 10\n",
    );
    every_verb(
        &plinth,
        "runtimeclasses.node.k8s.io",
        "gvisor",
        &[],
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n",
    );

    plinth.kubectl(&[
        "create",
        "priorityclass",
        "high",
        "--value=1000",
        "--description=urgent",
    ]);
    let high = plinth.json(&["get", "priorityclass", "high"]);
    assert_eq!(high["preemptionPolicy"], "PreemptLowerPriority");
    let too_high = plinth.kubectl_fails(&["create", "priorityclass", "huge", "--value=2000000000"]);
    assert!(
        too_high.contains(
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
        ),
        "{too_high}"
    );
    let reserved = plinth.kubectl_fails(&["create", "priorityclass", "system-mine", "--value=1"]);
    assert!(reserved.contains("metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"), "{reserved}");
    let frozen = plinth.kubectl_fails(&[
        "patch",
        "priorityclass",
        "high",
        "--type=merge",
        "-p",
        r#"{"value":5}"#,
    ]);
    assert!(
        frozen.contains("value: Forbidden: may not be changed in an update."),
        "{frozen}"
    );

    // Priority: no class → 0 and PreemptLowerPriority; a named class → its value; an unknown
    // class is forbidden; one global default at a time, given to pods that name none.
    plinth.kubectl(&["run", "plain", "--image=busybox"]);
    let plain = plinth.json(&["get", "pod", "plain"]);
    assert_eq!(plain["spec"]["priority"], 0);
    assert_eq!(plain["spec"]["preemptionPolicy"], "PreemptLowerPriority");
    plinth.kubectl(&[
        "run",
        "urgent",
        "--image=busybox",
        r#"--overrides={"spec":{"priorityClassName":"high"}}"#,
    ]);
    assert_eq!(
        plinth.json(&["get", "pod", "urgent"])["spec"]["priority"],
        1000
    );
    let unknown = plinth.kubectl_fails(&[
        "run",
        "lost",
        "--image=busybox",
        r#"--overrides={"spec":{"priorityClassName":"nope"}}"#,
    ]);
    assert!(
        unknown.contains("pods \"lost\" is forbidden: no PriorityClass with name nope was found"),
        "{unknown}"
    );
    let given = plinth.kubectl_fails(&[
        "run",
        "given",
        "--image=busybox",
        r#"--overrides={"spec":{"priorityClassName":"high","priority":7}}"#,
    ]);
    assert!(given.contains("the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"), "{given}");
    plinth.kubectl(&[
        "create",
        "priorityclass",
        "everyone",
        "--value=5",
        "--global-default",
    ]);
    let second = plinth.kubectl_fails(&[
        "create",
        "priorityclass",
        "also",
        "--value=6",
        "--global-default",
    ]);
    assert!(
        second.contains(
            "PriorityClass everyone is already marked as default. Only one default can exist"
        ),
        "{second}"
    );
    plinth.kubectl(&["run", "defaulted", "--image=busybox"]);
    let defaulted = plinth.json(&["get", "pod", "defaulted"]);
    assert_eq!(defaulted["spec"]["priority"], 5);
    assert_eq!(defaulted["spec"]["priorityClassName"], "everyone");
    for name in ["lost", "given"] {
        assert!(
            plinth
                .kubectl_fails(&["get", "pod", name])
                .contains("NotFound")
        );
    }

    // RuntimeClass: overhead, node selector and tolerations given; unknown classes and
    // conflicting selectors forbidden.
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: sandboxed}\nhandler: runsc\noverhead: {podFixed: {cpu: 250m, memory: 64Mi}}\nscheduling:\n  nodeSelector: {sandbox: \"yes\"}\n  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]\n",
    );
    plinth.kubectl(&[
        "run",
        "boxed",
        "--image=busybox",
        r#"--overrides={"spec":{"runtimeClassName":"sandboxed"}}"#,
    ]);
    let boxed = plinth.json(&["get", "pod", "boxed"]);
    assert_eq!(
        boxed["spec"]["overhead"],
        serde_json::json!({"cpu": "250m", "memory": "64Mi"})
    );
    assert_eq!(boxed["spec"]["nodeSelector"]["sandbox"], "yes");
    assert!(
        boxed["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "sandbox" && t["effect"] == "NoSchedule"),
        "{boxed}"
    );
    let missing = plinth.kubectl_fails(&[
        "run",
        "nowhere",
        "--image=busybox",
        r#"--overrides={"spec":{"runtimeClassName":"gone"}}"#,
    ]);
    assert!(
        missing.contains(
            "pods \"nowhere\" is forbidden: pod rejected: RuntimeClass \"gone\" not found"
        ),
        "{missing}"
    );
    let conflict = plinth.kubectl_fails(&[
        "run",
        "torn",
        "--image=busybox",
        r#"--overrides={"spec":{"runtimeClassName":"sandboxed","nodeSelector":{"sandbox":"no"}}}"#,
    ]);
    assert!(conflict.contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"), "{conflict}");
    refused(
        &plinth,
        "runtimeclass",
        "bad-handler",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: bad-handler}\nhandler: Not_A_Label\n",
        &["handler: Invalid value: \"Not_A_Label\": a lowercase RFC 1123 label must consist of"],
    );
}

#[test]
fn csi_types_are_stored_defaulted_and_validated() {
    let plinth = Plinth::start(Backend::Embedded);
    every_verb(
        &plinth,
        "csidrivers.storage.k8s.io",
        "hostpath.csi.k8s.io",
        &[],
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: hostpath.csi.k8s.io}\nspec: {podInfoOnMount: true}\n",
    );
    every_verb(
        &plinth,
        "csinodes.storage.k8s.io",
        "node-a",
        &[],
        "apiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: node-a}\nspec: {drivers: [{name: hostpath.csi.k8s.io, nodeID: node-a, topologyKeys: [topology.hostpath.csi/node]}]}\n",
    );
    every_verb(
        &plinth,
        "csistoragecapacities.storage.k8s.io",
        "capacity-a",
        &["-n", "default"],
        "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: capacity-a}\nstorageClassName: standard\ncapacity: 10Gi\n",
    );
    every_verb(
        &plinth,
        "volumeattachments.storage.k8s.io",
        "attach-a",
        &[],
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: attach-a}\nspec: {attacher: hostpath.csi.k8s.io, nodeName: node-a, source: {persistentVolumeName: pv-a}}\n",
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: defaults.csi.example.com}\nspec: {tokenRequests: [{audience: vault}]}\n",
    );
    let driver = plinth.json(&["get", "csidriver", "defaults.csi.example.com"]);
    assert_eq!(
        driver["spec"],
        serde_json::json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
            "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false, "seLinuxMount": false,
            "volumeLifecycleModes": ["Persistent"], "tokenRequests": [{"audience": "vault"}]})
    );
    let table = plinth.kubectl(&["get", "csidriver", "defaults.csi.example.com"]);
    assert!(table.contains("true             false            false             vault           false               Persistent"), "{table}");
    refused(
        &plinth,
        "csidriver",
        "bad.csi.example.com",
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: bad.csi.example.com}\nspec: {fsGroupPolicy: Sometimes, volumeLifecycleModes: [Forever], tokenRequests: [{audience: a, expirationSeconds: 60}]}\n",
        &[
            "spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
            "spec.volumeLifecycleModes: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
            "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
        ],
    );
    refused(
        &plinth,
        "volumeattachment",
        "no-source",
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: no-source}\nspec: {attacher: hostpath.csi.k8s.io, nodeName: node-a, source: {}}\n",
        &[
            "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        ],
    );
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata: {name: fixed}\nspec: {attacher: hostpath.csi.k8s.io, nodeName: node-a, source: {persistentVolumeName: pv-b}}\n",
    );
    let moved = plinth.kubectl_fails(&[
        "patch",
        "volumeattachment",
        "fixed",
        "--type=merge",
        "-p",
        r#"{"spec":{"nodeName":"node-b"}}"#,
    ]);
    assert!(moved.contains("field is immutable"), "{moved}");
    refused(
        &plinth,
        "csistoragecapacity",
        "negative",
        "apiVersion: storage.k8s.io/v1\nkind: CSIStorageCapacity\nmetadata: {name: negative, namespace: default}\nstorageClassName: Not_A_Class\ncapacity: -1Gi\n",
        &[
            "storageClassName: Invalid value: \"Not_A_Class\"",
            "capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0",
        ],
    );
}

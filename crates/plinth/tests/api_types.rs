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
    // Nor may an update make a second default (the default itself may change).
    plinth.kubectl(&["create", "priorityclass", "plain", "--value=3"]);
    let updated = plinth.kubectl_fails(&[
        "patch",
        "priorityclass",
        "plain",
        "--type=merge",
        "-p",
        r#"{"globalDefault":true}"#,
    ]);
    assert!(
        updated.contains(r#"priorityclasses.scheduling.k8s.io "plain" is forbidden: PriorityClass everyone is already marked as default. Only one default can exist"#),
        "{updated}"
    );
    assert_eq!(
        plinth.json(&["get", "priorityclass", "plain", "-o", "json"])["globalDefault"],
        serde_json::Value::Null
    );
    plinth.kubectl(&[
        "patch",
        "priorityclass",
        "everyone",
        "--type=merge",
        "-p",
        r#"{"description":"the default"}"#,
    ]);
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

#[test]
fn replication_controllers_keep_their_pods_scale_and_cascade() {
    let plinth = Plinth::start(Backend::Embedded);
    // The upstream e2e suite's first request.
    let system: Value = serde_json::from_str(&plinth.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/kube-system/replicationcontrollers",
    ]))
    .unwrap();
    assert_eq!(system["kind"], "ReplicationControllerList");
    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: web}\nspec:\n  replicas: 2\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    // Defaults: the selector and the labels from the template.
    let rc = plinth.json(&["get", "rc", "web"]);
    assert_eq!(rc["spec"]["selector"], serde_json::json!({"app": "web"}));
    assert_eq!(rc["metadata"]["labels"], serde_json::json!({"app": "web"}));
    let pods = |plinth: &Plinth| {
        plinth.json(&["get", "pods", "-l", "app=web"])["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .count()
    };
    plinth.eventually("two pods", || pods(&plinth) == 2);
    let pod = &plinth.json(&["get", "pods", "-l", "app=web"])["items"][0];
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["kind"],
        "ReplicationController"
    );
    assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
    plinth.kubectl(&["scale", "rc", "web", "--replicas=3"]);
    plinth.eventually("three pods, counted in the status", || {
        pods(&plinth) == 3 && plinth.json(&["get", "rc", "web"])["status"]["replicas"] == 3
    });
    let scale = plinth.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/replicationcontrollers/web/scale",
    ]);
    let scale: Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["status"]["selector"], "app=web");
    let table = plinth.kubectl(&["get", "rc", "web", "-o", "wide"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[0], row[1], row[2], row[5], row[6], row[7]),
        ("web", "3", "3", "c", "busybox", "app=web"),
        "{table}"
    );
    // `bindings`: a Binding without the pod's name, or without a target, is kube's 422; one
    // for a pod that does not exist a 404; nothing is bound.
    let bind = |body: &str| {
        let out = plinth.kubectl_stdin(
            &[
                "create",
                "--raw",
                "/api/v1/namespaces/default/bindings",
                "-f",
                "-",
            ],
            body,
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let nameless = bind(
        r#"{"apiVersion":"v1","kind":"Binding","metadata":{},"target":{"kind":"Node","name":"n"}}"#,
    );
    assert!(
        nameless.contains("metadata.name: Required value"),
        "{nameless}"
    );
    let pod_name = plinth.json(&["get", "pods", "-l", "app=web"])["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let targetless = bind(&format!(
        r#"{{"apiVersion":"v1","kind":"Binding","metadata":{{"name":"{pod_name}"}},"target":{{}}}}"#
    ));
    assert!(
        targetless.contains("target.name: Required value"),
        "{targetless}"
    );
    assert!(plinth.json(&["get", "pod", &pod_name])["spec"]["nodeName"].is_null());
    let nobody = bind(
        r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"nobody"},"target":{"kind":"Node","name":"n"}}"#,
    );
    assert!(
        nobody.contains("NotFound") || nobody.contains("not found"),
        "{nobody}"
    );
    refused(
        &plinth,
        "rc",
        "mismatch",
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: mismatch}\nspec:\n  selector: {app: other}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
        &[
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`",
        ],
    );
    plinth.kubectl(&["delete", "rc", "web"]);
    plinth.eventually("the pods go with their controller", || pods(&plinth) == 0);
}

#[test]
fn component_statuses_report_the_storage_and_the_controllers() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.eventually("every component healthy", || {
        let out = plinth.kubectl_output(&["get", "componentstatuses"]);
        let table = String::from_utf8_lossy(&out.stdout);
        ["controller-manager", "scheduler", "etcd-0"]
            .iter()
            .all(|name| {
                table
                    .lines()
                    .any(|l| l.starts_with(name) && l.split_whitespace().nth(1) == Some("Healthy"))
            })
    });
    let etcd = plinth.json(&["get", "cs", "etcd-0"]);
    assert_eq!(etcd["conditions"][0]["type"], "Healthy");
    assert_eq!(etcd["conditions"][0]["status"], "True");
    let missing = plinth.kubectl_fails(&["get", "cs", "nothing"]);
    assert!(missing.contains("NotFound"), "{missing}");
    let refused = plinth.kubectl_fails(&["delete", "cs", "etcd-0"]);
    assert!(
        refused.contains("MethodNotAllowed") || refused.contains("not allowed"),
        "{refused}"
    );
}

#[test]
fn token_reviews_answer_for_each_authenticator_and_audience() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.eventually("the default ServiceAccount", || {
        plinth
            .kubectl_output(&["get", "serviceaccount", "default"])
            .status
            .success()
    });
    let review = |token: &str, audiences: &[&str]| -> Value {
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences}});
        serde_json::from_str(
            &plinth.kubectl_with(&["create", "-f", "-", "-o", "json"], &body.to_string()),
        )
        .unwrap()
    };
    let token = plinth.kubectl(&["create", "token", "default", "--audience=vault"]);
    let token = token.trim();
    let answered = review(token, &["vault", "other"]);
    assert_eq!(answered["status"]["authenticated"], true, "{answered}");
    assert_eq!(
        answered["status"]["user"]["username"],
        "system:serviceaccount:default:default"
    );
    assert_eq!(
        answered["status"]["audiences"],
        serde_json::json!(["vault"])
    );
    let elsewhere = review(token, &["other"]);
    // kube leaves `authenticated: false` out (omitempty).
    assert_eq!(
        elsewhere["status"].get("authenticated"),
        None,
        "{elsewhere}"
    );
    assert!(
        elsewhere["status"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
    );
    // A token for the API server, asked without audiences.
    let server_token = plinth.kubectl(&["create", "token", "default"]);
    let plain = review(server_token.trim(), &[]);
    assert_eq!(plain["status"]["authenticated"], true, "{plain}");
    assert_eq!(
        plain["status"]["audiences"],
        serde_json::json!(["https://kubernetes.default.svc.cluster.local"])
    );
    // The admin's token (the kubeconfig's).
    let config = std::fs::read_to_string(&plinth.kubeconfig).unwrap();
    let admin = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(str::trim)
        .expect("the kubeconfig's token");
    let admin_review = review(admin, &[]);
    assert_eq!(
        admin_review["status"]["user"]["username"], "plinth-admin",
        "{admin_review}"
    );
    // A token no authenticator here claims: not authenticated, and no error (an error makes
    // webhook token authenticators — controller-runtime's metrics filter — answer 500).
    let bogus = review("not-a-token", &[]);
    assert_eq!(bogus["status"], serde_json::json!({"user": {}}), "{bogus}");
    let empty = plinth.kubectl_stdin(
        &["create", "-f", "-"],
        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{}}"#,
    );
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(
        stderr.contains("token is required for TokenReview in authentication.k8s.io"),
        "{stderr}"
    );
}

#[test]
fn the_default_roles_are_kubes_and_cover_every_group() {
    let plinth = Plinth::start(Backend::Embedded);
    for role in [
        "system:auth-delegator",
        "system:kube-scheduler",
        "system:controller:replicaset-controller",
        "system:aggregate-to-edit",
        "system:node-proxier",
    ] {
        plinth.kubectl(&["get", "clusterrole", role]);
    }
    plinth.kubectl(&[
        "get",
        "role",
        "-n",
        "kube-system",
        "system:controller:bootstrap-signer",
    ]);
    plinth.kubectl(&["create", "namespace", "team"]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "alice-admin",
        "--clusterrole=admin",
        "--user=alice",
        "-n",
        "team",
    ]);
    plinth.kubectl(&[
        "create",
        "rolebinding",
        "bob-view",
        "--clusterrole=view",
        "--user=bob",
        "-n",
        "team",
    ]);
    let can = |user: &str, verb: &str, resource: &str| {
        let out =
            plinth.kubectl_output(&["auth", "can-i", verb, resource, "-n", "team", "--as", user]);
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    plinth.eventually("admin's aggregated rules cover the apps group", || {
        can("alice", "create", "deployments.apps")
    });
    for (verb, resource) in [
        ("create", "ingresses.networking.k8s.io"),
        ("delete", "jobs.batch"),
        ("update", "horizontalpodautoscalers.autoscaling"),
        ("create", "poddisruptionbudgets.policy"),
        ("create", "networkpolicies.networking.k8s.io"),
    ] {
        assert!(can("alice", verb, resource), "alice may {verb} {resource}");
    }
    assert!(can("bob", "list", "deployments.apps"));
    assert!(!can("bob", "create", "deployments.apps"));
    assert!(!can("bob", "get", "secrets"));
    // A rule an administrator adds to a default role is aggregated like the others.
    plinth.kubectl(&[
        "patch",
        "clusterrole",
        "system:aggregate-to-view",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}}]"#,
    ]);
    plinth.eventually("view aggregates the added rule", || {
        can("bob", "get", "secrets")
    });
}

/// `kubectl api-resources` on a kube 1.32 API server with its default groups (names, short
/// names, versions, scope, kinds): every row is served by Plinth the same way.
const KUBE_API_RESOURCES: &str = include_str!("data/kube-1.32-api-resources.txt");

#[test]
fn kubectl_api_resources_lists_every_resource_kube_serves_by_default() {
    let plinth = Plinth::start(Backend::Embedded);
    let listed = plinth.kubectl(&["api-resources", "--no-headers"]);
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for expected in KUBE_API_RESOURCES.lines().filter(|l| !l.starts_with('#')) {
        let want: Vec<&str> = expected.split_whitespace().collect();
        let (name, short, version, namespaced, kind) =
            (want[0], want[1], want[2], want[3], want[4]);
        let found = rows.iter().any(|row| {
            let row_short = if row.len() == 5 { row[1] } else { "-" };
            let tail = &row[row.len() - 3..];
            row[0] == name && row_short == short && tail == [version, namespaced, kind]
        });
        assert!(found, "{expected} not in:\n{listed}");
    }
    // The verbs of the resources that are not plain stored objects.
    let wide = plinth.kubectl(&["api-resources", "-o", "wide", "--no-headers"]);
    for (name, version, verbs) in [
        ("bindings", "v1", "create"),
        ("componentstatuses", "v1", "get,list"),
        ("tokenreviews", "authentication.k8s.io/v1", "create"),
        ("selfsubjectreviews", "authentication.k8s.io/v1", "create"),
    ] {
        let row = wide
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")) && l.contains(version))
            .unwrap_or_else(|| panic!("{name} in {wide}"));
        // NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS [CATEGORIES]
        let fields: Vec<&str> = row.split_whitespace().collect();
        let kind_at = fields.iter().position(|f| *f == version).unwrap() + 2;
        assert_eq!(fields[kind_at + 1..].join(" "), verbs, "{name}: {row}");
    }
    // Discovery lists the subresources clients check before calling them.
    let core: Value = serde_json::from_str(&plinth.kubectl(&["get", "--raw", "/api/v1"])).unwrap();
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for sub in [
        "pods/log",
        "pods/exec",
        "pods/attach",
        "pods/portforward",
        "pods/eviction",
        "pods/binding",
        "pods/status",
        "serviceaccounts/token",
        "nodes/proxy",
        "replicationcontrollers/scale",
    ] {
        assert!(names.contains(&sub), "{sub} in {names:?}");
    }
    let eviction = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/eviction")
        .unwrap();
    assert_eq!(
        (
            eviction["group"].as_str(),
            eviction["version"].as_str(),
            eviction["kind"].as_str()
        ),
        (Some("policy"), Some("v1"), Some("Eviction"))
    );
}

/// The field selectors kube's conversion functions accept for each built-in type: Services
/// by type and cluster IP, ReplicationControllers by replicas, Jobs by `status.successful`
/// (which reads `status.succeeded`), events.k8s.io Events by `regarding.*`, pods by the old
/// `spec.host`; each type refuses the others with its own message, and one with no
/// conversion of its own with the scheme's default.
#[test]
fn each_type_selects_by_the_fields_kubes_conversions_accept() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "fields"]);
    let n = ["-n", "fields"];
    let run = |args: &[&str]| {
        let args: Vec<&str> = n.iter().chain(args).copied().collect();
        plinth.kubectl(&args)
    };
    let fails = |args: &[&str]| {
        let args: Vec<&str> = n.iter().chain(args).copied().collect();
        plinth.kubectl_fails(&args)
    };
    run(&["create", "service", "clusterip", "inner", "--tcp=80:80"]);
    run(&["create", "service", "nodeport", "outer", "--tcp=81:81"]);
    assert_eq!(
        run(&[
            "get",
            "services",
            "--field-selector",
            "spec.type=NodePort",
            "-o",
            "name"
        ])
        .trim(),
        "service/outer"
    );
    let inner: Value =
        serde_json::from_str(&run(&["get", "service", "inner", "-o", "json"])).unwrap();
    let ip = inner["spec"]["clusterIP"].as_str().unwrap();
    assert_eq!(
        run(&[
            "get",
            "services",
            "--field-selector",
            &format!("spec.clusterIP={ip}"),
            "-o",
            "name"
        ])
        .trim(),
        "service/inner"
    );
    let service = fails(&["get", "services", "--field-selector", "spec.ports=1"]);
    assert!(
        service.contains("field label not supported: spec.ports"),
        "{service}"
    );

    plinth.kubectl_with(
        &["-n", "fields", "apply", "-f", "-"],
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: none}\nspec:\n  replicas: 0\n  selector: {app: none}\n  template:\n    metadata: {labels: {app: none}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    assert_eq!(
        run(&[
            "get",
            "rc",
            "--field-selector",
            "status.replicas=0",
            "-o",
            "name"
        ])
        .trim(),
        "replicationcontroller/none"
    );
    assert_eq!(
        run(&[
            "get",
            "rc",
            "--field-selector",
            "status.replicas!=0",
            "-o",
            "name"
        ])
        .trim(),
        ""
    );

    plinth.kubectl_with(
        &["-n", "fields", "apply", "-f", "-"],
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: later}\nspec:\n  suspend: true\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n",
    );
    assert_eq!(
        run(&[
            "get",
            "jobs",
            "--field-selector",
            "status.successful=0",
            "-o",
            "name"
        ])
        .trim(),
        "job.batch/later"
    );
    let job = fails(&["get", "jobs", "--field-selector", "status.succeeded=0"]);
    assert!(
        job.contains(r#"field label "status.succeeded" not supported for Job"#),
        "{job}"
    );

    plinth.kubectl_with(
        &["-n", "fields", "apply", "-f", "-"],
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: seen}\neventTime: \"2026-12-03T10:00:00.000000Z\"\nreportingController: example.com/watcher\nreportingInstance: w-1\naction: Look\nreason: Seen\ntype: Normal\nregarding: {kind: ConfigMap, name: watched, namespace: fields}\n",
    );
    let by_regarding: Value = serde_json::from_str(&plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/events.k8s.io/v1/namespaces/fields/events?fieldSelector=regarding.name%3Dwatched,reportingController%3Dexample.com%2Fwatcher",
    ]))
    .unwrap();
    assert_eq!(
        by_regarding["items"][0]["metadata"]["name"], "seen",
        "{by_regarding}"
    );
    let by_core = run(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=watched",
        "-o",
        "name",
    ]);
    assert_eq!(by_core.trim(), "event/seen");
    let events = plinth.kubectl_fails(&[
        "get",
        "--raw",
        "/apis/events.k8s.io/v1/namespaces/fields/events?fieldSelector=involvedObject.name%3Dwatched",
    ]);
    assert!(
        events.contains("field label not supported: involvedObject.name"),
        "{events}"
    );

    let node = plinth.kubectl_fails(&["get", "nodes", "--field-selector", "metadata.namespace=x"]);
    assert!(
        node.contains("field label not supported: metadata.namespace"),
        "{node}"
    );
    let pods = run(&[
        "get",
        "pods",
        "--field-selector",
        "spec.host=nowhere",
        "-o",
        "name",
    ]);
    assert_eq!(pods.trim(), "");
    let pod = fails(&["get", "pods", "--field-selector", "spec.containers=x"]);
    assert!(
        pod.contains("field label not supported: spec.containers"),
        "{pod}"
    );
    let default = fails(&[
        "get",
        "deployments",
        "--field-selector",
        "status.replicas=0",
    ]);
    assert!(
        default.contains(
            r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#
        ),
        "{default}"
    );
}

/// `namespaces/<n>/finalize` as kube serves it: an update that changes `spec.finalizers` and
/// nothing else (a GET is a 405), so that a finalizer of one's own holds a deleted namespace
/// until it is taken out there.
#[test]
fn namespace_finalize_changes_only_the_finalizers() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "held"]);
    let mut namespace = plinth.json(&["get", "namespace", "held", "-o", "json"]);
    namespace["spec"]["finalizers"] = serde_json::json!(["kubernetes", "example.com/hold"]);
    namespace["metadata"]["labels"]["changed"] = "yes".into();
    let body = namespace.to_string();
    let written: Value = serde_json::from_str(&plinth.kubectl_with(
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/held/finalize",
            "-f",
            "-",
        ],
        &body,
    ))
    .unwrap();
    assert_eq!(
        written["spec"]["finalizers"],
        serde_json::json!(["kubernetes", "example.com/hold"]),
        "{written}"
    );
    let stored = plinth.json(&["get", "namespace", "held", "-o", "json"]);
    assert!(
        stored["metadata"]["labels"].get("changed").is_none(),
        "{stored}"
    );
    assert_eq!(stored["spec"]["finalizers"][1], "example.com/hold");
    let get = plinth.kubectl_fails(&["get", "--raw", "/api/v1/namespaces/held/finalize"]);
    assert!(
        get.contains("MethodNotAllowed") || get.contains("does not allow this method"),
        "{get}"
    );
    let discovery: Value =
        serde_json::from_str(&plinth.kubectl(&["get", "--raw", "/api/v1"])).unwrap();
    let finalize = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces/finalize")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        finalize["verbs"],
        serde_json::json!(["update"]),
        "{discovery}"
    );

    plinth.kubectl(&["delete", "namespace", "held", "--wait=false"]);
    plinth.eventually(
        "the namespace controller to take out its own finalizer",
        || {
            let held = plinth.json(&["get", "namespace", "held", "-o", "json"]);
            held["spec"]["finalizers"] == serde_json::json!(["example.com/hold"])
        },
    );
    let mut held = plinth.json(&["get", "namespace", "held", "-o", "json"]);
    assert_eq!(held["status"]["phase"], "Terminating", "{held}");
    held["spec"]["finalizers"] = serde_json::json!([]);
    plinth.kubectl_with(
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/held/finalize",
            "-f",
            "-",
        ],
        &held.to_string(),
    );
    plinth.eventually("the released namespace to go", || {
        !plinth
            .kubectl_output(&["get", "namespace", "held"])
            .status
            .success()
    });
}

/// PodSecurity admission as kube's built-in plugin: a namespace's enforce label refuses a pod
/// that breaks its level (kube's message, check by check), warns of a workload whose template
/// would, and its ReplicaSet's pods are refused; the configured defaults warn of and audit
/// unlabelled namespaces; a label that does not parse is a 422; a stricter level warns of the
/// existing pods that break it; an exempt namespace is told its policy is ignored.
#[test]
fn pod_security_labels_enforce_audit_and_warn_as_kubes_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults: {warn: baseline, audit: baseline}\n    exemptions: {namespaces: [exempt]}\n",
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let (plinth, _dir, log) = Plinth::start_audited_with(
        Backend::Embedded,
        dir,
        &["--admission-control-config-file", &config],
    );
    let privileged = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, '3600']\n    securityContext: {{privileged: true}}\n"
        )
    };
    plinth.kubectl(&["create", "namespace", "locked"]);
    plinth.kubectl(&[
        "label",
        "namespace",
        "locked",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let refused = plinth.kubectl_stdin(&["-n", "locked", "apply", "-f", "-"], &privileged("root"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(r#"pods "root" is forbidden: violates PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#),
        "{stderr}"
    );
    assert!(
        !plinth
            .kubectl_output(&["-n", "locked", "get", "pod", "root"])
            .status
            .success()
    );
    plinth.kubectl_with(
        &["-n", "locked", "apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hardened}\nspec:\n  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, '3600']\n    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n",
    );

    // A workload is admitted with a warning; its ReplicaSet's pods are refused.
    let workload = plinth.kubectl_stdin(
        &["-n", "locked", "apply", "-f", "-"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: hostnet}\nspec:\n  selector: {matchLabels: {app: hostnet}}\n  template:\n    metadata: {labels: {app: hostnet}}\n    spec:\n      hostNetwork: true\n      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n      containers:\n      - name: c\n        image: busybox\n        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n",
    );
    assert!(workload.status.success());
    let stderr = String::from_utf8_lossy(&workload.stderr);
    assert!(
        stderr.contains(r#"Warning: would violate PodSecurity "restricted:latest": host namespaces (hostNetwork=true)"#),
        "{stderr}"
    );
    plinth.eventually("the ReplicaSet to report its refused pods", || {
        let sets = plinth.json(&["-n", "locked", "get", "replicasets", "-o", "json"]);
        sets["items"][0]["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "ReplicaFailure"
                        && c["message"].as_str().unwrap_or_default().contains("violates PodSecurity \"restricted:latest\": host namespaces (hostNetwork=true)")
                })
            })
    });

    // The configured defaults: unlabelled namespaces warn of and audit baseline.
    let warned = plinth.kubectl_stdin(&["apply", "-f", "-"], &privileged("loud"));
    assert!(warned.status.success());
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(
        stderr.contains(r#"Warning: would violate PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#),
        "{stderr}"
    );
    plinth.kubectl(&["delete", "pod", "loud", "--wait=false"]);
    let audited = common::audit_events(&log).into_iter().any(|e| {
        e["verb"] == "create"
            && e["objectRef"]["name"] == "loud"
            && e["annotations"]["pod-security.kubernetes.io/audit-violations"]
                .as_str()
                .is_some_and(|v| {
                    v.starts_with(r#"would violate PodSecurity "baseline:latest": privileged"#)
                })
    });
    assert!(audited, "no audit-violations annotation for the pod");

    let bad_label = plinth.kubectl_fails(&[
        "label",
        "namespace",
        "locked",
        "pod-security.kubernetes.io/audit=bogus",
    ]);
    assert!(
        bad_label.contains(r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#),
        "{bad_label}"
    );
    let bad_version = plinth.kubectl_fails(&[
        "label",
        "namespace",
        "locked",
        "pod-security.kubernetes.io/enforce-version=1.30",
    ]);
    assert!(
        bad_version.contains(r#"Invalid value: "1.30": must be "latest" or "v1.x""#),
        "{bad_version}"
    );

    // Tightening a namespace warns of the pods already there.
    plinth.kubectl(&["create", "namespace", "loose"]);
    for name in ["web-b", "web-a"] {
        plinth.kubectl_with(&["-n", "loose", "apply", "-f", "-"], &privileged(name));
    }
    let tightened = plinth.kubectl_output(&[
        "label",
        "namespace",
        "loose",
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    assert!(tightened.status.success());
    let stderr = String::from_utf8_lossy(&tightened.stderr);
    assert!(
        stderr.contains(r#"Warning: existing pods in namespace "loose" violate the new PodSecurity enforce level "baseline:latest""#)
            && stderr.contains("Warning: web-a (and 1 other pod): privileged"),
        "{stderr}"
    );

    // An exempt namespace: the policy is ignored, and the labeller told so.
    plinth.kubectl(&["create", "namespace", "exempt"]);
    let exempt = plinth.kubectl_output(&[
        "label",
        "namespace",
        "exempt",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let stderr = String::from_utf8_lossy(&exempt.stderr);
    assert!(
        stderr.contains(r#"Warning: namespace "exempt" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"#),
        "{stderr}"
    );
    plinth.kubectl_with(
        &["-n", "exempt", "apply", "-f", "-"],
        &privileged("allowed"),
    );
    for (ns, pod) in [
        ("loose", "web-a"),
        ("loose", "web-b"),
        ("exempt", "allowed"),
        ("locked", "hardened"),
    ] {
        plinth.kubectl(&["-n", ns, "delete", "pod", pod, "--wait=false"]);
    }
}

/// JSON as kube writes it: a built-in object's keys in its Go struct's order (`kind`,
/// `apiVersion`, `metadata` with `name` first, `spec` before `status`, each nested struct in
/// its own order) in a get, a list, a watch and an error; a custom resource's sorted, as
/// Go writes the map it is.
#[test]
fn json_keys_come_in_kubes_order() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&[
        "create",
        "deployment",
        "ordered",
        "--image=busybox",
        "--replicas=0",
    ]);
    let deployment = plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/ordered",
    ]);
    assert!(
        deployment.starts_with(r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"ordered","namespace":"default","uid":"#),
        "{deployment}"
    );
    let position = |text: &str, key: &str| {
        text.find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("{key} in {text}"))
    };
    for (before, after) in [
        ("spec", "status"),
        ("replicas", "selector"),
        ("selector", "template"),
        ("template", "strategy"),
        ("strategy", "revisionHistoryLimit"),
        ("containers", "restartPolicy"),
    ] {
        assert!(
            position(&deployment, before) < position(&deployment, after),
            "{before} before {after}: {deployment}"
        );
    }
    let list = plinth.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/configmaps?limit=1",
    ]);
    assert!(
        list.starts_with(r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"#)
            && list.contains(r#""items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"kube-root-ca.crt""#),
        "{list}"
    );
    // An error's Status, as kubectl's verbose log shows the body.
    let verbose = plinth.kubectl_output(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/nowhere",
        "-v=8",
    ]);
    let log = String::from_utf8_lossy(&verbose.stderr);
    assert!(
        // (kubectl logs the body quoted.)
        log.contains(r#"body="{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":"#)
            && log.contains(r#"\"reason\":\"NotFound\",\"details\":{\"name\":\"nowhere\",\"kind\":\"pods\"},\"code\":404}"#),
        "{log}"
    );

    plinth.kubectl_with(
        &["apply", "-f", "-"],
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gadgets.order.example.com}\nspec:\n  group: order.example.com\n  scope: Namespaced\n  names: {plural: gadgets, singular: gadget, kind: Gadget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n",
    );
    plinth.eventually("the CRD to be served", || {
        plinth
            .kubectl_stdin(&["apply", "-f", "-"], "apiVersion: order.example.com/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {zeta: 1, alpha: 2}\n")
            .status
            .success()
    });
    let gadget = plinth.kubectl(&[
        "get",
        "--raw",
        "/apis/order.example.com/v1/namespaces/default/gadgets/g",
    ]);
    assert!(
        gadget.starts_with(
            r#"{"apiVersion":"order.example.com/v1","kind":"Gadget","metadata":{"annotations":"#
        ) && gadget.ends_with(r#""spec":{"alpha":2,"zeta":1}}"#),
        "{gadget}"
    );
}

/// `kubectl auth can-i --list` for users bound to `admin`, `edit` and `view`: every permission
/// of kube 1.32's aggregated roles (the rules of `system:aggregate-to-{admin,edit,view}`, which
/// kube's `admin`, `edit` and `view` gather) is listed, as on a kube cluster.
#[test]
fn can_i_list_shows_kubes_admin_edit_and_view_permissions() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&["create", "namespace", "team"]);
    for (user, role) in [("alice", "admin"), ("carl", "edit"), ("bob", "view")] {
        plinth.kubectl(&[
            "create",
            "rolebinding",
            &format!("{user}-{role}"),
            &format!("--clusterrole={role}"),
            &format!("--user={user}"),
            "-n",
            "team",
        ]);
    }
    let policy: Value =
        serde_json::from_str(include_str!("../../plinth-auth/src/bootstrap-policy.json")).unwrap();
    let rules_of = |role: &str| -> Vec<Value> {
        policy["clusterRoles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metadata"]["name"] == role)
            .map(|r| r["rules"].as_array().unwrap().clone())
            .unwrap()
    };
    // Each role gathers its own aggregate and the weaker ones'.
    let gathered = [
        (
            "alice",
            vec![
                "system:aggregate-to-admin",
                "system:aggregate-to-edit",
                "system:aggregate-to-view",
            ],
        ),
        (
            "carl",
            vec!["system:aggregate-to-edit", "system:aggregate-to-view"],
        ),
        ("bob", vec!["system:aggregate-to-view"]),
    ];
    for (user, roles) in gathered {
        let mut expected: Vec<(String, String)> = Vec::new();
        for rule in roles.iter().flat_map(|r| rules_of(r)) {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    let (group, resource) = (group.as_str().unwrap(), resource.as_str().unwrap());
                    // kubectl names a subresource after its resource's group: `deployments.apps/scale`.
                    let (base, sub) = resource
                        .split_once('/')
                        .map_or((resource, String::new()), |(b, s)| (b, format!("/{s}")));
                    let name = if group.is_empty() {
                        resource.to_owned()
                    } else {
                        format!("{base}.{group}{sub}")
                    };
                    for verb in rule["verbs"].as_array().unwrap() {
                        expected.push((name.clone(), verb.as_str().unwrap().to_owned()));
                    }
                }
            }
        }
        plinth.eventually(&format!("{user}'s list to show every permission"), || {
            let listed = plinth.kubectl(&["auth", "can-i", "--list", "-n", "team", "--as", user]);
            // Each row: resource, non-resource URLs, resource names, verbs.
            let rows: Vec<(String, String)> = listed
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let resource = line.split_whitespace().next()?.to_owned();
                    let verbs = line.rsplit_once('[')?.1.trim_end_matches(']').to_owned();
                    Some((resource, verbs))
                })
                .collect();
            expected.iter().all(|(resource, verb)| {
                rows.iter().any(|(r, verbs)| {
                    r == resource && (verbs.split(' ').any(|v| v == verb || v == "*"))
                })
            })
        });
    }
    // And nothing more than view allows for bob.
    let listed = plinth.kubectl(&["auth", "can-i", "--list", "-n", "team", "--as", "bob"]);
    assert!(
        !listed.lines().any(|l| l.starts_with("secrets ")),
        "{listed}"
    );
}

/// `kubectl create ingress|poddisruptionbudget|priorityclass`: the objects kubectl's
/// generators write are stored as kube stores them, and shown in kube's columns.
#[test]
fn kubectl_create_generators_for_the_new_types() {
    let plinth = Plinth::start(Backend::Embedded);
    plinth.kubectl(&[
        "create",
        "ingress",
        "simple",
        "--class=default",
        "--rule=foo.com/bar*=svc1:8080,tls=my-cert",
    ]);
    let ingress = plinth.json(&["get", "ingress", "simple", "-o", "json"]);
    assert_eq!(ingress["spec"]["ingressClassName"], "default");
    assert_eq!(ingress["spec"]["rules"][0]["host"], "foo.com");
    let path = &ingress["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(
        (path["path"].as_str(), path["pathType"].as_str()),
        (Some("/bar"), Some("Prefix")),
        "{ingress}"
    );
    assert_eq!(path["backend"]["service"]["port"]["number"], 8080);
    assert_eq!(ingress["spec"]["tls"][0]["secretName"], "my-cert");
    let table = plinth.kubectl(&["get", "ingress", "simple"]);
    assert!(
        table.starts_with("NAME") && table.contains("foo.com") && table.contains("80, 443"),
        "{table}"
    );

    plinth.kubectl(&[
        "create",
        "poddisruptionbudget",
        "my-pdb",
        "--selector=app=rails",
        "--min-available=1",
    ]);
    let pdb = plinth.json(&["get", "pdb", "my-pdb", "-o", "json"]);
    assert_eq!(pdb["spec"]["minAvailable"], 1, "{pdb}");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app"], "rails");
    plinth.eventually("the disruption controller to report the budget", || {
        let pdb = plinth.json(&["get", "pdb", "my-pdb", "-o", "json"]);
        pdb["status"]["observedGeneration"] == 1 && pdb["status"]["disruptionsAllowed"] == 0
    });
    let table = plinth.kubectl(&["get", "pdb", "my-pdb"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ],
        "{table}"
    );
    let bad = plinth.kubectl_fails(&[
        "create",
        "poddisruptionbudget",
        "both",
        "--selector=app=x",
        "--min-available=1",
        "--max-unavailable=1",
    ]);
    assert!(
        bad.contains("min-available and max-unavailable cannot be both specified"),
        "{bad}"
    );

    plinth.kubectl(&[
        "create",
        "priorityclass",
        "high",
        "--value=1000",
        "--description=important",
        "--preemption-policy=Never",
    ]);
    let class = plinth.json(&["get", "priorityclass", "high", "-o", "json"]);
    assert_eq!(
        (class["value"].as_i64(), class["preemptionPolicy"].as_str()),
        (Some(1000), Some("Never"))
    );
    let table = plinth.kubectl(&["get", "priorityclass", "high"]);
    assert!(
        table.lines().next().unwrap().split_whitespace().eq([
            "NAME",
            "VALUE",
            "GLOBAL-DEFAULT",
            "AGE",
            "PREEMPTIONPOLICY"
        ]),
        "{table}"
    );
}

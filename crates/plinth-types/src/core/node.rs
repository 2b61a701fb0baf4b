//! core/v1 Node: registered and kept up by node agents (`status` through `/status`), kubectl's
//! columns, taints validated.

use plinth_core::Cause;
use serde_json::{Value, json};

use plinth_registry::resources::{ResourceDef, age_cell, column};
use plinth_registry::schema::{Schema, array, obj, top};
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

/// The `nodes` resource.
pub fn resource() -> ResourceDef {
    ResourceDef::new("", "v1", "Node", "nodes")
        .cluster_scoped()
        .short_names(&["no"])
        .with_status()
        .connect("proxy", proxy)
        .discovered("proxy", Some(("", "v1", "NodeProxyOptions")), &["create", "delete", "get", "patch", "update"])
        .selectable(&["spec.unschedulable"])
        .field_labels(&[("metadata.name", "metadata.name"), ("spec.unschedulable", "spec.unschedulable")])
        .absent_as(&[("spec.unschedulable", "false")])
        .columns(vec![
            column("Status", "string", "The status of the node", 0, |o, _| json!(status_cell(o))),
            column("Roles", "string", "The roles of the node", 0, |o, _| json!(roles_cell(o))),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| age_cell(o, "metadata.creationTimestamp", now)),
            column("Version", "string", "Kubelet Version reported by the node.", 0, |o, _| json!(text(o, "/status/nodeInfo/kubeletVersion"))),
            column("Internal-IP", "string", "List of addresses reachable to the node.", 1, |o, _| json!(address(o, "InternalIP"))),
            column("External-IP", "string", "List of addresses reachable to the node.", 1, |o, _| json!(address(o, "ExternalIP"))),
            column("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", 1, |o, _| json!(text(o, "/status/nodeInfo/osImage"))),
            column("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", 1, |o, _| json!(text(o, "/status/nodeInfo/kernelVersion"))),
            column("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", 1, |o, _| json!(text(o, "/status/nodeInfo/containerRuntimeVersion"))),
        ])
        .no_age_column()
        .schema(schema())
        .strategy(Nodes)
}

fn text(node: &Value, pointer: &str) -> String {
    match node.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "<unknown>".into(),
    }
}

fn address(node: &Value, kind: &str) -> String {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a["type"] == kind)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_owned()
}

/// kubectl's `STATUS`: `Ready`, `NotReady` (`False` or `Unknown`), `Unknown` (no condition),
/// then `SchedulingDisabled`.
fn status_cell(node: &Value) -> String {
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            _ => "NotReady",
        })
        .unwrap_or("Unknown");
    let mut shown = vec![ready];
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        shown.push("SchedulingDisabled");
    }
    shown.join(",")
}

fn roles_cell(node: &Value) -> String {
    let mut roles: Vec<&str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(role).filter(|r| !r.is_empty())
            } else if k == "kubernetes.io/role" {
                v.as_str()
            } else {
                None
            }
        })
        .collect();
    roles.sort_unstable();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

fn condition() -> Schema {
    obj(vec![
        ("type", Schema::String),
        ("status", Schema::String),
        ("lastHeartbeatTime", Schema::String),
        ("lastTransitionTime", Schema::String),
        ("reason", Schema::String),
        ("message", Schema::String),
    ])
}

/// The shape of a Node.
pub fn schema() -> Schema {
    top(vec![
        (
            "spec",
            obj(vec![
                ("podCIDR", Schema::String),
                ("podCIDRs", array(Schema::String)),
                ("providerID", Schema::String),
                ("unschedulable", Schema::Bool),
                (
                    "taints",
                    array(obj(vec![
                        ("key", Schema::String),
                        ("value", Schema::String),
                        ("effect", Schema::String),
                        ("timeAdded", Schema::String),
                    ])),
                ),
                ("configSource", Schema::Any),
                ("externalID", Schema::String),
            ]),
        ),
        (
            "status",
            obj(vec![
                ("capacity", Schema::Map(Box::new(Schema::Quantity))),
                ("allocatable", Schema::Map(Box::new(Schema::Quantity))),
                ("phase", Schema::String),
                ("conditions", array(condition())),
                (
                    "addresses",
                    array(obj(vec![
                        ("type", Schema::String),
                        ("address", Schema::String),
                    ])),
                ),
                (
                    "daemonEndpoints",
                    obj(vec![("kubeletEndpoint", obj(vec![("Port", Schema::Int)]))]),
                ),
                (
                    "nodeInfo",
                    obj(vec![
                        ("machineID", Schema::String),
                        ("systemUUID", Schema::String),
                        ("bootID", Schema::String),
                        ("kernelVersion", Schema::String),
                        ("osImage", Schema::String),
                        ("containerRuntimeVersion", Schema::String),
                        ("kubeletVersion", Schema::String),
                        ("kubeProxyVersion", Schema::String),
                        ("operatingSystem", Schema::String),
                        ("architecture", Schema::String),
                        ("swap", Schema::Any),
                    ]),
                ),
                ("images", array(Schema::Any)),
                ("volumesInUse", array(Schema::String)),
                ("volumesAttached", array(Schema::Any)),
                ("config", Schema::Any),
                ("runtimeHandlers", array(Schema::Any)),
                ("features", Schema::Any),
            ]),
        ),
    ])
}

/// The labels every node carries (`kubernetes.io/hostname`, `kubernetes.io/os`, …).
pub fn well_known_labels(name: &str) -> Value {
    json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": std::env::consts::OS,
        "kubernetes.io/arch": arch(),
        "beta.kubernetes.io/os": std::env::consts::OS,
        "beta.kubernetes.io/arch": arch(),
    })
}

/// Go's name of this machine's architecture.
fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

#[derive(Debug)]
struct Nodes;

/// What kube's Node struct always writes: an empty spec, the kubelet endpoint's port and the
/// system info's strings.
fn node_zero() -> Value {
    json!({
        "spec": {},
        "status": {
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""
            }
        }
    })
}

impl Strategy for Nodes {
    /// kube's status strategy: the request's status and metadata, the stored spec.
    fn merge_status(&self, current: &Value, new: &Value) -> Option<Value> {
        Some(plinth_registry::strategy::with_stored_spec(current, new))
    }

    fn prepare_create(&self, object: &mut Value) {
        crate::zero::fill(object, &node_zero());
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        self.prepare_create(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (i, taint) in object
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let key = taint["key"].as_str().unwrap_or("");
            if key.is_empty() {
                causes.push(Cause::required(format!("spec.taints[{i}].key"), ""));
            } else {
                for m in plinth_core::validation::qualified_name(key) {
                    causes.push(Cause::invalid(
                        format!("spec.taints[{i}].key"),
                        &json!(key),
                        &m,
                    ));
                }
            }
            let effect = taint["effect"].as_str().unwrap_or("");
            if !EFFECTS.contains(&effect) {
                causes.push(if effect.is_empty() {
                    Cause::required(format!("spec.taints[{i}].effect"), "")
                } else {
                    Cause::not_supported(
                        format!("spec.taints[{i}].effect"),
                        &json!(effect),
                        EFFECTS,
                    )
                });
            }
        }
        if let Some(old) = old {
            let before = old
                .pointer("/spec/podCIDR")
                .and_then(Value::as_str)
                .unwrap_or("");
            let after = object
                .pointer("/spec/podCIDR")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !before.is_empty() && before != after {
                causes.push(Cause::forbidden(
                    "spec.podCIDRs",
                    "node updates may not change podCIDR except from \"\" to valid",
                ));
            }
        }
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[
            ("status.conditions", ListMerge::Keyed("type")),
            ("status.addresses", ListMerge::Keyed("type")),
        ]
    }
}

/// `nodes/<name>/proxy/<path>`: a GET of `<path>` on the node's agent (the kubelet's `/pods`,
/// `/healthz`, `/configz`, `/metrics`, `/stats/summary`, `/logs/`), streamed back as it is.
fn proxy(
    request: plinth_registry::resources::ConnectRequest<'_>,
) -> futures::future::BoxFuture<'_, Result<axum::response::Response, plinth_core::ApiError>> {
    Box::pin(async move {
        if request.method != axum::http::Method::GET {
            return Err(plinth_core::ApiError::method_not_allowed());
        }
        let node = plinth_core::meta::name(&request.object)
            .unwrap_or("")
            .to_owned();
        let path = super::proxied_path(&request);
        request.nodes.get(request.objects, &node, &path).await
    })
}

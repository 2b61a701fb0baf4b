//! core/v1 Pod: defaults and QoS class at create, the update rules of a running pod, graceful
//! deletion, kubectl's columns, and the subresources a node agent and kubectl use — `/status`,
//! `/binding` (the scheduler's), `/eviction` and `/log` (proxied to the pod's node agent).

use plinth_core::Cause;
use serde_json::{Value, json};

mod columns;
mod connect;
mod subresources;

use super::podspec::{default_pod_spec, pod_spec, pod_status, validate_pod_spec};
use columns::{readiness_gates_cell, ready_cell, restarts_cell, status_cell, text_or_none};
use connect::{attach, exec, log, port_forward};
use plinth_registry::resources::{ResourceDef, column};
use plinth_registry::schema::top;
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};
use subresources::{binding, eviction};

/// The `pods` resource.
pub fn resource() -> ResourceDef {
    let mut def = ResourceDef::new("", "v1", "Pod", "pods")
        .short_names(&["po"])
        .categories(&["all"])
        .with_status()
        .selectable(&[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ])
        .field_labels(&[
            ("metadata.name", "metadata.name"),
            ("metadata.namespace", "metadata.namespace"),
            ("spec.nodeName", "spec.nodeName"),
            ("spec.restartPolicy", "spec.restartPolicy"),
            ("spec.schedulerName", "spec.schedulerName"),
            ("spec.serviceAccountName", "spec.serviceAccountName"),
            ("spec.hostNetwork", "spec.hostNetwork"),
            ("status.phase", "status.phase"),
            ("status.podIP", "status.podIP"),
            // Accepted, but not among the fields a pod offers: it reads as nothing.
            ("status.podIPs", "status.podIPs"),
            ("status.nominatedNodeName", "status.nominatedNodeName"),
            ("spec.host", "spec.nodeName"),
        ])
        .absent_as(&[("spec.hostNetwork", "false")])
        .columns(vec![
            column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0, |o, _| json!(ready_cell(o))),
            column("Status", "string", "The aggregate status of the containers in this pod.", 0, |o, _| json!(status_cell(o))),
            column("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0, restarts_cell),
            column("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0, |o, now| plinth_registry::resources::age_cell(o, "metadata.creationTimestamp", now)),
            column("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1, |o, _| json!(text_or_none(o, "/status/podIP"))),
            column("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1, |o, _| json!(text_or_none(o, "/spec/nodeName"))),
            column("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node.", 1, |o, _| json!(text_or_none(o, "/status/nominatedNodeName"))),
            column("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1, |o, _| json!(readiness_gates_cell(o))),
        ])
        .no_age_column()
        .schema(schema())
        .strategy(Pods)
        .answered_subresource("binding", binding)
        .answered_subresource("eviction", eviction)
        .connect("log", log)
        .connect("exec", exec)
        .connect("attach", attach)
        .connect("portforward", port_forward)
        .connect("proxy", crate::core::proxy::pod)
        .field_subresource("ephemeralcontainers", "/spec/ephemeralContainers", &["get", "patch", "update"])
        .discovered("proxy", Some(("", "v1", "PodProxyOptions")), &["create", "delete", "get", "patch", "update"])
        .discovered("attach", Some(("", "v1", "PodAttachOptions")), &["create", "get"])
        .discovered("binding", Some(("", "v1", "Binding")), &["create"])
        .discovered("eviction", Some(("policy", "v1", "Eviction")), &["create"])
        .discovered("exec", Some(("", "v1", "PodExecOptions")), &["create", "get"])
        .discovered("log", None, &["get"])
        .discovered("portforward", Some(("", "v1", "PodPortForwardOptions")), &["create", "get"]);
    def.allocate = Some(admit_new_pod);
    def
}

/// The shape of a Pod.
pub fn schema() -> plinth_registry::schema::Schema {
    top(vec![("spec", pod_spec()), ("status", pod_status())])
}

/// The pod's QoS class, as upstream's `GetPodQOS` computes it.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        let nonzero = |m: Option<&serde_json::Map<String, Value>>, r: &str| {
            m.and_then(|m| m.get(r))
                .and_then(plinth_core::quantity::of)
                .is_some_and(|q| q != 0.0)
        };
        for resource in ["cpu", "memory"] {
            if nonzero(requests, resource) || nonzero(limits, resource) {
                any = true;
            }
            let request = requests
                .and_then(|m| m.get(resource))
                .and_then(plinth_core::quantity::of);
            let limit = limits
                .and_then(|m| m.get(resource))
                .and_then(plinth_core::quantity::of);
            if limit.is_none() || request.is_some_and(|r| Some(r) != limit) {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The `tolerationSeconds` of the default `not-ready` and `unreachable` tolerations.
static DEFAULT_TOLERATIONS: std::sync::RwLock<(i64, i64)> = std::sync::RwLock::new((300, 300));

/// Sets how long new pods tolerate a not-ready and an unreachable node (kube-apiserver's
/// `--default-not-ready-toleration-seconds`, `--default-unreachable-toleration-seconds`).
pub fn set_default_toleration_seconds(not_ready: i64, unreachable: i64) {
    if let Ok(mut seconds) = DEFAULT_TOLERATIONS.write() {
        *seconds = (not_ready, unreachable);
    }
}

/// The DefaultTolerationSeconds admission plugin: a pod that does not tolerate the
/// `not-ready`/`unreachable` `NoExecute` taints gets tolerations of them for the default time.
fn default_tolerations(spec: &mut Value) {
    let (not_ready, unreachable) = DEFAULT_TOLERATIONS.read().map(|s| *s).unwrap_or((300, 300));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for (key, seconds) in [
        ("node.kubernetes.io/not-ready", not_ready),
        ("node.kubernetes.io/unreachable", unreachable),
    ] {
        let covered = list.iter().any(|t| {
            let effect = t["effect"].as_str().unwrap_or("");
            (t["key"] == key
                || (t["key"].as_str().unwrap_or("").is_empty() && t["operator"] == "Exists"))
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}));
        }
    }
}

/// Whether the ServiceAccount admission plugin runs (kube-apiserver's
/// `--disable-admission-plugins=ServiceAccount` turns it off, as envtest does).
static SERVICE_ACCOUNT_ADMISSION: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// Turns the ServiceAccount admission plugin on or off for new pods.
pub fn set_service_account_admission(on: bool) {
    SERVICE_ACCOUNT_ADMISSION.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Where the ServiceAccount token, CA and namespace appear in containers.
pub const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount admission plugin's part that needs no lookup: the pod runs as
/// `default` unless it names an account, and (unless `automountServiceAccountToken: false`)
/// gets kube's projected `kube-api-access-*` volume — a bound token, the cluster CA and the
/// namespace — mounted read-only in every container.
fn service_account(object: &mut Value) {
    let suffix: String = plinth_core::meta::meta_str(object, "uid")
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .collect();
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        spec.insert("serviceAccountName".into(), json!("default"));
    }
    if spec.get("automountServiceAccountToken") == Some(&json!(false)) {
        return;
    }
    let name = format!("kube-api-access-{suffix}");
    let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}});
    let mut mounted = false;
    for list in ["containers", "initContainers"] {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let mounts = container
                .as_object_mut()
                .map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            let Some(mounts) = mounts.and_then(Value::as_array_mut) else {
                continue;
            };
            if mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT) {
                continue;
            }
            mounts.push(json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT}));
            mounted = true;
        }
    }
    if mounted {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(volume);
        }
    }
}

#[derive(Debug)]
struct Pods;

/// kube's `ValidatePodEphemeralContainersUpdate`: the pod's spec valid with its new ephemeral
/// containers, none of the existing ones removed or changed, and no static pod.
fn ephemeral_update(object: &Value, old: &Value) -> Vec<Cause> {
    if old
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return vec![Cause::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let mut causes = validate_pod_spec(object.get("spec").unwrap_or(&Value::Null), "spec");
    let new = object["spec"]["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for before in old["spec"]["ephemeralContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = before["name"].as_str().unwrap_or("");
        match new.iter().find(|c| c["name"] == before["name"]) {
            None => causes.push(Cause::forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(now) if now != before => causes.push(Cause::forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers {name:?} may not be changed\n"),
            )),
            Some(_) => {}
        }
    }
    causes
}

/// The spec with what a pod update may change cleared, for comparing two specs.
fn frozen(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_object_mut() {
                c.remove("image");
            }
        }
    }
    if let Some(s) = spec.as_object_mut() {
        s.remove("activeDeadlineSeconds");
        s.remove("tolerations");
        s.remove("terminationGracePeriodSeconds");
    }
    spec
}

impl Strategy for Pods {
    fn prepare_create(&self, object: &mut Value) {
        if SERVICE_ACCOUNT_ADMISSION.load(std::sync::atomic::Ordering::Relaxed) {
            service_account(object);
        }
        if let Some(spec) = object.get_mut("spec") {
            default_pod_spec(spec);
            default_tolerations(spec);
        }
        let qos = qos_class(object.get("spec").unwrap_or(&Value::Null));
        object["status"] = json!({"phase": "Pending", "qosClass": qos});
    }

    fn prepare_update(&self, object: &mut Value, _old: &Value) {
        if let Some(spec) = object.get_mut("spec") {
            default_pod_spec(spec);
        }
    }

    fn validate_subresource(
        &self,
        subresource: &str,
        object: &Value,
        old: &Value,
    ) -> Option<Vec<Cause>> {
        (subresource == "ephemeralcontainers").then(|| ephemeral_update(object, old))
    }

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let mut causes = validate_pod_spec(spec, "spec");
        if old.is_none()
            && spec["ephemeralContainers"]
                .as_array()
                .is_some_and(|e| !e.is_empty())
        {
            causes.push(Cause::forbidden(
                "spec.ephemeralContainers",
                "cannot be set on create",
            ));
        }
        if let Some(old) = old {
            let before = old.get("spec").unwrap_or(&Value::Null);
            // Binding (the scheduler's, `pods/<name>/binding`) sets the node once.
            let mut bound = spec.clone();
            if before
                .get("nodeName")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
                && let Some(s) = bound.as_object_mut()
            {
                s.remove("nodeName");
            }
            let mut unbound = frozen(before);
            if let Some(s) = unbound.as_object_mut()
                && bound.get("nodeName").is_none()
            {
                s.remove("nodeName");
            }
            if unbound != frozen(&bound) {
                causes.push(Cause::forbidden(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                ));
            }
            // The deadline can be set or lowered, never raised or removed.
            let path = "spec.activeDeadlineSeconds";
            match (
                before.get("activeDeadlineSeconds").and_then(Value::as_i64),
                spec.get("activeDeadlineSeconds"),
            ) {
                (Some(was), Some(now)) if now.as_i64().is_some_and(|now| now > was) => {
                    causes.push(Cause::invalid(
                        path,
                        now,
                        "must be less than or equal to previous value",
                    ));
                }
                (Some(_), None | Some(Value::Null)) => causes.push(Cause::invalid(
                    path,
                    &Value::Null,
                    "must not update from a positive integer to nil value",
                )),
                _ => {}
            }
            let before_tolerations = before.get("tolerations").and_then(Value::as_array);
            let after_tolerations = spec.get("tolerations").and_then(Value::as_array);
            if let Some(before_tolerations) = before_tolerations {
                let kept = before_tolerations
                    .iter()
                    .all(|t| after_tolerations.is_some_and(|a| a.contains(t)));
                if !kept {
                    causes.push(Cause::forbidden(
                        "spec.tolerations",
                        "existing toleration can not be modified except its tolerationSeconds",
                    ));
                }
            }
        }
        causes
    }

    fn lists(&self) -> &[(FieldPath, ListMerge)] {
        &[
            ("spec.containers", ListMerge::Keyed("name")),
            ("spec.initContainers", ListMerge::Keyed("name")),
            ("spec.ephemeralContainers", ListMerge::Keyed("name")),
            ("spec.volumes", ListMerge::Keyed("name")),
            ("spec.containers[].env", ListMerge::Keyed("name")),
            ("spec.initContainers[].env", ListMerge::Keyed("name")),
            ("spec.containers[].ports", ListMerge::Keyed("containerPort")),
            (
                "spec.initContainers[].ports",
                ListMerge::Keyed("containerPort"),
            ),
            (
                "spec.containers[].volumeMounts",
                ListMerge::Keyed("mountPath"),
            ),
            (
                "spec.initContainers[].volumeMounts",
                ListMerge::Keyed("mountPath"),
            ),
            ("status.conditions", ListMerge::Keyed("type")),
            ("status.podIPs", ListMerge::Keyed("ip")),
            ("status.hostIPs", ListMerge::Keyed("ip")),
        ]
    }

    fn deletion_grace(&self, object: &Value, requested: Option<i64>) -> i64 {
        let phase = object.pointer("/status/phase").and_then(Value::as_str);
        let scheduled = object
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        // Unscheduled and finished pods have nothing to stop: they go at once.
        if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
            return 0;
        }
        let grace = requested.unwrap_or_else(|| {
            object
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30)
        });
        // A negative period is the 1 s kube turns it into.
        if grace < 0 { 1 } else { grace }
    }
}

/// The `bindings` resource: a create binds the pod it names (as `pods/<name>/binding`).
pub fn bindings() -> ResourceDef {
    ResourceDef::new("", "v1", "Binding", "bindings")
        .schema(plinth_registry::schema::top(vec![(
            "target",
            plinth_registry::schema::object_reference(),
        )]))
        .answered_by(subresources::create_binding)
}

/// The admission plugins of a new pod that read other objects, in kube-apiserver's order:
/// LimitRanger, Priority, RuntimeClass.
/// kube's ServiceAccount admission reads the account: one with
/// `automountServiceAccountToken: false` has no token mounted into a pod that does not ask
/// for one itself (the mount [`service_account`] added goes again).
async fn service_account_opt_out(
    objects: &dyn plinth_registry::resources::Objects,
    pod: &mut Value,
) -> Result<(), plinth_core::ApiError> {
    let spec = &pod["spec"];
    if !spec["automountServiceAccountToken"].is_null() {
        return Ok(());
    }
    let account = spec["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let Some(def) = objects.resource("", "v1", "serviceaccounts") else {
        return Ok(());
    };
    let namespace = plinth_core::meta::namespace(pod)
        .unwrap_or("default")
        .to_owned();
    let Ok(found) = objects.get(&def, Some(&namespace), &account).await else {
        return Ok(());
    };
    if found["automountServiceAccountToken"] != json!(false) {
        return Ok(());
    }
    let added = |name: &Value| {
        name.as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain(|v| !added(&v["name"]));
    }
    if spec
        .get("volumes")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        spec.remove("volumes");
    }
    for list in ["containers", "initContainers"] {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            if let Some(mounts) = container
                .get_mut("volumeMounts")
                .and_then(Value::as_array_mut)
            {
                mounts.retain(|m| !(added(&m["name"]) && m["mountPath"] == TOKEN_MOUNT));
                if mounts.is_empty() {
                    container.remove("volumeMounts");
                }
            }
        }
    }
    Ok(())
}

fn admit_new_pod<'a>(
    objects: &'a dyn plinth_registry::resources::Objects,
    pod: &'a mut Value,
) -> futures::future::BoxFuture<'a, Result<(), plinth_core::ApiError>> {
    Box::pin(async move {
        service_account_opt_out(objects, pod).await?;
        super::limitrange::admit(objects, pod).await?;
        crate::scheduling::priorityclass::admit_pod(objects, pod).await?;
        crate::node::runtimeclass::admit_pod(objects, pod).await
    })
}

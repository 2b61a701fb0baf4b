//! core/v1 Pod: defaults and QoS class at create, the update rules of a running pod, graceful
//! deletion, kubectl's columns, and the subresources a node agent and kubectl use — `/status`,
//! `/binding` (the scheduler's), `/eviction` and `/log` (proxied to the pod's node agent).

use futures::future::BoxFuture;
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use super::podspec::{default_pod_spec, pod_spec, pod_status, validate_pod_spec};
use plinth_registry::resources::{Asker, ConnectRequest, ResourceDef, column};
use plinth_registry::schema::top;
use plinth_registry::strategy::{FieldPath, ListMerge, Strategy};

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
        .connect("portforward", port_forward);
    def.allocate = Some(super::limitrange::admit);
    def
}

/// The shape of a Pod.
pub fn schema() -> plinth_registry::schema::Schema {
    top(vec![("spec", pod_spec()), ("status", pod_status())])
}

fn text_or_none(object: &Value, pointer: &str) -> String {
    match object.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "<none>".into(),
    }
}

fn statuses<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    object
        .pointer(&format!("/status/{key}"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn ready_cell(pod: &Value) -> String {
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses(pod, "containerStatuses")
        .iter()
        .filter(|s| s["ready"] == json!(true))
        .count();
    // Sidecars (restartable init containers) count too, as kubectl counts them.
    let sidecars: Vec<&str> = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .filter_map(|c| c["name"].as_str())
        .collect();
    let ready_sidecars = statuses(pod, "initContainerStatuses")
        .iter()
        .filter(|s| sidecars.contains(&s["name"].as_str().unwrap_or("")) && s["ready"] == true)
        .count();
    format!("{}/{}", ready + ready_sidecars, total + sidecars.len())
}

/// kubectl's `STATUS` column (its `printPod`).
pub fn status_cell(pod: &Value) -> String {
    let mut reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .or_else(|| pod.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("")
        .to_owned();
    let init_total = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut initializing = false;
    for (i, status) in statuses(pod, "initContainerStatuses").iter().enumerate() {
        let terminated = status.pointer("/state/terminated");
        let waiting = status.pointer("/state/waiting");
        let sidecar_started = status["started"] == true;
        match (terminated, waiting) {
            (Some(t), _) if t["exitCode"] == 0 => continue,
            (Some(t), _) => {
                reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => format!("Init:{r}"),
                    None if t["signal"].as_i64().unwrap_or(0) != 0 => {
                        format!("Init:Signal:{}", t["signal"])
                    }
                    None => format!("Init:ExitCode:{}", t["exitCode"]),
                };
            }
            (None, Some(w))
                if w["reason"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty() && r != "PodInitializing") =>
            {
                reason = format!("Init:{}", w["reason"].as_str().unwrap_or(""));
            }
            _ if sidecar_started => continue,
            _ => reason = format!("Init:{i}/{init_total}"),
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for status in statuses(pod, "containerStatuses").iter().rev() {
            if let Some(w) = status.pointer("/state/waiting")
                && let Some(r) = w["reason"].as_str().filter(|r| !r.is_empty())
            {
                reason = r.to_owned();
            } else if let Some(t) = status.pointer("/state/terminated") {
                reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => r.to_owned(),
                    None if t["signal"].as_i64().unwrap_or(0) != 0 => {
                        format!("Signal:{}", t["signal"])
                    }
                    None => format!("ExitCode:{}", t["exitCode"]),
                };
            } else if status.pointer("/state/running").is_some() && status["ready"] == true {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            reason = "Running".into();
        }
    }
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        reason = if pod.pointer("/status/reason") == Some(&json!("NodeLost")) {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn restarts_cell(pod: &Value, now: i64) -> Value {
    let mut restarts = 0;
    let mut last: Option<i64> = None;
    for status in statuses(pod, "containerStatuses")
        .iter()
        .chain(statuses(pod, "initContainerStatuses"))
    {
        restarts += status["restartCount"].as_i64().unwrap_or(0);
        if let Some(t) = status
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(plinth_core::meta::parse_time)
        {
            last = Some(last.map_or(t, |l| l.max(t)));
        }
    }
    match last {
        Some(t) if restarts > 0 => json!(format!(
            "{restarts} ({} ago)",
            plinth_core::meta::human_duration(now - t)
        )),
        _ => json!(restarts.to_string()),
    }
}

fn readiness_gates_cell(pod: &Value) -> String {
    let gates: Vec<&str> = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g["conditionType"].as_str())
        .collect();
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = statuses(pod, "conditions");
    let met = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .any(|c| c["type"] == **g && c["status"] == "True")
        })
        .count();
    format!("{met}/{}", gates.len())
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
        service_account(object);
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

    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let spec = object.get("spec").unwrap_or(&Value::Null);
        let mut causes = validate_pod_spec(spec, "spec");
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

/// `pods/<name>/binding`: the scheduler assigns the pod to `target.name`.
fn binding<'a>(
    asker: &'a Asker<'a>,
    pod: Value,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&pod).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&pod).unwrap_or("").to_owned();
        let node = request
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                &name,
                vec![Cause::required("target.name", "")],
            ));
        }
        let def = asker
            .objects
            .resource("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let options = plinth_registry::WriteOptions::internal("kube-scheduler");
        asker
            .objects
            .modify(
                &def,
                Some(&namespace),
                &name,
                plinth_registry::Part::Main,
                &options,
                &|current: &mut Value| {
                    if current
                        .pointer("/metadata/deletionTimestamp")
                        .is_some_and(|t| !t.is_null())
                    {
                        return Err(ApiError::conflict(
                            &def.group_resource(),
                            &name,
                            "pod is being deleted, cannot be assigned to a host",
                        ));
                    }
                    if let Some(assigned) = current
                        .pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                    {
                        return Err(ApiError::conflict(
                            &def.group_resource(),
                            &name,
                            &format!("pod {name} is already assigned to node \"{assigned}\""),
                        ));
                    }
                    current["spec"]["nodeName"] = json!(node);
                    Ok(true)
                },
            )
            .await?;
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    })
}

/// `pods/<name>/eviction`: the pod is deleted with the eviction's delete options.
fn eviction<'a>(
    asker: &'a Asker<'a>,
    pod: Value,
    request: Value,
) -> BoxFuture<'a, Result<Value, ApiError>> {
    Box::pin(async move {
        let name = plinth_core::meta::name(&pod).unwrap_or("").to_owned();
        let namespace = plinth_core::meta::namespace(&pod).unwrap_or("").to_owned();
        if let Some(asked) = request.pointer("/metadata/name").and_then(Value::as_str)
            && asked != name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object: {name} != {asked}"
            )));
        }
        let def = asker
            .objects
            .resource("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        spend_budget(asker.objects, &pod).await?;
        let options = plinth_registry::DeleteOptions {
            grace_period_seconds: request
                .pointer("/deleteOptions/gracePeriodSeconds")
                .and_then(Value::as_i64),
            uid: request
                .pointer("/deleteOptions/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            user: Some(asker.user.clone()),
            ..plinth_registry::DeleteOptions::default()
        };
        asker
            .objects
            .delete(&def, Some(&namespace), &name, &options)
            .await?;
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    })
}

/// The PodDisruptionBudget check of an eviction (kube's `EvictionREST`): a finished or
/// pending pod, or one being deleted, goes regardless; a pod under more than one budget
/// cannot be evicted; under one, the eviction spends one of its allowed disruptions (noted
/// in `status.disruptedPods` until the controller sees the pod go) or is refused with 429.
async fn spend_budget(
    objects: &dyn plinth_registry::resources::Objects,
    pod: &Value,
) -> Result<(), ApiError> {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || deleting {
        return Ok(());
    }
    let Some(def) = objects.resource("policy", "v1", "poddisruptionbudgets") else {
        return Ok(());
    };
    let namespace = plinth_core::meta::namespace(pod).unwrap_or("default");
    let labels = plinth_core::meta::labels(pod);
    let budgets = objects
        .list(
            &def,
            Some(namespace),
            &plinth_registry::ListOptions::default(),
        )
        .await?;
    let matching: Vec<&Value> = budgets["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| {
            plinth_core::selector::LabelSelector::from_object(&b["spec"]["selector"])
                .is_ok_and(|s| s.matches(&labels))
        })
        .collect();
    let budget = match matching.as_slice() {
        [] => return Ok(()),
        [one] => *one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let status = |f: &str| {
        budget
            .pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    if !ready {
        let policy = budget
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        if policy == Some("AlwaysAllow") || status("currentHealthy") >= status("desiredHealthy") {
            return Ok(());
        }
    }
    let name = plinth_core::meta::name(budget).unwrap_or("").to_owned();
    let pod_name = plinth_core::meta::name(pod).unwrap_or("").to_owned();
    let now = plinth_core::meta::format_time(plinth_registry::now());
    objects
        .modify(
            &def,
            Some(namespace),
            &name,
            plinth_registry::Part::Status,
            &plinth_registry::WriteOptions::internal("kube-apiserver"),
            &|current: &mut Value| {
                let generation = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let observed = current
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if observed < generation {
                    let mut error = crate::policy::poddisruptionbudget::violated(current);
                    error.details.causes = vec![Cause::new(
                        "DisruptionBudget",
                        "",
                        format!(
                            "The disruption budget {name} is still being processed by the server."
                        ),
                    )];
                    return Err(error);
                }
                let allowed = current
                    .pointer("/status/disruptionsAllowed")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if allowed <= 0 {
                    return Err(crate::policy::poddisruptionbudget::violated(current));
                }
                current["status"]["disruptionsAllowed"] = json!(allowed - 1);
                if !current["status"]["disruptedPods"].is_object() {
                    current["status"]["disruptedPods"] = json!({});
                }
                current["status"]["disruptedPods"][&pod_name] = json!(now);
                Ok(true)
            },
        )
        .await?;
    Ok(())
}

/// The container a `/log` (or `/exec`, `/attach`) request means: `container=`, or the only
/// one, or the `kubectl.kubernetes.io/default-container` annotation's.
///
/// # Errors
/// 400 with kube's messages when none or an unknown one is named.
pub fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = plinth_core::meta::name(pod).unwrap_or("");
    let names = |key: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let containers = names("containers");
    let init = names("initContainers");
    let ephemeral = names("ephemeralContainers");
    match asked.filter(|a| !a.is_empty()) {
        Some(asked) => {
            if containers
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|c| c == asked)
            {
                Ok(asked.to_owned())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {asked} is not valid for pod {name}"
                )))
            }
        }
        None => {
            if let Some(default) = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .filter(|d| containers.iter().any(|c| c == d))
            {
                return Ok(default.to_owned());
            }
            match containers.as_slice() {
                [one] => Ok(one.clone()),
                _ => {
                    let mut message = format!(
                        "a container name must be specified for pod {name}, choose one of: [{}]",
                        containers.join(" ")
                    );
                    if !init.is_empty() {
                        message.push_str(&format!(
                            " or one of the init containers: [{}]",
                            init.join(" ")
                        ));
                    }
                    Err(ApiError::bad_request(message))
                }
            }
        }
    }
}

/// The query parameters of `PodLogOptions` passed on to the node agent.
const LOG_PARAMETERS: &[&str] = &[
    "follow",
    "previous",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "tailLines",
    "limitBytes",
];

/// `pods/<name>/log`: the container's log, from the node agent that runs it.
fn log(request: ConnectRequest<'_>) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(async move {
        if request.method != axum::http::Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        let pod = &request.object;
        let container = container_of(pod, request.query("container"))?;
        for key in ["sinceSeconds", "tailLines", "limitBytes"] {
            if let Some(v) = request.query(key) {
                let ok = v.parse::<i64>().is_ok_and(|n| {
                    if key == "sinceSeconds" || key == "limitBytes" {
                        n > 0
                    } else {
                        n >= 0
                    }
                });
                if !ok {
                    return Err(ApiError::invalid(
                        "",
                        "PodLogOptions",
                        "",
                        vec![Cause::invalid(key, &json!(v), "must be greater than 0")],
                    ));
                }
            }
        }
        if request.query("sinceSeconds").is_some() && request.query("sinceTime").is_some() {
            return Err(ApiError::invalid(
                "",
                "PodLogOptions",
                "",
                vec![Cause::forbidden(
                    "",
                    "at most one of `sinceTime` or `sinceSeconds` may be specified",
                )],
            ));
        }
        let node = node_of(pod, &container)?;
        let namespace = plinth_core::meta::namespace(pod).unwrap_or("");
        let name = plinth_core::meta::name(pod).unwrap_or("");
        let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
        let params: Vec<String> = LOG_PARAMETERS
            .iter()
            .filter_map(|k| request.query(k).map(|v| format!("{k}={}", urlencode(v))))
            .collect();
        if !params.is_empty() {
            path.push('?');
            path.push_str(&params.join("&"));
        }
        request.nodes.get(request.objects, &node, &path).await
    })
}

fn urlencode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// The node a pod runs on, or kube's answer for one that runs nowhere yet.
fn node_of(pod: &Value, container: &str) -> Result<String, ApiError> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{}\" is waiting to start: ContainerCreating",
                plinth_core::meta::name(pod).unwrap_or("")
            ))
        })
}

/// The query string of a streaming request, as passed on to the node agent.
fn query_string(request: &ConnectRequest<'_>, keys: &[&str]) -> String {
    request
        .query
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn stream_flags_ok(request: &ConnectRequest<'_>) -> bool {
    ["stdin", "stdout", "stderr"]
        .iter()
        .any(|k| request.query(k).is_some_and(|v| v == "true" || v == "1"))
}

/// `pods/<name>/exec`: a command in a container, over the connection the client upgrades
/// (WebSocket, `v5.channel.k8s.io`), served by the node agent.
fn exec(request: ConnectRequest<'_>) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "exec"))
}

/// `pods/<name>/attach`: the streams of a running container's process.
fn attach(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "attach"))
}

/// `pods/<name>/portforward`: connections to the pod's ports, over the connection the client
/// upgrades (SPDY/3.1, `portforward.k8s.io`), served by the node agent.
fn port_forward(
    request: ConnectRequest<'_>,
) -> BoxFuture<'_, Result<axum::response::Response, ApiError>> {
    Box::pin(streamed(request, "portforward"))
}

/// An exec, attach or port-forward, checked and handed to the pod's node agent.
async fn streamed(
    request: ConnectRequest<'_>,
    kind: &str,
) -> Result<axum::response::Response, ApiError> {
    let pod = request.object.clone();
    let namespace = plinth_core::meta::namespace(&pod).unwrap_or("");
    let name = plinth_core::meta::name(&pod).unwrap_or("");
    if kind == "portforward" {
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to forward ports: pod {name} is not running on a node yet"
                ))
            })?;
        let path = format!("/portforward/{namespace}/{name}");
        return request
            .nodes
            .upgrade(
                request.objects,
                node,
                &path,
                &request.headers,
                request.upgrade,
            )
            .await;
    }
    let container = container_of(&pod, request.query("container"))?;
    if kind == "exec" && request.query_all("command").is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    if !stream_flags_ok(&request) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let node = node_of(&pod, &container)?;
    let path = format!(
        "/{kind}/{namespace}/{name}/{container}?{}",
        query_string(&request, &["command", "stdin", "stdout", "stderr", "tty"])
    );
    request
        .nodes
        .upgrade(
            request.objects,
            &node,
            &path,
            &request.headers,
            request.upgrade,
        )
        .await
}

//! The shape, defaults and validation of a `PodSpec` — shared by Pods, PodTemplates and (later)
//! the workload types' `spec.template`, as upstream's `core/v1` types and `ValidatePodSpec`
//! share them. The shapes are in `schema`; defaults and validation here.

use plinth_core::Cause;
use plinth_core::validation::{dns1123_label, dns1123_subdomain};
use serde_json::{Map, Value, json};

mod schema;

pub use schema::{pod_spec, pod_status, pod_template_spec};

fn set_default(object: &mut Map<String, Value>, key: &str, value: Value) {
    if object.get(key).is_none_or(Value::is_null) {
        object.insert(key.to_owned(), value);
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    // The tag is after the last ':' that follows the last '/'.
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None if !image.contains('@') => "Always",
        _ => "IfNotPresent",
    }
}

fn default_probe(probe: &mut Value) {
    let Some(p) = probe.as_object_mut() else {
        return;
    };
    set_default(p, "timeoutSeconds", json!(1));
    set_default(p, "periodSeconds", json!(10));
    set_default(p, "successThreshold", json!(1));
    set_default(p, "failureThreshold", json!(3));
    if let Some(get) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_default(get, "path", json!("/"));
        set_default(get, "scheme", json!("HTTP"));
    }
}

fn default_container(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    set_default(c, "imagePullPolicy", json!(image_pull_policy(&image)));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    for port in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(port) = port.as_object_mut() {
            set_default(port, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    for env in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field) = env
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            set_default(field, "apiVersion", json!("v1"));
        }
    }
    // Requests default to the limits when not given (`SetDefaults_Pod`).
    if let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut)
        && let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned()
    {
        let requests = resources.entry("requests").or_insert_with(|| json!({}));
        if let Some(requests) = requests.as_object_mut() {
            for (name, value) in limits {
                requests.entry(name).or_insert(value);
            }
        }
    }
}

fn default_volume(volume: &mut Value) {
    let Some(v) = volume.as_object_mut() else {
        return;
    };
    let has_source = v.keys().any(|k| k != "name");
    if !has_source {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["configMap", "secret", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(s) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_default(s, "type", json!(""));
    }
    for item in v
        .get_mut("downwardAPI")
        .and_then(|d| d.get_mut("items"))
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
            set_default(field, "apiVersion", json!("v1"));
        }
    }
}

/// Fills in what kube-apiserver defaults in a `PodSpec`.
pub fn default_pod_spec(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    set_default(s, "restartPolicy", json!("Always"));
    set_default(s, "terminationGracePeriodSeconds", json!(30));
    set_default(s, "dnsPolicy", json!("ClusterFirst"));
    set_default(s, "securityContext", json!({}));
    set_default(s, "schedulerName", json!("default-scheduler"));
    set_default(s, "enableServiceLinks", json!(true));
    // `serviceAccount` is the deprecated alias of `serviceAccountName`.
    if let Some(name) = s
        .get("serviceAccount")
        .and_then(Value::as_str)
        .map(str::to_owned)
        && s.get("serviceAccountName").is_none_or(Value::is_null)
    {
        s.insert("serviceAccountName".into(), json!(name));
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in s
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            default_container(c);
        }
    }
    for v in s
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_volume(v);
    }
    if s.get("hostNetwork") == Some(&json!(true)) {
        for list in ["containers", "initContainers"] {
            for port in s
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get_mut("ports").and_then(Value::as_array_mut))
                .flatten()
            {
                let container_port = port.get("containerPort").cloned();
                if let (Some(p), Some(cp)) = (port.as_object_mut(), container_port) {
                    set_default(p, "hostPort", cp);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Validation (the parts of upstream's `ValidatePodSpec` a node agent here relies on)

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

fn label_causes(path: &str, value: &str) -> Vec<Cause> {
    dns1123_label(value)
        .into_iter()
        .map(|m| Cause::invalid(path, &json!(value), &m))
        .collect()
}

fn items(value: &Value, key: &str) -> Vec<Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

fn validate_port(path: &str, value: Option<&Value>, causes: &mut Vec<Cause>) {
    match value {
        Some(Value::Number(n)) => {
            let ok = n.as_i64().is_some_and(|p| (1..=65535).contains(&p));
            if !ok {
                causes.push(Cause::invalid(
                    path,
                    value.unwrap_or(&Value::Null),
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
        Some(Value::String(name)) => {
            let bad = name.is_empty()
                || name.len() > 15
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                || !name.bytes().any(|b| b.is_ascii_lowercase());
            if bad {
                causes.push(Cause::invalid(
                    path,
                    &json!(name),
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                ));
            }
        }
        None | Some(Value::Null) => causes.push(Cause::required(path, "")),
        Some(other) => causes.push(Cause::invalid(path, other, "must be a port number or name")),
    }
}

fn validate_handler(path: &str, handler: &Value, causes: &mut Vec<Cause>) {
    let kinds: Vec<&str> = ["exec", "httpGet", "tcpSocket", "grpc", "sleep"]
        .into_iter()
        .filter(|k| handler.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    match kinds.as_slice() {
        [] => causes.push(Cause::required(path, "must specify a handler type")),
        [one] => {
            let inner = &handler[*one];
            match *one {
                "exec" if items(inner, "command").is_empty() => {
                    causes.push(Cause::required(format!("{path}.exec.command"), ""));
                }
                "httpGet" | "tcpSocket" => {
                    validate_port(&format!("{path}.{one}.port"), inner.get("port"), causes);
                }
                "grpc" => validate_port(&format!("{path}.grpc.port"), inner.get("port"), causes),
                _ => {}
            }
        }
        [_, second, ..] => causes.push(Cause::forbidden(
            format!("{path}.{second}"),
            "may not specify more than 1 handler type",
        )),
    }
}

fn validate_probe(path: &str, probe: &Value, causes: &mut Vec<Cause>) {
    if probe.is_null() {
        return;
    }
    validate_handler(path, probe, causes);
    for field in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        if let Some(n) = probe.get(field).and_then(Value::as_i64)
            && n < 0
        {
            causes.push(Cause::invalid(
                format!("{path}.{field}"),
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
    }
}

fn validate_container(
    path: &str,
    container: &Value,
    volumes: &[String],
    init: bool,
    causes: &mut Vec<Cause>,
) {
    let name = text(container, "name");
    if name.is_empty() {
        causes.push(Cause::required(format!("{path}.name"), ""));
    } else {
        causes.extend(label_causes(&format!("{path}.name"), name));
    }
    if text(container, "image").trim().is_empty() {
        causes.push(Cause::required(format!("{path}.image"), ""));
    }
    if let Some(policy) = container.get("imagePullPolicy").and_then(Value::as_str)
        && !PULL_POLICIES.contains(&policy)
    {
        causes.push(Cause::not_supported(
            format!("{path}.imagePullPolicy"),
            &json!(policy),
            PULL_POLICIES,
        ));
    }
    for (i, port) in items(container, "ports").iter().enumerate() {
        let p = format!("{path}.ports[{i}]");
        validate_port(
            &format!("{p}.containerPort"),
            port.get("containerPort"),
            causes,
        );
        if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
            && !PROTOCOLS.contains(&protocol)
        {
            causes.push(Cause::not_supported(
                format!("{p}.protocol"),
                &json!(protocol),
                PROTOCOLS,
            ));
        }
    }
    for (i, env) in items(container, "env").iter().enumerate() {
        if text(env, "name").is_empty() {
            causes.push(Cause::required(format!("{path}.env[{i}].name"), ""));
        }
    }
    let mut paths = Vec::new();
    for (i, mount) in items(container, "volumeMounts").iter().enumerate() {
        let p = format!("{path}.volumeMounts[{i}]");
        let volume = text(mount, "name");
        if volume.is_empty() {
            causes.push(Cause::required(format!("{p}.name"), ""));
        } else if !volumes.iter().any(|v| v == volume) {
            causes.push(Cause::not_found(format!("{p}.name"), volume));
        }
        let mount_path = text(mount, "mountPath");
        if mount_path.is_empty() {
            causes.push(Cause::required(format!("{p}.mountPath"), ""));
        } else if paths.contains(&mount_path) {
            causes.push(Cause::invalid(
                format!("{p}.mountPath"),
                &json!(mount_path),
                "must be unique",
            ));
        }
        paths.push(mount_path);
    }
    let probes: &[&str] = if init && text(container, "restartPolicy") != "Always" {
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if container.get(probe).is_some_and(|p| !p.is_null()) {
                causes.push(Cause::forbidden(
                    format!("{path}.{probe}"),
                    "may not be set for init containers without restartPolicy=Always",
                ));
            }
        }
        &[]
    } else {
        &["livenessProbe", "readinessProbe", "startupProbe"]
    };
    for probe in probes {
        if let Some(p) = container.get(*probe) {
            validate_probe(&format!("{path}.{probe}"), p, causes);
        }
    }
    if let Some(policy) = container.get("restartPolicy").and_then(Value::as_str) {
        if !init {
            causes.push(Cause::forbidden(
                format!("{path}.restartPolicy"),
                "may not be set for non-init containers",
            ));
        } else if policy != "Always" {
            causes.push(Cause::not_supported(
                format!("{path}.restartPolicy"),
                &json!(policy),
                &["Always"],
            ));
        }
    }
    for (kind, value) in container
        .pointer("/resources/limits")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| ("limits", (k, v)))
        .chain(
            container
                .pointer("/resources/requests")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| ("requests", (k, v))),
        )
    {
        let (resource, quantity) = value;
        if plinth_core::quantity::of(quantity).is_none() {
            causes.push(Cause::invalid(
                format!("{path}.resources.{kind}[{resource}]"),
                quantity,
                "must be a valid quantity",
            ));
        }
    }
    // A request above its limit (kube's ValidateResourceRequirements).
    for (resource, request) in container
        .pointer("/resources/requests")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(limit) = container
            .pointer("/resources/limits")
            .and_then(|l| l.get(resource))
        else {
            continue;
        };
        if let (Some(asked), Some(most)) = (
            plinth_core::quantity::of(request),
            plinth_core::quantity::of(limit),
        ) && asked > most
        {
            let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            causes.push(Cause::invalid(
                format!("{path}.resources.requests[{resource}]"),
                &json!(text(request)),
                &format!(
                    "must be less than or equal to {resource} limit of {}",
                    text(limit)
                ),
            ));
        }
    }
}

/// The fields of an ephemeral container besides those of kube's allow list, in the order
/// of Go's `EphemeralContainerCommon` (each refused: "cannot be set for an Ephemeral
/// Container").
const NOT_FOR_EPHEMERAL: [&str; 8] = [
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// kube's `validateEphemeralContainers`: each is a container (as a pod's are), named
/// uniquely among all the pod's containers, targeting one of the others if it names one,
/// with none of the fields an ephemeral container cannot have.
fn validate_ephemeral_containers(
    spec: &Value,
    path: &str,
    volumes: &[String],
    others: &[String],
    causes: &mut Vec<Cause>,
) {
    let mut names: Vec<String> = others.to_vec();
    for (i, container) in items(spec, "ephemeralContainers").iter().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        let mut common = container.clone();
        if let Some(c) = common.as_object_mut() {
            for field in NOT_FOR_EPHEMERAL {
                c.remove(field);
            }
        }
        validate_container(&p, &common, volumes, false, causes);
        let name = text(container, "name");
        if names.iter().any(|n| n == name) {
            causes.push(Cause::duplicate(format!("{p}.name"), name));
        } else if !name.is_empty() {
            names.push(name.to_owned());
        }
        let target = text(container, "targetContainerName");
        if !target.is_empty() && !others.iter().any(|o| o == target) {
            causes.push(Cause::not_found(format!("{p}.targetContainerName"), target));
        }
        for field in NOT_FOR_EPHEMERAL {
            let set = container.get(field).is_some_and(|v| match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::String(s) => !s.is_empty(),
                _ => true,
            });
            if set {
                causes.push(Cause::forbidden(
                    format!("{p}.{field}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (j, mount) in items(container, "volumeMounts").iter().enumerate() {
            for field in ["subPath", "subPathExpr"] {
                if !text(mount, field).is_empty() {
                    causes.push(Cause::forbidden(
                        format!("{p}.volumeMounts[{j}].{field}"),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
}

/// Two ports of the pod's containers on one host port (kube's `checkHostPortConflicts`:
/// protocol, host IP and port, each once).
fn host_port_conflicts(spec: &Value, path: &str) -> Vec<Cause> {
    let mut seen = std::collections::BTreeSet::new();
    let mut causes = Vec::new();
    for (i, container) in items(spec, "containers").iter().enumerate() {
        for (j, port) in items(container, "ports").iter().enumerate() {
            let host_port = port.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if host_port == 0 {
                continue;
            }
            let key = format!(
                "{}/{}/{host_port}",
                port.get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("TCP"),
                text(port, "hostIP")
            );
            if !seen.insert(key.clone()) {
                causes.push(Cause::duplicate(
                    format!("{path}.containers[{i}].ports[{j}].hostPort"),
                    &key,
                ));
            }
        }
    }
    causes
}

/// kube's sysctl name pattern (dots or slashes between parts).
const SYSCTL_PATTERN: &str =
    r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?";

/// Whether `name` is a sysctl name kube accepts: at most 253 characters of
/// [`SYSCTL_PATTERN`].
fn sysctl_name_ok(name: &str) -> bool {
    let part_ok = |part: &str| {
        let bytes = part.as_bytes();
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        !bytes.is_empty()
            && bytes.first().is_some_and(edge)
            && bytes.last().is_some_and(edge)
            && bytes.iter().all(|b| edge(b) || *b == b'-' || *b == b'_')
    };
    name.len() <= 253 && name.split(['.', '/']).all(part_ok)
}

/// `securityContext.sysctls`: names kube accepts, each once.
fn validate_sysctls(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let mut seen: Vec<&str> = Vec::new();
    let list = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, sysctl) in list.iter().enumerate() {
        let p = format!("{path}.securityContext.sysctls[{i}].name");
        let name = text(sysctl, "name");
        if name.is_empty() {
            causes.push(Cause::required(p, ""));
        } else if !sysctl_name_ok(name) {
            causes.push(Cause::invalid(
                p,
                &json!(name),
                &format!("must have at most 253 characters and match regex {SYSCTL_PATTERN}"),
            ));
        } else if seen.contains(&name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                p,
                format!("Duplicate value: {name:?}"),
            ));
        }
        seen.push(name);
    }
}

/// The causes of an invalid `PodSpec` at `path` (`spec`, `spec.template.spec`).
pub fn validate_pod_spec(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut volumes = Vec::new();
    for (i, volume) in items(spec, "volumes").iter().enumerate() {
        let p = format!("{path}.volumes[{i}]");
        let name = text(volume, "name");
        if name.is_empty() {
            causes.push(Cause::required(format!("{p}.name"), ""));
        } else if volumes.iter().any(|v| v == name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("{p}.name"),
                format!("Duplicate value: {name:?}"),
            ));
        } else {
            causes.extend(label_causes(&format!("{p}.name"), name));
        }
        volumes.push(name.to_owned());
        let sources: Vec<&String> = volume
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| *k != "name" && !v.is_null())
            .map(|(k, _)| k)
            .collect();
        if sources.len() > 1 {
            causes.push(Cause::forbidden(
                format!("{p}.{}", sources[1]),
                "may not specify more than 1 volume type",
            ));
        }
        if let Some(claim) = volume.get("persistentVolumeClaim")
            && text(claim, "claimName").is_empty()
        {
            causes.push(Cause::required(
                format!("{p}.persistentVolumeClaim.claimName"),
                "",
            ));
        }
        if let Some(host) = volume.get("hostPath")
            && text(host, "path").is_empty()
        {
            causes.push(Cause::required(format!("{p}.hostPath.path"), ""));
        }
    }
    let containers = items(spec, "containers");
    if containers.is_empty() {
        causes.push(Cause::required(format!("{path}.containers"), ""));
    }
    let mut names: Vec<String> = Vec::new();
    for (list, init) in [("initContainers", true), ("containers", false)] {
        for (i, container) in items(spec, list).iter().enumerate() {
            let p = format!("{path}.{list}[{i}]");
            validate_container(&p, container, &volumes, init, &mut causes);
            let name = text(container, "name");
            if !name.is_empty() {
                if names.iter().any(|n| n == name) {
                    causes.push(Cause::new(
                        "FieldValueDuplicate",
                        format!("{p}.name"),
                        format!("Duplicate value: {name:?}"),
                    ));
                }
                names.push(name.to_owned());
            }
        }
    }
    causes.extend(host_port_conflicts(spec, path));
    validate_ephemeral_containers(spec, path, &volumes, &names, &mut causes);
    if let Some(policy) = spec.get("restartPolicy").and_then(Value::as_str)
        && !RESTART_POLICIES.contains(&policy)
    {
        causes.push(Cause::not_supported(
            format!("{path}.restartPolicy"),
            &json!(policy),
            RESTART_POLICIES,
        ));
    }
    if let Some(policy) = spec.get("dnsPolicy").and_then(Value::as_str)
        && !DNS_POLICIES.contains(&policy)
    {
        causes.push(Cause::not_supported(
            format!("{path}.dnsPolicy"),
            &json!(policy),
            DNS_POLICIES,
        ));
    }
    if let Some(seconds) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && seconds <= 0
    {
        causes.push(Cause::invalid(
            format!("{path}.activeDeadlineSeconds"),
            &json!(seconds),
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for field in ["serviceAccountName", "nodeName"] {
        if let Some(name) = spec.get(field).and_then(Value::as_str)
            && !name.is_empty()
        {
            for m in dns1123_subdomain(name) {
                causes.push(Cause::invalid(format!("{path}.{field}"), &json!(name), &m));
            }
        }
    }
    validate_sysctls(spec, path, &mut causes);
    if let Some(selector) = spec.get("nodeSelector").and_then(Value::as_object) {
        causes.extend(plinth_core::validation::labels(
            selector,
            &format!("{path}.nodeSelector"),
        ));
    }
    for (i, t) in items(spec, "tolerations").iter().enumerate() {
        let p = format!("{path}.tolerations[{i}]");
        let operator = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
        if !["Equal", "Exists"].contains(&operator) {
            causes.push(Cause::not_supported(
                format!("{p}.operator"),
                &json!(operator),
                &["Equal", "Exists"],
            ));
        }
        if operator == "Exists" && !text(t, "value").is_empty() {
            causes.push(Cause::invalid(
                format!("{p}.operator"),
                &json!(text(t, "value")),
                "value must be empty when `operator` is 'Exists'",
            ));
        }
        if let Some(effect) = t.get("effect").and_then(Value::as_str)
            && !effect.is_empty()
            && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect)
        {
            causes.push(Cause::not_supported(
                format!("{p}.effect"),
                &json!(effect),
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
    causes
}

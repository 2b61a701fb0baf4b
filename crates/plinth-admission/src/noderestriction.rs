//! kube's NodeRestriction admission plugin: a node agent (`system:node:<name>`) may change
//! only its own Node (not its taints, nor labels outside the kubelet's set), the status of the
//! pods bound to it, create only mirror pods bound to itself, delete and evict only the pods
//! bound to it, update only its claims' status (and, in the token subresource, asks for
//! ServiceAccount tokens bound to its own pods only).

use std::collections::BTreeSet;

use plinth_core::ApiError;
use serde_json::Value;

use super::{Operation, Request};
use plinth_registry::resources::Objects;

/// The annotation of a mirror pod (a static pod's reflection in the API).
const MIRROR: &str = "kubernetes.io/config.mirror";

/// The labels a kubelet may set on its Node (kube's `IsKubeletLabel`).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.ends_with(&format!(".{domain}"))
}

/// The labels of `modified` a node may not set.
fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|label| {
            let namespace = label.split_once('/').map_or("", |(ns, _)| ns);
            let kubernetes =
                in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io");
            let kubelet = KUBELET_LABELS.contains(&label.as_str())
                || in_namespace(namespace, "kubelet.kubernetes.io")
                || in_namespace(namespace, "node.kubernetes.io");
            in_namespace(namespace, "node-restriction.kubernetes.io") || (kubernetes && !kubelet)
        })
        .cloned()
        .collect()
}

fn labels(object: Option<&Value>) -> serde_json::Map<String, Value> {
    object
        .and_then(|o| o["metadata"]["labels"].as_object())
        .cloned()
        .unwrap_or_default()
}

/// The labels added, removed or changed between `new` and `old`.
fn modified_labels(new: Option<&Value>, old: Option<&Value>) -> BTreeSet<String> {
    let (a, b) = (labels(new), labels(old));
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(v)))
        .map(|(k, _)| k.clone())
        .collect()
}

fn node_name(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or("")
}

/// Admits a node's write; anyone else's passes untouched.
///
/// # Errors
/// kube's 403 for what a node may not do.
pub(crate) async fn admit(
    objects: &dyn Objects,
    request: &Request<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(node) = request.user.node() else {
        return Ok(());
    };
    if request.operation == Operation::Connect {
        return Ok(());
    }
    let def = request.def;
    let forbid = |why: String| {
        Err(ApiError::forbidden(
            Some(&def.group_resource()),
            request.name,
            &why,
        ))
    };
    if node.is_empty() {
        return forbid(format!(
            "could not determine node from user {:?}",
            request.user.name
        ));
    }
    let operation = request.operation.as_str();
    match (
        def.group_version.group.as_str(),
        def.plural.as_str(),
        request.subresource,
    ) {
        ("", "pods", "") => match (request.operation, object, old) {
            (Operation::Create, Some(pod), _) => mirror_pod(node, pod, forbid),
            (Operation::Delete, _, Some(pod)) if node_name(pod) != node => forbid(format!(
                "node {node:?} can only delete pods with spec.nodeName set to itself"
            )),
            (Operation::Delete, _, _) => Ok(()),
            _ => forbid(format!(
                "unexpected operation {operation:?}, node {node:?} can only create and delete mirror pods"
            )),
        },
        ("", "pods", "status") => {
            if old.is_some_and(|pod| node_name(pod) != node) {
                return forbid(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            if !modified_labels(object, old).is_empty() {
                return forbid(format!(
                    "node {node:?} cannot update labels through pod status"
                ));
            }
            Ok(())
        }
        ("", "pods", "eviction") => {
            let pods = objects.resource("", "v1", "pods");
            let pod = match pods {
                Some(pods) => objects
                    .get(&pods, request.namespace, request.name)
                    .await
                    .ok(),
                None => None,
            };
            if pod.as_ref().is_some_and(|p| node_name(p) == node) {
                Ok(())
            } else {
                forbid(format!(
                    "node {node} can only evict pods with spec.nodeName set to itself"
                ))
            }
        }
        ("", "pods", other) => forbid(format!(
            "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
        )),
        ("", "nodes", _) => {
            if request.name != node {
                return forbid(format!(
                    "node {node:?} is not allowed to modify node {:?}",
                    request.name
                ));
            }
            let forbidden = forbidden_labels(&modified_labels(object, old));
            match request.operation {
                Operation::Create if !forbidden.is_empty() => forbid(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                )),
                Operation::Update
                    if object.map(|o| &o["spec"]["taints"])
                        != old.map(|o| &o["spec"]["taints"]) =>
                {
                    forbid(format!("node {node:?} is not allowed to modify taints"))
                }
                Operation::Update if !forbidden.is_empty() => forbid(format!(
                    "is not allowed to modify labels: {}",
                    forbidden.join(", ")
                )),
                _ => Ok(()),
            }
        }
        ("", "persistentvolumeclaims", sub) if sub != "status" => {
            forbid("may only update PVC status".to_owned())
        }
        _ => Ok(()),
    }
}

/// A node may create only mirror pods, bound to itself, owned by nothing but its Node, and
/// using no ServiceAccount, Secret, ConfigMap or claim.
fn mirror_pod(
    node: &str,
    pod: &Value,
    forbid: impl Fn(String) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    if pod["metadata"]["annotations"].get(MIRROR).is_none() {
        return forbid(format!(
            "pod does not have {MIRROR:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if node_name(pod) != node {
        return forbid(format!(
            "node {node:?} can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = pod["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if owners.len() > 1 {
        return forbid(format!(
            "node {node:?} can only create pods with a single owner reference set to itself"
        ));
    }
    if let Some(owner) = owners.first() {
        if owner["kind"] != "Node" || owner["name"] != node || owner["apiVersion"] != "v1" {
            return forbid(format!(
                "node {node:?} can only create pods with an owner reference set to itself"
            ));
        }
        if owner["controller"] != true {
            return forbid(format!(
                "node {node:?} can only create pods with a controller owner reference set to itself"
            ));
        }
        if owner["blockOwnerDeletion"] == true {
            return forbid(format!(
                "node {node:?} must not set blockOwnerDeletion on an owner reference"
            ));
        }
    }
    let spec = &pod["spec"];
    if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return forbid(format!(
            "node {node:?} can not create pods that reference a service account"
        ));
    }
    for (keys, what) in [
        (
            &["secret", "secretRef", "secretKeyRef", "imagePullSecrets"][..],
            "secrets",
        ),
        (
            &["configMap", "configMapRef", "configMapKeyRef"][..],
            "configmaps",
        ),
        (
            &["persistentVolumeClaim", "ephemeral"][..],
            "persistentvolumeclaims",
        ),
    ] {
        if has_key(spec, keys) {
            return forbid(format!(
                "node {node:?} can not create pods that reference {what}"
            ));
        }
    }
    Ok(())
}

/// Whether any object in `value` has one of `keys` (with a value that is not null).
fn has_key(value: &Value, keys: &[&str]) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (keys.contains(&k.as_str()) && !v.is_null()) || has_key(v, keys)),
        Value::Array(items) => items.iter().any(|v| has_key(v, keys)),
        _ => false,
    }
}

//! The agent's events on its pods, as the kubelet records them (`Pulled`, `Created`,
//! `Started`, `Killing`, `BackOff`, `Unhealthy`, `Failed`, `FailedMount`; source `kubelet`):
//! a repeat of the same event raises its `count` instead of adding another.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// (pod UID, reason, message) → the event's name and count.
type Sent = HashMap<(String, String, String), (String, i64)>;

/// Events sent, by pod, reason and message: their names and counts.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    sent: Mutex<Sent>,
}

/// What an event says.
pub(crate) struct Said<'a> {
    /// The container it is about (its `fieldPath`), if any.
    pub(crate) container: Option<&'a str>,
    /// `Warning` rather than `Normal`.
    pub(crate) warning: bool,
    pub(crate) reason: &'a str,
    pub(crate) message: &'a str,
}

impl Recorder {
    /// Records what `said` says on `pod`.
    pub(crate) async fn record(
        &self,
        client: &kube::Client,
        node: &str,
        pod: &Pod,
        said: Said<'_>,
    ) {
        let Said {
            container,
            warning,
            reason,
            message,
        } = said;
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        let now = plinth_core::meta::format_time(crate::clock::now());
        let key = (uid.clone(), reason.to_owned(), message.to_owned());
        let earlier = self.sent.lock().ok().and_then(|s| s.get(&key).cloned());
        if let Some((event, count)) = earlier {
            let patched = api
                .patch(
                    &event,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"count": count + 1, "lastTimestamp": now})),
                )
                .await;
            if patched.is_ok()
                && let Ok(mut sent) = self.sent.lock()
            {
                sent.insert(key, (event, count + 1));
            }
            return;
        }
        let mut involved = json!({"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
            "name": name, "uid": uid});
        if let Some(container) = container {
            involved["fieldPath"] = json!(format!("spec.containers{{{container}}}"));
        }
        let event: Result<Event, _> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": namespace},
            "involvedObject": involved,
            "reason": reason, "message": message,
            "type": if warning { "Warning" } else { "Normal" },
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet", "reportingInstance": node,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }));
        let Ok(event) = event else { return };
        match api.create(&PostParams::default(), &event).await {
            Ok(created) => {
                if let (Some(event), Ok(mut sent)) = (created.metadata.name, self.sent.lock()) {
                    sent.insert(key, (event, 1));
                }
            }
            Err(e) => tracing::debug!(error = %e, "event not recorded"),
        }
    }

    /// Forgets a pod's events (it is gone).
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.retain(|(u, _, _), _| u != uid);
        }
    }
}

//! Keeps the webhooks in force in step with the Mutating/ValidatingWebhookConfigurations: read
//! once before the server serves, then followed from their watches.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use plinth_core::ApiError;
use serde_json::Value;
use tokio::sync::watch;

use super::{Admission, webhook};
use crate::registry::{ListOptions, Registry};

const GROUP: &str = "admissionregistration.k8s.io";
const KINDS: [(&str, bool); 2] = [
    ("mutatingwebhookconfigurations", true),
    ("validatingwebhookconfigurations", false),
];

fn publish(admission: &Admission, mutating: bool, configurations: &BTreeMap<String, Value>) {
    let hooks = configurations
        .values()
        .flat_map(|c| webhook::parse(c, mutating))
        .collect();
    admission.set(mutating, hooks);
}

/// Reads the configurations there are, then follows them until the server stops.
///
/// # Errors
/// A list that fails at start.
pub(crate) async fn start(
    registry: &Registry,
    admission: &Arc<Admission>,
    stopping: &watch::Receiver<bool>,
) -> Result<(), ApiError> {
    for (plural, mutating) in KINDS {
        let Some(def) = registry.resources.get(GROUP, "v1", plural) else {
            continue;
        };
        let list = registry.list(&def, None, &ListOptions::default()).await?;
        let configurations: BTreeMap<String, Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((plinth_core::meta::name(c)?.to_owned(), c.clone())))
            .collect();
        publish(admission, mutating, &configurations);
        tokio::spawn(follow(
            registry.clone(),
            admission.clone(),
            stopping.clone(),
            plural,
            mutating,
        ));
    }
    Ok(())
}

async fn follow(
    registry: Registry,
    admission: Arc<Admission>,
    stopping: watch::Receiver<bool>,
    plural: &'static str,
    mutating: bool,
) {
    loop {
        let Some((_, mut events)) = registry
            .watch_until_stopped((GROUP, plural), &stopping, "admission webhooks")
            .await
        else {
            return;
        };
        // The watch begins with every configuration there is.
        let mut configurations = BTreeMap::new();
        while let Some(event) = events.next().await {
            let object = event.object();
            let Some(name) = plinth_core::meta::name(&object).map(str::to_owned) else {
                continue;
            };
            match event.kind {
                "ADDED" | "MODIFIED" => {
                    configurations.insert(name, (*object).clone());
                }
                "DELETED" => {
                    configurations.remove(&name);
                }
                _ => continue,
            }
            publish(&admission, mutating, &configurations);
        }
        if *stopping.borrow() {
            return;
        }
    }
}

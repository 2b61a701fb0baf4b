//! `plinth rewrite`: every object of some resources written back unchanged through the API,
//! so that storage re-encodes it with the current encryption key — kube's documented
//! `kubectl get secrets -A -o json | kubectl replace -f -`, paged and retried on conflicts.

use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::{Client, ResourceExt};

/// Objects fetched per page.
const PAGE: u32 = 500;
/// Attempts per object when it changes between the read and the write.
const ATTEMPTS: usize = 5;

/// Rewrites every object of each named resource; prints a line per resource.
///
/// # Errors
/// A message for an unknown resource, an unreachable server or a refused write.
pub(crate) async fn run(names: &[String]) -> Result<(), String> {
    let client = Client::try_default()
        .await
        .map_err(|e| format!("cannot build a client from the kubeconfig: {e}"))?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("discovery failed: {e}"))?;
    let mut targets = Vec::new();
    for name in names {
        targets.push(resolve(&discovery, name)?);
    }
    for (resource, namespaced) in targets {
        let written = rewrite(&client, &resource, namespaced).await?;
        let shown = if resource.group.is_empty() {
            resource.plural.clone()
        } else {
            format!("{}.{}", resource.plural, resource.group)
        };
        println!("{shown}: {written} rewritten");
    }
    Ok(())
}

/// `secrets` (any group, the core group first) or `widgets.example.com` (plural and group);
/// the kind, in any case, names its resource too (`secret`, `Deployment`).
pub(crate) fn resolve(discovery: &Discovery, name: &str) -> Result<(ApiResource, bool), String> {
    let (plural, group) = match name.split_once('.') {
        Some((plural, group)) => (plural, Some(group)),
        None => (name, None),
    };
    let mut found = Vec::new();
    for api_group in discovery.groups() {
        if group.is_some_and(|g| g != api_group.name()) {
            continue;
        }
        for (resource, capabilities) in api_group.recommended_resources() {
            if resource.plural == plural || resource.kind.eq_ignore_ascii_case(plural) {
                found.push((resource, capabilities.scope == Scope::Namespaced));
            }
        }
    }
    found.sort_by_key(|(resource, _)| !resource.group.is_empty());
    found
        .into_iter()
        .next()
        .ok_or_else(|| format!("the server doesn't have a resource type \"{name}\""))
}

async fn rewrite(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
) -> Result<usize, String> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let mut params = ListParams::default().limit(PAGE);
    let mut written = 0;
    loop {
        let page = all
            .list(&params)
            .await
            .map_err(|e| format!("cannot list {}: {e}", resource.plural))?;
        for object in page.items {
            if replace(client, resource, namespaced, object).await? {
                written += 1;
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(written),
        }
    }
}

/// Writes `object` back; on a conflict reads it again and retries. `false` when it was
/// deleted meanwhile.
async fn replace(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    mut object: DynamicObject,
) -> Result<bool, String> {
    let name = object.name_any();
    let api: Api<DynamicObject> = match object.namespace().filter(|_| namespaced) {
        Some(namespace) => Api::namespaced_with(client.clone(), &namespace, resource),
        None => Api::all_with(client.clone(), resource),
    };
    for _ in 0..ATTEMPTS {
        match api.replace(&name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(false),
            Err(kube::Error::Api(status)) if status.code == 409 => match api.get_opt(&name).await {
                Ok(Some(fresh)) => object = fresh,
                Ok(None) => return Ok(false),
                Err(e) => return Err(format!("cannot read {name}: {e}")),
            },
            Err(e) => return Err(format!("cannot rewrite {}/{name}: {e}", resource.plural)),
        }
    }
    Err(format!(
        "{}/{name} kept changing; {ATTEMPTS} attempts failed",
        resource.plural
    ))
}

//! Reading lists through the registry, for the controllers that still re-list per pass.

/// The items of a list of `plural` in `group`'s v1 (none when it is not served or the list
/// fails: the caller tries again at its next pass).
pub(crate) async fn items(
    registry: &plinth_registry::Registry,
    (group, plural): (&str, &str),
    namespace: Option<&str>,
    options: &plinth_registry::ListOptions,
) -> Vec<serde_json::Value> {
    let Some(def) = registry.resources.get(group, "v1", plural) else {
        return Vec::new();
    };
    registry
        .list(&def, namespace, options)
        .await
        .ok()
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

//! The history API, `history.plinth.dev/v1alpha1`: an object's past, read with the rights to
//! read the object. Each view takes the path of what it is about after its name:
//!
//! | GET `/apis/history.plinth.dev/v1alpha1/…`                    | answers                      |
//! |--------------------------------------------------------------|------------------------------|
//! | `revisions/api/v1/namespaces/ns/configmaps/x[?since=10m]`      | `ObjectHistory`: its versions with provenance |
//! | `object/apis/apps/v1/namespaces/ns/deployments/web?revision=R` (or `time=`) | the object as it was |
//! | `diff/…/configmaps/x[?from=R1&to=R2]`                          | `ObjectDiff`: a unified diff of two versions |
//! | `deleted/api/v1/namespaces/ns/configmaps[?since=1h]`           | `DeletedObjectList`          |
//! | `revision?time=10m` (or an RFC 3339 time)                      | `RevisionAtTime`: the store's revision then |
//! | `graph/apis/apps/v1/namespaces/ns/deployments/web`             | `OwnerGraph`: owners, dependents (recursively), finalizers, what blocks a deletion |
//! | `timeline/apis/apps/v1/namespaces/ns/deployments/web[?since=10m]` | `Timeline`: its writes, its descendants', their Events, container starts and exits |
//!
//! `revisions`, `object`, `diff` and `timeline` are authorized as a `get` of the object,
//! `deleted` as a `list` of its resource — a user who may not read a Secret reads none of its
//! past; a timeline shows only the descendants the user may `get`.

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use plinth_core::{ApiError, StatusReason};
use plinth_registry::history::{Change, ObjectVersion};
use plinth_registry::resources::ResourceDef;
use plinth_registry::timeline::ObjectRef;
use plinth_store::Revision;
use serde_json::{Value, json};

use super::negotiate::{Format, respond};
use super::query::Query;

/// What a view is about: the path after the view's name, as a resource path reads.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct About {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) namespace: Option<String>,
    pub(super) resource: String,
    pub(super) name: Option<String>,
    /// Set when the path names a subresource, of which there is no history.
    pub(super) subresource: Option<String>,
}

fn not_found() -> ApiError {
    ApiError::new(
        StatusReason::NotFound,
        "the server could not find the requested resource",
    )
}

/// The group and version the API is served under.
pub(super) const GROUP: &str = "history.plinth.dev";
/// Its version.
pub(super) const VERSION: &str = "v1alpha1";
const API_VERSION: &str = "history.plinth.dev/v1alpha1";

/// The views, each with the verb that authorizes it.
pub(super) fn verb_of(view: &str) -> Option<&'static str> {
    match view {
        "revisions" | "object" | "diff" | "timeline" | "graph" => Some("get"),
        "deleted" => Some("list"),
        "revision" => Some(""),
        _ => None,
    }
}

/// Serves one history request (already authorized).
pub(super) async fn serve(
    registry: &plinth_registry::Registry,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    view: &str,
    about: Option<&About>,
    visible: &(dyn Fn(&ObjectRef) -> bool + Sync),
) -> Result<Response, ApiError> {
    if *method != Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    let format = match super::negotiate::negotiate(headers) {
        Ok(Format::Yaml) => Format::Yaml,
        _ => Format::Json,
    };
    if view == "revision" {
        let time = when(query.get("time"), "time")?
            .ok_or_else(|| ApiError::bad_request("time: Required value"))?;
        let revision = registry.revision_at(time).await?;
        let answer = json!({
            "kind": "RevisionAtTime",
            "apiVersion": API_VERSION,
            "time": plinth_core::meta::format_micro_time(time),
            "revision": revision.to_string(),
        });
        return Ok(respond(StatusCode::OK, &answer, format, &[]));
    }
    let Some(About {
        group,
        version,
        namespace,
        resource,
        name,
        subresource: None,
    }) = about
    else {
        return Err(not_found());
    };
    let def = registry
        .resources
        .get(group, version, resource)
        .filter(|d| d.answer.is_none() && d.computed.is_none())
        .ok_or_else(not_found)?;
    let namespace = namespace.as_deref().filter(|_| def.namespaced);
    if def.namespaced && namespace.is_none() && name.is_some() {
        return Err(not_found());
    }
    match (view, name.as_deref()) {
        ("revisions", Some(name)) => {
            let from = since(registry, query).await?;
            let with_objects = query.get("objects").is_none_or(|_| query.flag("objects"));
            let versions = registry
                .history(&def, namespace, name, from, with_objects)
                .await?;
            if versions.is_empty() {
                // Nothing since then is an answer; nothing ever is a 404.
                existing(
                    registry.history(&def, namespace, name, 0, false).await?,
                    &def,
                    name,
                )?;
            }
            let answer = json!({
                "kind": "ObjectHistory",
                "apiVersion": API_VERSION,
                "target": target(&def, namespace, name),
                "revisions": versions.iter().map(|v| v.to_json(with_objects)).collect::<Vec<_>>(),
            });
            Ok(respond(StatusCode::OK, &answer, format, &[]))
        }
        ("object", Some(name)) => {
            let at = match (query.get("revision"), query.get("time")) {
                (Some(_), Some(_)) => {
                    return Err(ApiError::bad_request(
                        "revision and time are exclusive: give one",
                    ));
                }
                (Some(text), None) => revision(text, "revision")?,
                (None, Some(_)) => match when(query.get("time"), "time")? {
                    Some(time) => registry.revision_at(time).await?,
                    None => return Err(ApiError::bad_request("time: Required value")),
                },
                (None, None) => {
                    return Err(ApiError::bad_request("revision or time: Required value"));
                }
            };
            let versions = registry.history(&def, namespace, name, 0, true).await?;
            let version = as_of(&versions, at, &def, name)?;
            let object = version.object.clone().ok_or_else(|| {
                ApiError::expired(format!("the version of {name} at {at} is no longer kept"))
            })?;
            Ok(respond(StatusCode::OK, &object, format, &[]))
        }
        ("diff", Some(name)) => {
            let versions = existing(
                registry.history(&def, namespace, name, 0, true).await?,
                &def,
                name,
            )?;
            let to = match query.get("to") {
                Some(text) => version_at(&versions, revision(text, "to")?, &def, name)?,
                None => versions.last().ok_or_else(|| gone(&def, name))?,
            };
            let from = match query.get("from") {
                Some(text) => Some(version_at(&versions, revision(text, "from")?, &def, name)?),
                // The version before `to`, if there is one.
                None => versions.iter().rev().find(|v| v.revision < to.revision),
            };
            let keep_managed = query.flag("managedFields");
            let text = |v: Option<&ObjectVersion>| {
                v.filter(|v| v.change != Change::Deleted)
                    .and_then(|v| v.object.clone())
                    .map(|mut object| {
                        if !keep_managed
                            && let Some(meta) =
                                object.get_mut("metadata").and_then(Value::as_object_mut)
                        {
                            meta.remove("managedFields");
                        }
                        serde_norway::to_string(&object).unwrap_or_default()
                    })
                    .unwrap_or_default()
            };
            let label = |v: Option<&ObjectVersion>| {
                v.map_or_else(
                    || "/dev/null".to_owned(),
                    |v| format!("{name}@{}", v.revision),
                )
            };
            let diff = plinth_core::diff::unified(
                &text(from),
                &text(Some(to)),
                &label(from),
                &label(Some(to)),
                3,
            );
            if accepts_text(headers) {
                return Ok((
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    diff,
                )
                    .into_response());
            }
            let answer = json!({
                "kind": "ObjectDiff",
                "apiVersion": API_VERSION,
                "target": target(&def, namespace, name),
                "from": from.map(|v| v.revision.to_string()),
                "to": to.revision.to_string(),
                "diff": diff,
            });
            Ok(respond(StatusCode::OK, &answer, format, &[]))
        }
        ("graph", Some(name)) => {
            let object = registry.get(&def, namespace, name).await?;
            let graph = registry.owner_graph(&def, &object, visible).await?;
            Ok(respond(StatusCode::OK, &graph, format, &[]))
        }
        ("timeline", Some(name)) => {
            let from = since(registry, query).await?;
            let timeline = registry
                .timeline(&def, namespace, name, from, visible)
                .await?;
            let answer = json!({
                "kind": "Timeline",
                "apiVersion": API_VERSION,
                "target": target(&def, namespace, name),
                "truncated": timeline.truncated,
                "steps": timeline.steps.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
            });
            Ok(respond(StatusCode::OK, &answer, format, &[]))
        }
        ("deleted", None) => {
            let from = since(registry, query).await?;
            let limit = match query.get("limit") {
                None => usize::MAX,
                Some(text) => text
                    .parse::<usize>()
                    .ok()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "limit: Invalid value: {text:?}: must be a positive integer"
                        ))
                    })?,
            };
            let deleted = registry.deleted(&def, namespace, from, limit).await?;
            let answer = json!({
                "kind": "DeletedObjectList",
                "apiVersion": API_VERSION,
                "resource": def.group_resource().to_string(),
                "items": deleted.iter().map(|v| v.to_json(true)).collect::<Vec<_>>(),
            });
            Ok(respond(StatusCode::OK, &answer, format, &[]))
        }
        _ => Err(not_found()),
    }
}

fn accepts_text(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').any(|c| c.trim().starts_with("text/plain")))
}

fn target(def: &ResourceDef, namespace: Option<&str>, name: &str) -> Value {
    json!({
        "apiVersion": def.group_version.api_version(),
        "kind": def.kind,
        "resource": def.plural,
        "namespace": namespace,
        "name": name,
    })
}

fn gone(def: &ResourceDef, name: &str) -> ApiError {
    ApiError::not_found(&def.group_resource(), name)
}

/// 404 when history holds no version of the object.
fn existing(
    versions: Vec<ObjectVersion>,
    def: &ResourceDef,
    name: &str,
) -> Result<Vec<ObjectVersion>, ApiError> {
    if versions.is_empty() {
        return Err(gone(def, name));
    }
    Ok(versions)
}

/// The object visible at revision `at`: 404 if it did not exist then.
fn as_of<'a>(
    versions: &'a [ObjectVersion],
    at: Revision,
    def: &ResourceDef,
    name: &str,
) -> Result<&'a ObjectVersion, ApiError> {
    let version = version_at(versions, at, def, name)?;
    if version.change == Change::Deleted {
        let mut e = gone(def, name);
        e.message = format!("{} at revision {at}", e.message);
        return Err(e);
    }
    Ok(version)
}

/// The newest version at or before revision `at` (a deletion included): 410 if that is
/// older than what is kept, 404 if there is none.
fn version_at<'a>(
    versions: &'a [ObjectVersion],
    at: Revision,
    def: &ResourceDef,
    name: &str,
) -> Result<&'a ObjectVersion, ApiError> {
    let Some(oldest) = versions.first() else {
        return Err(gone(def, name));
    };
    if at < oldest.revision && oldest.change != Change::Added {
        // Its state then is older than what is kept.
        return Err(ApiError::expired(format!(
            "too old resource version: {at} ({}): the oldest retained revision of {name} is {}",
            oldest.revision, oldest.revision
        )));
    }
    match versions.iter().rev().find(|v| v.revision <= at) {
        Some(v) => Ok(v),
        None => {
            let mut e = gone(def, name);
            e.message = format!("{} at revision {at}", e.message);
            Err(e)
        }
    }
}

/// A revision given in a query parameter.
fn revision(text: &str, field: &str) -> Result<Revision, ApiError> {
    text.parse::<Revision>()
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{field}: Invalid value: {text:?}: must be a positive integer revision"
            ))
        })
}

/// A time given as a duration before now (`10m`, `1h30m`) or an RFC 3339 time, in Unix
/// microseconds.
fn when(text: Option<&str>, field: &str) -> Result<Option<i64>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let now = plinth_registry::provenance::now_micros();
    if let Some(seconds) = plinth_core::meta::go_duration_seconds(text) {
        return Ok(Some(now - seconds.saturating_mul(1_000_000)));
    }
    plinth_registry::provenance::parse_micro_time(text)
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{field}: Invalid value: {text:?}: must be a duration before now (10m, 1h30m) or an RFC 3339 time"
            ))
        })
}

/// The first revision a `since` (a time) or `from` (a revision) asks for; 0 for all kept.
async fn since(registry: &plinth_registry::Registry, query: &Query) -> Result<Revision, ApiError> {
    if let Some(text) = query.get("from") {
        return revision(text, "from");
    }
    match when(query.get("since"), "since")? {
        // The writes after the revision current then.
        Some(time) => match registry.revision_at(time).await {
            Ok(revision) => Ok(revision + 1),
            // Before everything kept: everything kept.
            Err(e) if e.reason == StatusReason::Expired => Ok(0),
            Err(e) => Err(e),
        },
        None => Ok(0),
    }
}

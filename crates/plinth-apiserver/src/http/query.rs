//! The query string, parsed once per request into the registry's typed options. Every
//! parameter kube-apiserver accepts for a verb is parsed here; a value that does not parse is
//! a 400 naming the parameter (422 where kube-apiserver validates the options), before
//! anything is read or written.
//!
//! Booleans follow kube's conversion: `0` and `false` (any case) are false, every other value
//! true.

use std::time::Duration;

use axum::http::Uri;
use plinth_core::selector::{FieldSelector, LabelSelector};
use plinth_core::{ApiError, Cause};
use serde_json::{Value, json};

use plinth_registry::{
    DeleteOptions, FieldValidation, ListOptions, Propagation, ResourceVersionMatch, WatchOptions,
    WriteOptions, decode_continue, parse_rv,
};

/// The parsed query string.
#[derive(Debug)]
pub(crate) struct Query(Vec<(String, String)>);

/// A 400 for parameter `name` whose `value` does not parse.
fn bad_value(name: &str, value: &str, reason: &str) -> ApiError {
    ApiError::bad_request(format!("{name}: Invalid value: {value:?}: {reason}"))
}

/// kube's 422 for options that parse but do not go together.
fn invalid(kind: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "meta.k8s.io",
        kind,
        "",
        vec![Cause::forbidden(field, message)],
    )
}

impl Query {
    /// Parses the query string of `uri`.
    pub(crate) fn parse(uri: &Uri) -> Self {
        Self(
            form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// Every parameter, in order.
    pub(crate) fn pairs(&self) -> Vec<(String, String)> {
        self.0.clone()
    }

    /// The last value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter as kube converts it (absent: false).
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }

    fn integer(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| bad_value(name, v, "must be an integer"))
            })
            .transpose()
    }

    /// `labelSelector`, `fieldSelector`, `limit`, `continue`, `resourceVersion`,
    /// `resourceVersionMatch` (and `timeoutSeconds`, checked though a list ignores it).
    pub(crate) fn list_options(&self) -> Result<ListOptions, ApiError> {
        let labels =
            LabelSelector::parse(self.get("labelSelector").unwrap_or("")).map_err(|e| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {}",
                    e.0.trim_start_matches("unable to parse requirement: ")
                ))
            })?;
        let fields = FieldSelector::parse(self.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.0))?;
        let limit = self.integer("limit")?.unwrap_or(0).max(0) as usize;
        self.timeout()?;
        let continue_token = self
            .get("continue")
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if let Some(token) = &continue_token {
            decode_continue(token)?;
        }
        let resource_version = self.get("resourceVersion").map(str::to_owned);
        if let Some(rv) = resource_version.as_deref().filter(|rv| !rv.is_empty()) {
            parse_rv(rv)?;
        }
        let resource_version_match = ResourceVersionMatch::parse(self.get("resourceVersionMatch"))?;
        if resource_version_match.is_some() {
            let rv = resource_version.as_deref().unwrap_or("");
            if rv.is_empty() {
                return Err(invalid(
                    "ListOptions",
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if continue_token.is_some() {
                return Err(invalid(
                    "ListOptions",
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if resource_version_match == Some(ResourceVersionMatch::Exact) && rv == "0" {
                return Err(invalid(
                    "ListOptions",
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        Ok(ListOptions {
            labels,
            fields,
            limit,
            continue_token,
            resource_version,
            resource_version_match,
        })
    }

    /// `timeoutSeconds`.
    fn timeout(&self) -> Result<Option<Duration>, ApiError> {
        match self.integer("timeoutSeconds")? {
            Some(t) if t < 0 => Err(bad_value(
                "timeoutSeconds",
                &t.to_string(),
                "must be greater than or equal to 0",
            )),
            Some(t) => Ok(Some(Duration::from_secs(t as u64))),
            None => Ok(None),
        }
    }

    /// The list options plus `sendInitialEvents`, `allowWatchBookmarks`, `timeoutSeconds`.
    pub(crate) fn watch_options(&self) -> Result<WatchOptions, ApiError> {
        let send_initial_events = self.flag("sendInitialEvents");
        let bookmarks = self.flag("allowWatchBookmarks");
        if send_initial_events && !bookmarks {
            return Err(invalid(
                "ListOptions",
                "allowWatchBookmarks",
                "allowWatchBookmarks must be set to true when sendInitialEvents is true",
            ));
        }
        let mut list = self.list_options_for_watch()?;
        list.limit = 0;
        Ok(WatchOptions {
            list,
            send_initial_events,
            bookmarks,
            timeout: self.timeout()?,
        })
    }

    /// A watch's list options: `resourceVersionMatch` only goes with `sendInitialEvents`.
    fn list_options_for_watch(&self) -> Result<ListOptions, ApiError> {
        if self.get("sendInitialEvents").is_some() {
            // The match applies to the initial events; kube requires a resourceVersion-free
            // NotOlderThan to mean "consistent".
            let mut options = self.list_options_lenient_match()?;
            options.continue_token = None;
            return Ok(options);
        }
        self.list_options()
    }

    /// List options where `resourceVersionMatch` may come without a resourceVersion (a
    /// watch-list's `NotOlderThan` with no resourceVersion asks for a consistent start).
    fn list_options_lenient_match(&self) -> Result<ListOptions, ApiError> {
        let matched = ResourceVersionMatch::parse(self.get("resourceVersionMatch"))?;
        let stripped = Self(
            self.0
                .iter()
                .filter(|(k, _)| k != "resourceVersionMatch")
                .cloned()
                .collect(),
        );
        let mut options = stripped.list_options()?;
        options.resource_version_match = matched;
        Ok(options)
    }

    /// `dryRun`, `fieldValidation`, `fieldManager`, `force`.
    pub(crate) fn write_options(&self) -> Result<WriteOptions, ApiError> {
        let field_manager = self.get("fieldManager").map(str::to_owned);
        if let Some(manager) = &field_manager
            && manager.chars().count() > 128
        {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::invalid(
                    "fieldManager",
                    &json!(manager),
                    "must be less than 128 characters",
                )],
            ));
        }
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation"))?,
            field_manager,
            force: self.flag("force"),
            ..WriteOptions::default()
        })
    }

    /// `dryRun`: `All`, or absent.
    pub(crate) fn dry_run(&self) -> Result<bool, ApiError> {
        let values: Vec<&str> = self
            .0
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.as_str())
            .collect();
        dry_run_values(&values)
    }

    /// `gracePeriodSeconds`, `propagationPolicy`, `orphanDependents`, `dryRun`, and the
    /// `DeleteOptions` body (preconditions; its fields win over the query's).
    pub(crate) fn delete_options(&self, body: Option<&Value>) -> Result<DeleteOptions, ApiError> {
        let mut options = DeleteOptions {
            dry_run: self.dry_run()?,
            grace_period_seconds: self.integer("gracePeriodSeconds")?,
            ..DeleteOptions::default()
        };
        let orphan = self
            .get("orphanDependents")
            .map(|_| self.flag("orphanDependents"));
        options.propagation = Propagation::parse(self.get("propagationPolicy"), orphan)?;
        let Some(body) = body else {
            return Ok(options);
        };
        if let Some(dry_run) = body.get("dryRun") {
            let values: Vec<&str> = dry_run
                .as_array()
                .map(|d| d.iter().map(|v| v.as_str().unwrap_or("")).collect())
                .unwrap_or_default();
            options.dry_run |= dry_run_values(&values)?;
        }
        if let Some(grace) = body.get("gracePeriodSeconds").filter(|g| !g.is_null()) {
            options.grace_period_seconds = Some(grace.as_i64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: json: cannot unmarshal {grace} into Go struct field DeleteOptions.gracePeriodSeconds of type int64"
                ))
            })?);
        }
        options.uid = body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        options.resource_version = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let policy = body.get("propagationPolicy").filter(|p| !p.is_null());
        let orphan = body.get("orphanDependents").filter(|o| !o.is_null());
        if policy.is_some() || orphan.is_some() {
            options.propagation = Propagation::parse(
                policy.and_then(Value::as_str),
                orphan.and_then(Value::as_bool),
            )?;
        }
        Ok(options)
    }
}

fn dry_run_values(values: &[&str]) -> Result<bool, ApiError> {
    match values {
        [] => Ok(false),
        values if values.iter().all(|v| *v == "All") => Ok(true),
        other => Err(ApiError::bad_request(format!(
            "dryRun: Unsupported value: \"{}\": supported values: \"All\"",
            other.iter().find(|v| **v != "All").unwrap_or(&"")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(q: &str) -> Query {
        Query::parse(&format!("/x?{q}").parse::<Uri>().unwrap())
    }

    /// Parses a query one way, keeping only the outcome.
    type Parse = fn(&Query) -> Result<(), ApiError>;

    #[test]
    fn every_bad_value_names_its_parameter() {
        let cases: [(&str, Parse, u16, &str); 12] = [
            ("limit=abc", |q| q.list_options().map(drop), 400, "limit"),
            (
                "timeoutSeconds=x",
                |q| q.watch_options().map(drop),
                400,
                "timeoutSeconds",
            ),
            (
                "timeoutSeconds=-1",
                |q| q.list_options().map(drop),
                400,
                "timeoutSeconds",
            ),
            (
                "resourceVersion=abc",
                |q| q.list_options().map(drop),
                400,
                "resource version",
            ),
            (
                "resourceVersion=1&resourceVersionMatch=Sometimes",
                |q| q.list_options().map(drop),
                400,
                "resourceVersionMatch",
            ),
            (
                "resourceVersionMatch=Exact",
                |q| q.list_options().map(drop),
                422,
                "resourceVersionMatch",
            ),
            (
                "continue=garbage",
                |q| q.list_options().map(drop),
                400,
                "continue",
            ),
            (
                "dryRun=Some",
                |q| q.write_options().map(drop),
                400,
                "dryRun",
            ),
            (
                "fieldValidation=Loose",
                |q| q.write_options().map(drop),
                400,
                "fieldValidation",
            ),
            (
                "gracePeriodSeconds=soon",
                |q| q.delete_options(None).map(drop),
                400,
                "gracePeriodSeconds",
            ),
            (
                "propagationPolicy=Sideways",
                |q| q.delete_options(None).map(drop),
                422,
                "propagationPolicy",
            ),
            (
                "sendInitialEvents=true",
                |q| q.watch_options().map(drop),
                422,
                "allowWatchBookmarks",
            ),
        ];
        for (q, parse, code, named) in cases {
            let error = parse(&query(q)).unwrap_err();
            assert_eq!(error.code(), code, "{q}: {}", error.message);
            assert!(error.message.contains(named), "{q}: {}", error.message);
        }
    }

    #[test]
    fn booleans_convert_as_kube_does() {
        assert!(query("watch=yes").flag("watch"));
        assert!(query("watch=1").flag("watch"));
        assert!(!query("watch=0").flag("watch"));
        assert!(!query("watch=False").flag("watch"));
        assert!(!query("").flag("watch"));
    }
}

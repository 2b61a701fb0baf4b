//! Provenance: who made each write and through which request — user, groups, impersonator,
//! field manager, operation, subresource, user agent, audit ID, time — kept by the store with
//! the revision the write produced (a [store note](plinth_store::note)).
//!
//! The API server scopes every request's work with its provenance ([`Provenance::scope`]); the
//! in-process [`Client`](crate::Client) does the same for the built-in controllers under their
//! own identities (kube-controller-manager's service accounts). A write with no provenance
//! around it is the server's own (`system:apiserver`).
//!
//! A note is the JSON object the history API shows:
//! `{"user":"alice","groups":[…],"operation":"patch","fieldManager":"kubectl-edit",…}`.

use std::future::Future;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::user::User;

/// The user of writes made with no provenance around them: the API server itself.
pub const SERVER: &str = "system:apiserver";

/// What a write says of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// Who wrote (as impersonated, if they impersonated).
    pub user: String,
    /// Their groups.
    pub groups: Vec<String>,
    /// Who sent the request, when they impersonated `user`.
    pub impersonator: Option<String>,
    /// The field manager (`fieldManager`, or the user agent's first word).
    pub field_manager: String,
    /// `create`, `update`, `patch`, `apply`, `delete`, `deletecollection`.
    pub operation: String,
    /// The subresource written (`status`, `scale`…), empty for the object itself.
    pub subresource: String,
    /// The request's `User-Agent`.
    pub user_agent: String,
    /// The request's audit ID (its `Audit-Id` response header).
    pub audit_id: String,
    /// When the request came, in Unix microseconds.
    pub time_micros: i64,
}

impl Provenance {
    /// A request's provenance by `user`, now.
    pub fn of(user: &User, operation: &str) -> Self {
        Self {
            user: user.name.clone(),
            groups: user.groups.clone(),
            operation: operation.to_owned(),
            time_micros: now_micros(),
            ..Self::default()
        }
    }

    /// The provenance of a built-in controller's write: `controller` (`deployment-controller`)
    /// as kube-controller-manager's service account of that name, or the server itself when
    /// `None`; a name beginning `system:` is a component's own user (`system:kube-scheduler`).
    pub fn internal(controller: Option<&str>, operation: &str, manager: &str) -> Self {
        let user = match controller {
            // A component with a user of its own (`system:kube-scheduler`).
            Some(name) if name.starts_with("system:") => User::new(name, &[]),
            Some(name) => User::new(
                &format!("system:serviceaccount:kube-system:{name}"),
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                ],
            ),
            None => User::new(SERVER, &[crate::user::MASTERS]),
        };
        Self {
            field_manager: manager.to_owned(),
            ..Self::of(&user, operation)
        }
    }

    /// The note the store keeps: this provenance as JSON.
    pub fn to_note(&self) -> Bytes {
        Bytes::from(self.to_json().to_string())
    }

    /// As the history API shows it.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("user".into(), json!(self.user));
        if !self.groups.is_empty() {
            out.insert("groups".into(), json!(self.groups));
        }
        if let Some(impersonator) = &self.impersonator {
            out.insert("impersonator".into(), json!(impersonator));
        }
        for (field, value) in [
            ("operation", &self.operation),
            ("subresource", &self.subresource),
            ("fieldManager", &self.field_manager),
            ("userAgent", &self.user_agent),
            ("auditID", &self.audit_id),
        ] {
            if !value.is_empty() {
                out.insert(field.into(), json!(value));
            }
        }
        out.insert(
            "time".into(),
            json!(plinth_core::meta::format_micro_time(self.time_micros)),
        );
        Value::Object(out)
    }

    /// Reads a note back; `None` if it is not one of ours.
    pub fn from_note(note: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(note).ok()?;
        let text = |field: &str| {
            value
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let time = value.get("time").and_then(Value::as_str)?;
        Some(Self {
            user: value.get("user").and_then(Value::as_str)?.to_owned(),
            groups: value
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            impersonator: value
                .get("impersonator")
                .and_then(Value::as_str)
                .map(str::to_owned),
            field_manager: text("fieldManager"),
            operation: text("operation"),
            subresource: text("subresource"),
            user_agent: text("userAgent"),
            audit_id: text("auditID"),
            time_micros: parse_micro_time(time)?,
        })
    }

    /// Runs `work` with every write it makes carrying this provenance.
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        plinth_store::note::noted(self.to_note(), work).await
    }
}

/// The clock in Unix microseconds.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `2006-01-02T15:04:05.000000Z` (or any RFC 3339 time) in Unix microseconds.
pub fn parse_micro_time(text: &str) -> Option<i64> {
    let seconds = plinth_core::meta::parse_time(text)?;
    // The fraction, if any, between the seconds and the zone.
    let fraction = text
        .split_once('.')
        .map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .unwrap_or_default();
    let micros: i64 = format!("{fraction:0<6}")
        .get(..6)
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    Some(seconds * 1_000_000 + micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provenance_reads_back_from_its_note() {
        let mut p = Provenance::of(&User::new("alice", &["devs"]), "apply");
        p.impersonator = Some("admin".into());
        p.field_manager = "kubectl".into();
        p.subresource = "status".into();
        p.user_agent = "kubectl/v1.32.0".into();
        p.audit_id = "abc".into();
        p.time_micros = 1_765_000_000_123_456;
        let back = Provenance::from_note(&p.to_note()).unwrap();
        assert_eq!(back, p);
        assert_eq!(
            p.to_json()["time"],
            json!("2025-12-06T05:46:40.123456Z"),
            "{}",
            p.to_json()
        );
        assert_eq!(Provenance::from_note(b"not json"), None);
    }

    #[test]
    fn controllers_write_as_their_service_accounts() {
        let p = Provenance::internal(
            Some("deployment-controller"),
            "create",
            "kube-controller-manager",
        );
        assert_eq!(
            p.user,
            "system:serviceaccount:kube-system:deployment-controller"
        );
        assert!(
            p.groups
                .iter()
                .any(|g| g == "system:serviceaccounts:kube-system")
        );
        assert_eq!(
            Provenance::internal(None, "update", "kube-apiserver").user,
            SERVER
        );
    }

    #[test]
    fn micro_times_parse_with_and_without_fractions() {
        assert_eq!(parse_micro_time("1970-01-01T00:00:01.5Z"), Some(1_500_000));
        assert_eq!(parse_micro_time("1970-01-01T00:00:02Z"), Some(2_000_000));
        assert_eq!(parse_micro_time("nonsense"), None);
    }
}

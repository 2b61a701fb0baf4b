//! The audit log (kube's `--audit-policy-file`, `--audit-log-path`): a policy decides, per
//! request, the level — `None`, `Metadata`, `Request` (with the request's object),
//! `RequestResponse` (and the response's) — and `audit.k8s.io/v1` Events are written as JSON
//! lines, one per stage: `RequestReceived`, `ResponseStarted` (watches), `ResponseComplete`,
//! unless the policy omits the stage. The file rotates past `--audit-log-maxsize` megabytes,
//! keeping `--audit-log-maxbackup` old files. A Secret's data is logged only by a rule that
//! names `secrets`: a catch-all rule above `Metadata` logs Secrets at `Metadata`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use plinth_auth::{Attributes, User};

/// How much of a request is logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing.
    None,
    /// Who, what, when, the answer's code.
    Metadata,
    /// And the request's object.
    Request,
    /// And the response's.
    RequestResponse,
}

impl Level {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "None" => Self::None,
            "Metadata" => Self::Metadata,
            "Request" => Self::Request,
            "RequestResponse" => Self::RequestResponse,
            other => return Err(format!("unknown audit level {other:?}")),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Metadata => "Metadata",
            Self::Request => "Request",
            Self::RequestResponse => "RequestResponse",
        }
    }
}

/// A policy or log that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("audit: {0}")]
pub struct AuditError(pub String);

#[derive(Debug)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    names: Vec<String>,
}

#[derive(Debug)]
struct Rule {
    level: Level,
    users: Vec<String>,
    groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    paths: Vec<String>,
    omit_stages: Vec<String>,
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    fn from_json(rule: &Value) -> Result<Self, String> {
        let level = Level::parse(rule.get("level").and_then(Value::as_str).unwrap_or(""))?;
        let resources = rule
            .get("resources")
            .and_then(Value::as_array)
            .map(|groups| {
                groups
                    .iter()
                    .map(|g| GroupResources {
                        group: g
                            .get("group")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        resources: strings(g, "resources"),
                        names: strings(g, "resourceNames"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            level,
            users: strings(rule, "users"),
            groups: strings(rule, "userGroups"),
            verbs: strings(rule, "verbs"),
            resources,
            namespaces: strings(rule, "namespaces"),
            paths: strings(rule, "nonResourceURLs"),
            omit_stages: strings(rule, "omitStages"),
        })
    }

    fn matches(&self, user: &User, attributes: &Attributes) -> bool {
        let any = |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
        if !any(&self.users, &user.name)
            || !(self.groups.is_empty() || self.groups.iter().any(|g| user.in_group(g)))
            || !any(&self.verbs, &attributes.verb)
        {
            return false;
        }
        if !attributes.resource_request {
            // A rule for resources or namespaces says nothing of paths.
            if !self.resources.is_empty() || !self.namespaces.is_empty() {
                return false;
            }
            return self.paths.is_empty()
                || self.paths.iter().any(|p| {
                    *p == attributes.path
                        || p.strip_suffix('*')
                            .is_some_and(|prefix| attributes.path.starts_with(prefix))
                });
        }
        if !self.paths.is_empty() || !any(&self.namespaces, &attributes.namespace) {
            return false;
        }
        self.resources.is_empty() || self.resources.iter().any(|g| g.covers(attributes))
    }

    /// Whether the rule names `secrets` (of the core group) explicitly.
    fn names_secrets(&self) -> bool {
        self.resources
            .iter()
            .any(|g| g.group.is_empty() && g.resources.iter().any(|r| r == "secrets"))
    }
}

impl GroupResources {
    fn covers(&self, attributes: &Attributes) -> bool {
        if self.group != "*" && self.group != attributes.api_group {
            return false;
        }
        let combined = attributes.combined_resource();
        let resource = self.resources.is_empty()
            || self.resources.iter().any(|r| {
                r == "*"
                    || *r == attributes.resource
                    || *r == combined
                    || r.strip_prefix("*/")
                        .is_some_and(|sub| sub == attributes.subresource)
                    || r.strip_suffix("/*")
                        .is_some_and(|res| res == attributes.resource)
            });
        let name = self.names.is_empty() || self.names.contains(&attributes.name);
        resource && name
    }
}

/// The audit policy (`audit.k8s.io/v1` Policy).
#[derive(Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<String>,
}

impl Policy {
    /// Reads a policy file.
    ///
    /// # Errors
    /// [`AuditError`] for a file that is not a policy.
    pub fn from_file(path: &Path) -> Result<Self, AuditError> {
        let fail = |e: String| AuditError(format!("policy {}: {e}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let policy: Value = serde_norway::from_str(&text).map_err(|e| fail(e.to_string()))?;
        Self::from_value(&policy).map_err(fail)
    }

    fn from_value(policy: &Value) -> Result<Self, String> {
        if policy["kind"] != "Policy" {
            return Err("kind must be Policy".into());
        }
        let rules = policy
            .get("rules")
            .and_then(Value::as_array)
            .ok_or("a policy needs rules")?
            .iter()
            .map(Rule::from_json)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rules,
            omit_stages: strings(policy, "omitStages"),
        })
    }

    /// The level of a request and the stages not to log.
    fn decide(&self, user: &User, attributes: &Attributes) -> (Level, Vec<String>) {
        let Some(rule) = self.rules.iter().find(|r| r.matches(user, attributes)) else {
            return (Level::None, Vec::new());
        };
        let mut level = rule.level;
        let secret = attributes.resource_request
            && attributes.api_group.is_empty()
            && attributes.resource == "secrets";
        if secret && level > Level::Metadata && !rule.names_secrets() {
            level = Level::Metadata;
        }
        let mut omit = self.omit_stages.clone();
        omit.extend(rule.omit_stages.iter().cloned());
        (level, omit)
    }
}

/// A rotating audit log file.
#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    max_bytes: u64,
    max_backups: usize,
    file: std::fs::File,
    written: u64,
}

impl LogFile {
    fn open(path: &Path, max_mb: u64, max_backups: usize) -> Result<Self, AuditError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| AuditError(format!("log {}: {e}", path.display())))?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Self {
            path: path.to_owned(),
            max_bytes: max_mb.saturating_mul(1024 * 1024),
            max_backups,
            file,
            written,
        })
    }

    fn write_line(&mut self, line: &[u8]) {
        if self.max_bytes > 0 && self.written + line.len() as u64 > self.max_bytes {
            self.rotate();
        }
        if self.file.write_all(line).is_ok() {
            self.written += line.len() as u64;
        }
    }

    /// `audit.log` → `audit-<timestamp>.log` (as kube's lumberjack names backups), keeping
    /// the newest `max_backups`.
    fn rotate(&mut self) {
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audit".into());
        let extension = self
            .path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let stamp = plinth_core::meta::format_micro_time(micros_now())
            .replace(':', "-")
            .trim_end_matches('Z')
            .to_owned();
        let backup = self
            .path
            .with_file_name(format!("{stem}-{stamp}{extension}"));
        if std::fs::rename(&self.path, &backup).is_err() {
            return;
        }
        if let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            self.file = file;
            self.written = 0;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        let prefix = format!("{stem}-");
        let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect();
        backups.sort();
        if self.max_backups > 0 && backups.len() > self.max_backups {
            for old in &backups[..backups.len() - self.max_backups] {
                let _ = std::fs::remove_file(old);
            }
        }
    }
}

fn micros_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The audit log: a policy and where events go.
#[derive(Debug)]
pub struct Audit {
    policy: Policy,
    log: Mutex<LogFile>,
}

/// One request being audited: what its events share.
#[derive(Debug)]
pub struct Record {
    level: Level,
    omit: Vec<String>,
    event: Value,
}

/// What the HTTP layer knows of a request when it is received.
pub struct Received<'a> {
    /// The user (as impersonated, if they impersonate: the sender goes in `impersonator`).
    pub user: &'a User,
    /// The sender, when they impersonate `user`.
    pub impersonator: Option<&'a User>,
    /// What it asks.
    pub attributes: &'a Attributes,
    /// The path and query.
    pub uri: &'a str,
    /// The client's address.
    pub source: Option<std::net::IpAddr>,
    /// `User-Agent`.
    pub user_agent: &'a str,
    /// The request's audit ID (its `Audit-Id` header).
    pub audit_id: &'a str,
    /// The request's object, decoded when the level wants it (`Request` and above).
    pub body: &'a (dyn Fn() -> Option<Value> + Sync),
}

impl std::fmt::Debug for Received<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("user", &self.user.name)
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

fn user_json(user: &User) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

impl Record {
    /// Adds annotations (admission's) to the events still to be written.
    pub fn annotate(&mut self, annotations: Vec<(String, String)>) {
        if annotations.is_empty() {
            return;
        }
        if !self.event.get("annotations").is_some_and(Value::is_object) {
            self.event["annotations"] = json!({});
        }
        for (key, value) in annotations {
            self.event["annotations"][key] = Value::String(value);
        }
    }
}

impl Audit {
    /// The policy in `policy`, events to `log` (rotated past `max_mb`, `max_backups` kept).
    ///
    /// # Errors
    /// [`AuditError`] if the policy cannot be read or the log opened.
    pub fn open(
        policy: &Path,
        log: &Path,
        max_mb: u64,
        max_backups: usize,
    ) -> Result<Self, AuditError> {
        Ok(Self {
            policy: Policy::from_file(policy)?,
            log: Mutex::new(LogFile::open(log, max_mb, max_backups)?),
        })
    }

    /// Starts auditing a request: its `RequestReceived` event is written now. `None` when the
    /// policy logs nothing of it.
    pub fn received(&self, request: &Received<'_>) -> Option<Record> {
        let (level, omit) = self.policy.decide(request.user, request.attributes);
        if level == Level::None {
            return None;
        }
        let a = request.attributes;
        let now = plinth_core::meta::format_micro_time(micros_now());
        let mut event = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": level.name(),
            "auditID": request.audit_id,
            "requestURI": request.uri,
            "verb": a.verb,
            "user": user_json(request.user),
            "sourceIPs": request.source.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
            "userAgent": request.user_agent,
            "requestReceivedTimestamp": now,
        });
        if let Some(sender) = request.impersonator {
            event["impersonatedUser"] = user_json(request.user);
            event["user"] = user_json(sender);
        }
        if a.resource_request {
            let mut reference = json!({"resource": a.resource, "apiVersion": a.api_version});
            for (field, value) in [
                ("namespace", &a.namespace),
                ("name", &a.name),
                ("apiGroup", &a.api_group),
                ("subresource", &a.subresource),
            ] {
                if !value.is_empty() {
                    reference[field] = json!(value);
                }
            }
            event["objectRef"] = reference;
        }
        if level >= Level::Request
            && let Some(object) = (request.body)()
        {
            event["requestObject"] = object;
        }
        let mut record = Record { level, omit, event };
        self.write(&record, "RequestReceived", None, None);
        // The later stages name what a create makes, as kube's `LogRequestObject` fills the
        // reference from the decoded request object (a generated name stays unknown).
        if a.resource_request
            && a.verb == "create"
            && a.name.is_empty()
            && a.subresource.is_empty()
            && let Some(name) = (request.body)()
                .as_ref()
                .and_then(|o| plinth_core::meta::name(o).map(str::to_owned))
                .filter(|n| !n.is_empty())
        {
            record.event["objectRef"]["name"] = Value::String(name);
        }
        Some(record)
    }

    /// A later stage of `record`'s request: the answer's code and, at `RequestResponse`, its
    /// body (JSON, or a protobuf object decoded; a protobuf list is logged without it).
    pub fn stage(&self, record: &Record, stage: &str, code: u16, body: Option<&[u8]>) {
        self.write(record, stage, Some(code), body);
    }

    /// Whether `record`'s response body is wanted.
    pub fn wants_response(record: &Record) -> bool {
        record.level == Level::RequestResponse
    }

    fn write(&self, record: &Record, stage: &str, code: Option<u16>, body: Option<&[u8]>) {
        if record.omit.iter().any(|s| s == stage) {
            return;
        }
        let mut event = record.event.clone();
        event["stage"] = json!(stage);
        event["stageTimestamp"] = json!(plinth_core::meta::format_micro_time(micros_now()));
        if let Some(code) = code {
            event["responseStatus"] = json!({"metadata": {}, "code": code});
        }
        let object = body.and_then(|b| {
            serde_json::from_slice::<Value>(b)
                .ok()
                .or_else(|| plinth_protobuf::decode(b).ok())
        });
        if let Some(object) = object {
            event["responseObject"] = object;
        }
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .write_line(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(verb: &str, resource: &str, namespace: &str) -> Attributes {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            namespace: namespace.into(),
            resource: resource.into(),
            api_version: "v1".into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_secrets_stay_at_metadata() {
        let policy = Policy::from_value(&json!({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "None", "users": ["system:kube-proxy"]},
                {"level": "None", "nonResourceURLs": ["/healthz*"]},
                {"level": "Request", "resources": [{"group": "", "resources": ["configmaps"]}], "namespaces": ["team"]},
                {"level": "RequestResponse"},
            ],
        }))
        .unwrap();
        let alice = User::new("alice", &[]);
        assert_eq!(
            policy
                .decide(
                    &User::new("system:kube-proxy", &[]),
                    &attributes("get", "pods", "x")
                )
                .0,
            Level::None
        );
        assert_eq!(
            policy
                .decide(&alice, &Attributes::path("GET", "/healthz/ready"))
                .0,
            Level::None
        );
        assert_eq!(
            policy
                .decide(&alice, &attributes("get", "configmaps", "team"))
                .0,
            Level::Request
        );
        assert_eq!(
            policy
                .decide(&alice, &attributes("get", "configmaps", "other"))
                .0,
            Level::RequestResponse
        );
        // The catch-all does not name Secrets: their data stays out.
        assert_eq!(
            policy
                .decide(&alice, &attributes("get", "secrets", "team"))
                .0,
            Level::Metadata
        );
        assert_eq!(
            policy
                .decide(&alice, &attributes("get", "secrets", "team"))
                .1,
            vec!["RequestReceived".to_owned()]
        );
        let named = Policy::from_value(&json!({"kind": "Policy", "rules": [
            {"level": "RequestResponse", "resources": [{"group": "", "resources": ["secrets"]}]}]}))
        .unwrap();
        assert_eq!(
            named
                .decide(&alice, &attributes("get", "secrets", "team"))
                .0,
            Level::RequestResponse
        );
        assert!(
            Policy::from_value(&json!({"kind": "Policy", "rules": [{"level": "Everything"}]}))
                .is_err()
        );
    }
}

//! What the server serves: one [`ResourceDef`] per resource — names, scope, verbs, table columns,
//! and the per-type policy (the "strategy") the generic registry calls.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use plinth_core::meta::{at_path, human_duration, parse_time};
use plinth_core::{Cause, GroupResource, GroupVersion};
use serde_json::{Value, json};

use crate::schema::{self, Schema};

/// Computes a table cell from an object and the current Unix time.
pub type CellFn = Arc<dyn Fn(&Value, i64) -> Value + Send + Sync>;

/// A table column (`metav1.TableColumnDefinition`) and how to fill it.
#[derive(Clone)]
pub struct Column {
    /// Header, e.g. `Data`.
    pub name: String,
    /// `string`, `integer`, `date`...
    pub kind: String,
    /// `name` for the name column, else empty.
    pub format: String,
    /// Column description.
    pub description: String,
    /// 0: always shown; 1: with `-o wide`.
    pub priority: i64,
    /// The cell.
    pub cell: CellFn,
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Column")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Which rule `metadata.name` follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most types).
    Subdomain,
    /// RFC 1123 label (namespaces).
    Label,
    /// Anything usable as a path segment (custom resources).
    PathSegment,
}

/// Where a custom resource keeps its replica counts (its `/scale` subresource).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scale {
    /// `specReplicasPath` as fields.
    pub spec_replicas: Vec<String>,
    /// `statusReplicasPath` as fields.
    pub status_replicas: Vec<String>,
    /// `labelSelectorPath` as fields.
    pub label_selector: Option<Vec<String>>,
}

/// Extra per-type behaviour the generic registry calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No special behaviour.
    Plain,
    /// CustomResourceDefinitions: names defaulted, validated, held by the cleanup finalizer.
    Crd,
    /// Custom resources: with a status subresource, status is dropped on create.
    Custom,
    /// Namespaces: `spec.finalizers` defaults to `kubernetes`, `status.phase` to `Active`.
    Namespace,
    /// Secrets: `type` defaults to `Opaque` and is immutable; `stringData` is merged into `data`.
    Secret,
    /// ConfigMaps and Secrets with `immutable: true` refuse data changes.
    ConfigMap,
}

/// One served resource.
#[derive(Clone, Debug)]
pub struct ResourceDef {
    /// API group and version.
    pub group_version: GroupVersion,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Plural resource name, e.g. `configmaps`.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`cm`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// The name rule.
    pub name_rule: NameRule,
    /// Whether a `/status` subresource is served.
    pub status_subresource: bool,
    /// Whether `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    /// Whether a PUT of a missing object creates it.
    pub allow_create_on_update: bool,
    /// Fields usable in field selectors besides `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// Table columns after `Name`.
    pub columns: Vec<Column>,
    /// Whether an `Age` column follows them.
    pub age_column: bool,
    /// The type's schema, for type checks and unknown-field detection.
    pub schema: Arc<Schema>,
    /// Special behaviour.
    pub behaviour: Kind,
    /// Whether an immediate DELETE answers with the deleted object (custom resources) rather
    /// than a `Status` (built-in types).
    pub delete_returns_object: bool,
    /// The `/scale` subresource, for custom resources that declare one.
    pub scale: Option<Scale>,
    /// The resource's CRD is being deleted: no new objects.
    pub terminating: bool,
    /// events.k8s.io/v1 Events: the same objects as core/v1 Events, stored in the core form and
    /// converted on the way in and out.
    pub events_k8s_io: bool,
    /// The OpenAPI v3 schema to publish, when it is not derived from `schema` (a CRD version's
    /// `openAPIV3Schema`).
    pub openapi: Option<Arc<serde_json::Value>>,
    /// A custom resource's structural schema, compiled once per CRD version.
    pub structural: Option<Arc<plinth_schema::Schema>>,
    /// The `Warning` sent with every request to a deprecated version.
    pub deprecation: Option<String>,
}

impl ResourceDef {
    /// The group and resource, as errors name them.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group_version.group, &self.plural)
    }

    /// `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The storage key prefix of all objects (`/configmaps/`, `/coordination.k8s.io/leases/`).
    pub fn key_prefix(&self) -> String {
        if self.events_k8s_io {
            return "/events/".to_owned();
        }
        if self.group_version.group.is_empty() {
            format!("/{}/", self.plural)
        } else {
            format!("/{}/{}/", self.group_version.group, self.plural)
        }
    }

    /// The storage key prefix of one namespace's objects, or of all when `namespace` is `None`.
    pub fn list_prefix(&self, namespace: Option<&str>) -> String {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{}{ns}/", self.key_prefix()),
            None => self.key_prefix(),
        }
    }

    /// The storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{}{ns}/{name}", self.key_prefix()),
            None => format!("{}{name}", self.key_prefix()),
        }
    }

    /// The verbs on the main resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// The value of a selectable field of `object`, or `None` if it is not selectable.
    pub fn field_value(&self, object: &Value, field: &str) -> Option<String> {
        if !self.is_selectable(field) {
            return None;
        }
        Some(match at_path(object, field) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        })
    }

    /// Whether `field` may be used in a field selector.
    pub fn is_selectable(&self, field: &str) -> bool {
        field == "metadata.name"
            || field == "metadata.namespace"
            || self.selectable_fields.iter().any(|f| f == field)
    }
}

/// The set of served resources; CRDs add to it at run time.
#[derive(Debug, Default)]
pub struct Resources {
    by_gvr: RwLock<BTreeMap<(String, String, String), Arc<ResourceDef>>>,
}

impl Resources {
    /// The built-in resources.
    pub fn builtin() -> Self {
        let resources = Self::default();
        for def in builtin_defs() {
            resources.add(def);
        }
        resources
    }

    /// Serves `def` (replacing one with the same group, version and plural).
    pub fn add(&self, def: ResourceDef) {
        let key = (
            def.group_version.group.clone(),
            def.group_version.version.clone(),
            def.plural.clone(),
        );
        self.by_gvr
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::new(def));
    }

    /// Stops serving `plural` in `group`/`version`.
    pub fn remove(&self, group: &str, version: &str, plural: &str) {
        self.by_gvr
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(group.to_owned(), version.to_owned(), plural.to_owned()));
    }

    /// The resource `plural` in `group`/`version`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.by_gvr
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// The resource serving `kind` in `group`/`version` (its main resource, not a subresource).
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        self.by_gvr
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .find(|d| {
                d.group_version.group == group
                    && d.group_version.version == version
                    && d.kind == kind
                    && !d.events_k8s_io
            })
            .cloned()
    }

    /// Every resource, ordered by group, version and plural.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.by_gvr
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Every namespaced resource.
    pub fn namespaced(&self) -> Vec<Arc<ResourceDef>> {
        self.all().into_iter().filter(|d| d.namespaced).collect()
    }
}

fn column(
    name: &str,
    kind: &str,
    description: &str,
    priority: i64,
    cell: impl Fn(&Value, i64) -> Value + Send + Sync + 'static,
) -> Column {
    Column {
        name: name.into(),
        kind: kind.into(),
        format: String::new(),
        description: description.into(),
        priority,
        cell: Arc::new(cell),
    }
}

fn path_cell(path: &'static str) -> impl Fn(&Value, i64) -> Value + Send + Sync {
    move |object, _| match at_path(object, path) {
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
        _ => Value::String("<none>".into()),
    }
}

/// The `Age`-style cell for a timestamp at `path` ("<unknown>" when absent).
pub fn age_cell(object: &Value, path: &str, now: i64) -> Value {
    match at_path(object, path)
        .and_then(Value::as_str)
        .and_then(parse_time)
    {
        Some(t) => json!(human_duration(now - t)),
        None => json!("<unknown>"),
    }
}

fn count(object: &Value, fields: &[&str]) -> Value {
    let n: usize = fields
        .iter()
        .filter_map(|f| object.get(*f))
        .map(|v| match v {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        })
        .sum();
    json!(n)
}

struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    name_rule: NameRule,
    status: bool,
    behaviour: Kind,
    selectable: &'static [&'static str],
    columns: Vec<Column>,
    schema: Schema,
}

impl Builtin {
    fn def(self) -> ResourceDef {
        ResourceDef {
            group_version: GroupVersion::new(self.group, "v1"),
            kind: self.kind.into(),
            plural: self.plural.into(),
            singular: self.kind.to_lowercase(),
            namespaced: self.namespaced,
            short_names: self.short_names.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            name_rule: self.name_rule,
            status_subresource: self.status,
            generation: false,
            allow_create_on_update: false,
            selectable_fields: self.selectable.iter().map(|s| s.to_string()).collect(),
            columns: self.columns,
            schema: Arc::new(self.schema),
            age_column: self.kind != "Event",
            behaviour: self.behaviour,
            delete_returns_object: false,
            scale: None,
            terminating: false,
            events_k8s_io: self.group == "events.k8s.io",
            openapi: None,
            structural: None,
            deprecation: None,
        }
    }
}

fn event_columns() -> Vec<Column> {
    let last_seen = |o: &Value, now: i64| {
        for path in [
            "lastTimestamp",
            "deprecatedLastTimestamp",
            "series.lastObservedTime",
            "eventTime",
            "metadata.creationTimestamp",
        ] {
            if at_path(o, path)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return age_cell(o, path, now);
            }
        }
        json!("<unknown>")
    };
    let object = |o: &Value, _: i64| {
        let reference = o.get("involvedObject").or_else(|| o.get("regarding"));
        let kind = reference
            .and_then(|r| r.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = reference
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        json!(format!("{}/{name}", kind.to_lowercase()))
    };
    let message = |o: &Value, _: i64| {
        o.get("message")
            .or_else(|| o.get("note"))
            .cloned()
            .unwrap_or(json!(""))
    };
    vec![
        column(
            "Last Seen",
            "string",
            "Time since the event was last seen",
            0,
            last_seen,
        ),
        column(
            "Type",
            "string",
            "The type of the event",
            0,
            path_cell("type"),
        ),
        column(
            "Reason",
            "string",
            "Why the event happened",
            0,
            path_cell("reason"),
        ),
        column(
            "Object",
            "string",
            "The object the event is about",
            0,
            object,
        ),
        column(
            "Message",
            "string",
            "A human-readable description",
            0,
            message,
        ),
    ]
}

fn builtin_defs() -> Vec<ResourceDef> {
    let event_schema = schema::core_event();
    vec![
        Builtin {
            group: "",
            kind: "Namespace",
            plural: "namespaces",
            namespaced: false,
            short_names: &["ns"],
            name_rule: NameRule::Label,
            status: true,
            behaviour: Kind::Namespace,
            selectable: &["status.phase"],
            columns: vec![column(
                "Status",
                "string",
                "The phase of the namespace",
                0,
                path_cell("status.phase"),
            )],
            schema: schema::namespace(),
        }
        .def(),
        Builtin {
            group: "",
            kind: "ConfigMap",
            plural: "configmaps",
            namespaced: true,
            short_names: &["cm"],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::ConfigMap,
            selectable: &[],
            columns: vec![column("Data", "integer", "Number of keys", 0, |o, _| {
                count(o, &["data", "binaryData"])
            })],
            schema: schema::config_map(),
        }
        .def(),
        Builtin {
            group: "",
            kind: "Secret",
            plural: "secrets",
            namespaced: true,
            short_names: &[],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::Secret,
            selectable: &["type"],
            columns: vec![
                column(
                    "Type",
                    "string",
                    "The type of the secret",
                    0,
                    path_cell("type"),
                ),
                column("Data", "integer", "Number of keys", 0, |o, _| {
                    count(o, &["data"])
                }),
            ],
            schema: schema::secret(),
        }
        .def(),
        Builtin {
            group: "",
            kind: "ServiceAccount",
            plural: "serviceaccounts",
            namespaced: true,
            short_names: &["sa"],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::Plain,
            selectable: &[],
            columns: vec![column(
                "Secrets",
                "integer",
                "Number of secrets",
                0,
                |o, _| count(o, &["secrets"]),
            )],
            schema: schema::service_account(),
        }
        .def(),
        Builtin {
            group: "",
            kind: "Event",
            plural: "events",
            namespaced: true,
            short_names: &["ev"],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::Plain,
            selectable: &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            columns: event_columns(),
            schema: event_schema,
        }
        .def(),
        Builtin {
            group: "events.k8s.io",
            kind: "Event",
            plural: "events",
            namespaced: true,
            short_names: &["ev"],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::Plain,
            selectable: &[],
            columns: event_columns(),
            schema: schema::events_event(),
        }
        .def(),
        Builtin {
            group: "coordination.k8s.io",
            kind: "Lease",
            plural: "leases",
            namespaced: true,
            short_names: &[],
            name_rule: NameRule::Subdomain,
            status: false,
            behaviour: Kind::Plain,
            selectable: &[],
            columns: vec![column(
                "Holder",
                "string",
                "The holder of the lease",
                0,
                path_cell("spec.holderIdentity"),
            )],
            schema: schema::lease(),
        }
        .def(),
        crate::crd::crd_resource(),
    ]
    .into_iter()
    .map(|mut def| {
        if def.group_version.group.is_empty() && def.kind == "Event" {
            def.allow_create_on_update = true;
        }
        def
    })
    .collect()
}

/// Causes for an invalid `metadata.name` under `rule`.
pub fn name_causes(rule: NameRule, name: &str) -> Vec<Cause> {
    let messages = match rule {
        NameRule::Subdomain => plinth_core::validation::dns1123_subdomain(name),
        NameRule::Label => plinth_core::validation::dns1123_label(name),
        NameRule::PathSegment => plinth_core::validation::path_segment_name(name),
    };
    messages
        .into_iter()
        .map(|m| Cause::invalid("metadata.name", &json!(name), &m))
        .collect()
}

//! What the server serves: one [`ResourceDef`] per resource — names, scope, verbs, table columns,
//! and the per-type policy (the "strategy") the generic registry calls.
//!
//! A type's hooks see other objects only through [`Objects`] and node agents only through
//! [`NodeDialer`]: the registry and the node proxy implement them, and this file names neither.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use plinth_core::meta::{at_path, human_duration, parse_time};
use plinth_core::{Cause, GroupResource, GroupVersion};
use serde_json::{Value, json};

use crate::schema::Schema;
use crate::strategy::{Plain, Strategy};

/// What a type's hooks may do with other objects (the registry's face toward them; the
/// registry implements it). Writes made through it are checked and admitted as any other.
#[async_trait::async_trait]
pub trait Objects: crate::services::ServiceResolver + Send + Sync {
    /// The served resource `plural` of `group`/`version`.
    fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>>;

    /// Every served resource.
    fn resources(&self) -> Vec<Arc<ResourceDef>>;

    /// One object as the watch cache holds it (a lister's read, no storage round trip):
    /// `None` while the cache has not listed yet (or the resource is kept in no cache),
    /// `Some(None)` when absent from it.
    fn cached(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Option<Value>>;

    /// The objects of one namespace (or all, `None`) as the watch cache holds them (a
    /// lister's list, no storage round trip, no list built): `None` while the cache has not
    /// listed yet, or where objects are not cached.
    fn cached_list(&self, _def: &ResourceDef, _namespace: Option<&str>) -> Option<Vec<Value>> {
        None
    }

    /// The Namespace `name`: from the cache, else (not there yet) from storage; `None` when
    /// it does not exist or namespaces are not served.
    async fn namespace(&self, name: &str) -> Option<Value> {
        let def = self.resource("", "v1", "namespaces")?;
        match self.cached(&def, None, name) {
            Some(Some(namespace)) => Some(namespace),
            _ => self.get(&def, None, name).await.ok(),
        }
    }

    /// One object.
    ///
    /// # Errors
    /// 404 if absent.
    async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, plinth_core::ApiError>;

    /// A list (`items`), as [`crate::Registry::list`] answers it.
    ///
    /// # Errors
    /// As the registry's list.
    async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        options: &crate::ListOptions,
    ) -> Result<Value, plinth_core::ApiError>;

    /// A guaranteed update of `part` of an object: `change` runs on the current object (again
    /// after a conflict) and says whether it changed anything. Returns the object written.
    ///
    /// # Errors
    /// 404 if absent; whatever `change`, validation or admission refuse.
    async fn modify(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: crate::Part,
        options: &crate::WriteOptions,
        change: &(dyn for<'v> Fn(&'v mut Value) -> Result<bool, plinth_core::ApiError> + Sync),
    ) -> Result<Option<Value>, plinth_core::ApiError>;

    /// Deletes an object, as a DELETE does.
    ///
    /// # Errors
    /// 404 if absent; a failed precondition; admission's refusal.
    async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &crate::DeleteOptions,
    ) -> Result<(), plinth_core::ApiError>;
}

/// The server's token authenticators, as a TokenReview asks them.
#[async_trait::async_trait]
pub trait TokenReviewer: Send + Sync {
    /// Who bearer `token` authenticates as, for `audiences` (the API server's own when
    /// empty): the user and the audiences the token is good for (of those asked).
    ///
    /// # Errors
    /// Why the token authenticates no one, in kube's words; empty when no authenticator here
    /// claims it (kube's review then carries no error).
    async fn review(
        &self,
        objects: &dyn Objects,
        token: &str,
        audiences: &[String],
    ) -> Result<(crate::user::User, Vec<String>), String>;
}

/// The way to node agents, as a type's hooks use it (the node proxy implements it).
#[async_trait::async_trait]
pub trait NodeDialer: Send + Sync + std::fmt::Debug {
    /// GETs `path` from the agent of `node` and streams its answer back as it is.
    ///
    /// # Errors
    /// 404 for an unknown node; 500 when its agent cannot be reached.
    async fn get(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
    ) -> Result<axum::response::Response, plinth_core::ApiError>;

    /// Sends `path` to the agent of `node` with the client's upgrade headers; when the agent
    /// switches protocols, so does the client's connection.
    ///
    /// # Errors
    /// As [`NodeDialer::get`]; 400 when the client asked for no upgrade.
    async fn upgrade(
        &self,
        objects: &dyn Objects,
        node: &str,
        path: &str,
        headers: &axum::http::HeaderMap,
        upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Result<axum::response::Response, plinth_core::ApiError>;
}

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

/// Where a resource keeps its replica counts (its `/scale` subresource).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scale {
    /// `specReplicasPath` as fields.
    pub spec_replicas: Vec<String>,
    /// `statusReplicasPath` as fields.
    pub status_replicas: Vec<String>,
    /// Where the Scale's `status.selector` comes from.
    pub label_selector: Option<ScaleSelector>,
}

/// The source of a Scale's `status.selector`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleSelector {
    /// A string in the label selector syntax at these fields (a CRD's `labelSelectorPath`).
    Text(Vec<String>),
    /// A `metav1.LabelSelector` object at these fields (`spec.selector` of the built-in
    /// workloads), written in the label selector syntax.
    Object(Vec<String>),
    /// A map of labels at these fields (a ReplicationController's `spec.selector`), written
    /// in the label selector syntax.
    Map(Vec<String>),
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
    /// Subresources that change one field only (see [`crate::Part::Field`]): name and JSON pointer.
    pub field_subresources: Vec<(&'static str, &'static str)>,
    /// Whether `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    /// Whether a PUT of a missing object creates it.
    pub allow_create_on_update: bool,
    /// Fields usable in field selectors besides `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// A selectable field's value when an object lacks it (kube formats Go's zero value: a
    /// boolean field is `false`); `""` for those not named here.
    pub absent_fields: Vec<(String, String)>,
    /// The type's own field label conversion, as kube registers one for some kinds: exactly
    /// these selector names are accepted, each reading the field it names (in the form the
    /// resource serves)
    /// (`("spec.host", "spec.nodeName")`), and others refused with `unsupported_field`'s
    /// message. `None`: `metadata.name`, `metadata.namespace` and the selectable fields.
    pub field_labels: Option<Vec<(String, String)>>,
    /// The message refusing a field label the type's conversion does not know.
    pub unsupported_field: fn(&str) -> String,
    /// Table columns after `Name`.
    pub columns: Vec<Column>,
    /// Whether an `Age` column follows them.
    pub age_column: bool,
    /// The type's schema, for type checks and unknown-field detection.
    pub schema: Arc<Schema>,
    /// The type's behaviour.
    pub strategy: Arc<dyn Strategy>,
    /// Whether an immediate DELETE answers with the deleted object (custom resources) rather
    /// than a `Status` (built-in types).
    pub delete_returns_object: bool,
    /// The `/scale` subresource, for custom resources that declare one.
    pub scale: Option<Scale>,
    /// The resource's CRD is being deleted: no new objects.
    pub terminating: bool,
    /// The storage key prefix, when the objects are another resource's seen in another form
    /// (events.k8s.io/v1 Events are core/v1 Events: stored under `/events/`, converted by the
    /// strategy on the way in and out).
    pub stored_as: Option<String>,
    /// Whether lists and watches are served from a watch cache (kube-apiserver's default for
    /// every resource but Events, whose `--watch-cache-sizes` entry is 0): `false` reads
    /// storage and watches it directly, holding nothing of the objects in memory.
    pub watch_cached: bool,
    /// The OpenAPI v3 schema to publish, when it is not derived from `schema` (a CRD version's
    /// `openAPIV3Schema`).
    pub openapi: Option<Arc<serde_json::Value>>,
    /// The structural schema that types the objects in admission policies' CEL (a CRD
    /// version's).
    pub cel_schema: Option<Arc<plinth_schema::Schema>>,
    /// The `Warning` sent with every request to a deprecated version.
    pub deprecation: Option<String>,
    /// For a resource that is a question to the server (access reviews, "who am I"): the
    /// answer to a create, which is returned and never stored; no other verb is served.
    pub answer: Option<Answer>,
    /// Subresources that answer a create from their parent object, storing nothing
    /// (`serviceaccounts/<name>/token`).
    pub answered_subresources: Vec<(&'static str, SubAnswer)>,
    /// A custom resource whose CRD converts by webhook: objects are stored in its storage
    /// version and converted on the way in and out.
    pub conversion: Option<Arc<crate::conversion::ConversionWebhook>>,
    /// For a resource read from elsewhere than storage (metrics.k8s.io, from the node
    /// agents): what answers its gets and lists; nothing else is served.
    pub computed: Option<Computed>,
    /// What a new object is given (or refused) before it is stored from what other objects
    /// hold: a Service's ClusterIP and node ports, a claim's default StorageClass, a pod's
    /// LimitRange defaults.
    pub allocate: Option<Allocate>,
    /// Whether [`ResourceDef::allocate`] also runs on updates of the main resource (a
    /// Service changed to a type that needs an address).
    pub allocate_on_update: bool,
    /// Subresources served by something other than storage — a node agent
    /// (`pods/<name>/log`): the handler gets the parent object and the request.
    pub connect_subresources: Vec<(&'static str, Connect)>,
    /// How discovery shows the subresources other than `status` and `scale`.
    pub discovered_subresources: Vec<Subresource>,
}

/// A subresource as discovery shows it (`pods/log`, `serviceaccounts/token`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subresource {
    /// Its name (`log`).
    pub name: &'static str,
    /// The kind it answers with, when not the resource's own: group, version, kind.
    pub kind: Option<(&'static str, &'static str, &'static str)>,
    /// The verbs it allows.
    pub verbs: &'static [&'static str],
}

/// Answers a get (`name`) or list of a computed resource ([`ResourceDef::computed`]).
pub type Computed =
    for<'a> fn(Reading<'a>) -> futures::future::BoxFuture<'a, Result<Value, plinth_core::ApiError>>;

/// A read of a computed resource.
pub struct Reading<'a> {
    /// The objects.
    pub objects: &'a dyn Objects,
    /// The way to node agents.
    pub nodes: &'a dyn NodeDialer,
    /// The namespace in the path.
    pub namespace: Option<&'a str>,
    /// The name in the path (a get), or none (a list).
    pub name: Option<&'a str>,
    /// The list's label selector.
    pub labels: plinth_core::selector::LabelSelector,
}

/// Gives a new object what it must not share with others ([`ResourceDef::allocate`]).
pub type Allocate = for<'a> fn(
    &'a dyn Objects,
    &'a mut Value,
)
    -> futures::future::BoxFuture<'a, Result<(), plinth_core::ApiError>>;

/// Serves a connect subresource ([`ResourceDef::connect_subresources`]).
pub type Connect = for<'a> fn(
    ConnectRequest<'a>,
) -> futures::future::BoxFuture<
    'a,
    Result<axum::response::Response, plinth_core::ApiError>,
>;

/// A request to a connect subresource.
pub struct ConnectRequest<'a> {
    /// The parent object, as stored.
    pub object: Value,
    /// The HTTP method.
    pub method: axum::http::Method,
    /// The query parameters, decoded.
    pub query: Vec<(String, String)>,
    /// The request's headers.
    pub headers: axum::http::HeaderMap,
    /// The connection's upgrade, when the client asks for one (WebSocket).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// The objects.
    pub objects: &'a dyn Objects,
    /// The way to node agents.
    pub nodes: &'a dyn NodeDialer,
    /// The path after the subresource (`proxy/<path>`), without its leading `/`.
    pub tail: String,
    /// For a proxy, the port (and scheme) the request's name carried: kube's
    /// `[scheme:]name[:port]` (`web:8080`, `https:web:443`); empty when not given.
    pub port: String,
    /// The scheme part of that name (`http`, `https`), empty when not given.
    pub scheme: String,
    /// The request's body.
    pub body: bytes::Bytes,
}

impl ConnectRequest<'_> {
    /// Every value of the query parameter `key`.
    pub fn query_all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of the query parameter `key`.
    pub fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Answers a create on a subresource: from the asker, the parent object and the request
/// body, the object returned.
pub type SubAnswer =
    for<'a> fn(
        &'a Asker<'a>,
        serde_json::Value,
        serde_json::Value,
    )
        -> futures::future::BoxFuture<'a, Result<serde_json::Value, plinth_core::ApiError>>;

/// Who asks a question resource ([`ResourceDef::answer`]), and what answers it.
pub struct Asker<'a> {
    /// The requesting user.
    pub user: &'a crate::user::User,
    /// The authorizer.
    pub authorizer: &'a dyn crate::authz::Authorizer,
    /// The namespace in the path, for a namespaced question.
    pub namespace: Option<&'a str>,
    /// The objects the answer depends on.
    pub objects: &'a dyn Objects,
    /// The ServiceAccount token issuer.
    pub tokens: &'a dyn crate::authz::TokenIssuer,
    /// The server's token authenticators (TokenReview).
    pub reviewer: &'a dyn TokenReviewer,
}

/// Answers a question resource's create: the object as sent (defaults applied), with its
/// `status` filled in.
pub type Answer =
    for<'a> fn(
        &'a Asker<'a>,
        serde_json::Value,
    )
        -> futures::future::BoxFuture<'a, Result<serde_json::Value, plinth_core::ApiError>>;

impl ResourceDef {
    /// A namespaced resource with no behaviour of its own, to be refined with the methods
    /// below: `ResourceDef::new("", "v1", "ConfigMap", "configmaps").short_names(&["cm"])`.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        Self {
            group_version: GroupVersion::new(group, version),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced: true,
            short_names: Vec::new(),
            categories: Vec::new(),
            name_rule: NameRule::Subdomain,
            status_subresource: false,
            field_subresources: Vec::new(),
            generation: false,
            allow_create_on_update: false,
            selectable_fields: Vec::new(),
            absent_fields: Vec::new(),
            field_labels: None,
            unsupported_field: |label| format!("field label not supported: {label}"),
            columns: Vec::new(),
            age_column: true,
            schema: Arc::new(Schema::Any),
            strategy: Arc::new(Plain),
            delete_returns_object: false,
            scale: None,
            terminating: false,
            stored_as: None,
            watch_cached: true,
            openapi: None,
            deprecation: None,
            answer: None,
            answered_subresources: Vec::new(),
            conversion: None,
            connect_subresources: Vec::new(),
            discovered_subresources: Vec::new(),
            cel_schema: None,
            allocate: None,
            allocate_on_update: false,
            computed: None,
        }
    }

    /// With subresource `name` shown in discovery, answering with `kind` (group, version,
    /// kind; the resource's own when `None`) and allowing `verbs`.
    pub fn discovered(
        mut self,
        name: &'static str,
        kind: Option<(&'static str, &'static str, &'static str)>,
        verbs: &'static [&'static str],
    ) -> Self {
        self.discovered_subresources
            .push(Subresource { name, kind, verbs });
        self
    }

    /// With a subresource served by `handler` (see [`Connect`]).
    pub fn connect(mut self, name: &'static str, handler: Connect) -> Self {
        self.connect_subresources.push((name, handler));
        self
    }

    /// In these categories (`all`).
    pub fn categories(mut self, categories: &[&str]) -> Self {
        self.categories = categories.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Whether objects go out as they are stored (lists and watches then send the watch
    /// cache's encoded bytes): the strategy's view is the identity and no conversion webhook
    /// changes them.
    pub fn serves_stored_form(&self) -> bool {
        self.conversion.is_none() && self.strategy.serves_stored_form()
    }

    /// Whether lists and watches may be served from the resource's watch cache: it is cached
    /// ([`ResourceDef::watch_cached`]) and no conversion webhook converts its objects (those
    /// are read from storage and converted together).
    pub fn lists_from_cache(&self) -> bool {
        self.watch_cached && self.conversion.is_none()
    }

    /// With a subresource answered by `answer`.
    pub fn answered_subresource(mut self, name: &'static str, answer: SubAnswer) -> Self {
        self.answered_subresources.push((name, answer));
        self
    }

    /// No `Age` column after the others (a type that places its own, with [`age_cell`]).
    pub fn no_age_column(mut self) -> Self {
        self.age_column = false;
        self
    }

    /// A question: creates are answered by `answer`, nothing is stored.
    pub fn answered_by(mut self, answer: Answer) -> Self {
        self.answer = Some(answer);
        self.age_column = false;
        self
    }

    /// Cluster-scoped.
    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// With these short names.
    pub fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Names follow `rule`.
    pub fn name_rule(mut self, rule: NameRule) -> Self {
        self.name_rule = rule;
        self
    }

    /// With a `/status` subresource (the main resource then cannot change the status).
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// With a subresource `name` that changes only the field at JSON `pointer`
    /// (`/approval` and `/status/conditions`), allowing `verbs` (shown in discovery).
    pub fn field_subresource(
        mut self,
        name: &'static str,
        pointer: &'static str,
        verbs: &'static [&'static str],
    ) -> Self {
        self.field_subresources.push((name, pointer));
        self.discovered(name, None, verbs)
    }

    /// These fields (beyond `metadata.name`/`metadata.namespace`) work in field selectors.
    pub fn selectable(mut self, fields: &[&str]) -> Self {
        self.selectable_fields = fields.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The type's own field label conversion (see [`ResourceDef::field_labels`]): `labels`
    /// pairs a selector name with the stored field it reads.
    pub fn field_labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.field_labels = Some(
            labels
                .iter()
                .map(|(label, field)| ((*label).to_owned(), (*field).to_owned()))
                .collect(),
        );
        self
    }

    /// Selectable fields whose value, when an object lacks it, is not `""` but the given
    /// one (`("spec.unschedulable", "false")`: kube's field sets format Go's zero values).
    pub fn absent_as(mut self, fields: &[(&str, &str)]) -> Self {
        self.absent_fields = fields
            .iter()
            .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
            .collect();
        self
    }

    /// What a selectable field reads when an object lacks it.
    fn absent_value(&self, field: &str) -> &str {
        self.absent_fields
            .iter()
            .find(|(f, _)| f == field)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Table columns after `Name`.
    pub fn columns(mut self, columns: Vec<Column>) -> Self {
        self.columns = columns;
        self
    }

    /// The type's shape.
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = Arc::new(schema);
        self
    }

    /// The type's behaviour.
    pub fn strategy(mut self, strategy: impl Strategy + 'static) -> Self {
        self.strategy = Arc::new(strategy);
        self
    }

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
        if let Some(prefix) = &self.stored_as {
            return prefix.clone();
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
        if self.answer.is_some() {
            return vec!["create"];
        }
        if self.computed.is_some() {
            return vec!["get", "list"];
        }
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
        self.is_selectable(field).then(|| {
            let value = plinth_watchcache::selector_value(object, field);
            if value.is_empty() {
                self.absent_value(field).to_owned()
            } else {
                value
            }
        })
    }

    /// Every field a field selector may name — `metadata.name`, `metadata.namespace` and the
    /// type's selectable fields — each with its value when an object lacks it.
    pub fn selector_fields(&self) -> Vec<(String, String)> {
        ["metadata.name", "metadata.namespace"]
            .iter()
            .map(|f| (*f).to_owned())
            .chain(self.selectable_fields.iter().cloned())
            .map(|f| {
                let absent = self.absent_value(&f).to_owned();
                (f, absent)
            })
            .collect()
    }

    /// Whether `field` is selectable: a field the watch cache extracts or one a field label
    /// reads (in the form this resource serves).
    pub fn is_selectable(&self, field: &str) -> bool {
        field == "metadata.name"
            || field == "metadata.namespace"
            || self.selectable_fields.iter().any(|f| f == field)
            || self
                .field_labels
                .as_ref()
                .is_some_and(|labels| labels.iter().any(|(_, f)| f == field))
    }

    /// The stored field a field selector's `label` reads, as the type's field label
    /// conversion maps it; `None` if the type does not accept the label.
    pub fn field_label<'a>(&'a self, label: &'a str) -> Option<&'a str> {
        match &self.field_labels {
            Some(labels) => labels
                .iter()
                .find(|(l, _)| l == label)
                .map(|(_, field)| field.as_str()),
            None => self.is_selectable(label).then_some(label),
        }
    }
}

/// The set of served resources; CRDs add to it at run time.
#[derive(Debug, Default)]
pub struct Resources {
    by_gvr: RwLock<BTreeMap<(String, String, String), Arc<ResourceDef>>>,
    /// Bumped by every change, so that what is derived from the set (OpenAPI) can be cached.
    generation: std::sync::atomic::AtomicU64,
}

impl Resources {
    /// A set serving `defs`.
    pub fn with(defs: impl IntoIterator<Item = ResourceDef>) -> Self {
        let resources = Self::default();
        for def in defs {
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
        self.bump();
    }

    fn bump(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A number that changes whenever the set of served resources does.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops serving `plural` in `group`/`version`.
    pub fn remove(&self, group: &str, version: &str, plural: &str) {
        self.by_gvr
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(group.to_owned(), version.to_owned(), plural.to_owned()));
        self.bump();
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
                    && d.stored_as.is_none()
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

/// A column filled by `cell`.
pub fn column(
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

/// A cell showing the scalar at `path` (`<none>` when absent).
pub fn path_cell(path: &'static str) -> impl Fn(&Value, i64) -> Value + Send + Sync {
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

/// A cell counting the entries of the maps or lists at `fields`.
pub fn count(object: &Value, fields: &[&str]) -> Value {
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

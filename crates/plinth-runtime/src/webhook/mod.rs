//! Admission webhooks served over TLS, as controller-runtime's webhook server does: typed
//! handlers on paths — a [`Validator`] says allowed or denied (with warnings), a [`Defaulter`]
//! changes a typed object and the JSONPatch is computed for it — answering kube's
//! AdmissionReview (`admission.k8s.io/v1` and `v1beta1`).
//!
//! ```no_run
//! # use plinth_runtime::webhook::{AdmissionRequest, TlsSource, Validator, Verdict, WebhookServer};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! struct NoEmpty;
//! impl Validator<ConfigMap> for NoEmpty {
//!     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
//!         match object.and_then(|c| c.data.as_ref()) {
//!             Some(data) if !data.is_empty() => Verdict::allow(),
//!             _ => Verdict::deny("data must not be empty"),
//!         }
//!     }
//! }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let server = WebhookServer::new().validator("/validate-configmaps", NoEmpty);
//! let tls = TlsSource::files("tls.crt", "tls.key");
//! let running = server.bind("127.0.0.1:9443".parse()?, tls).await?;
//! running.wait().await;
//! # Ok(()) }
//! ```
//!
//! Rooms: this file (requests, verdicts, handlers, the server), `tls` (certificates from files
//! or a Secret, picked up when they change), `cabundle` (writing the CA into the webhook
//! configurations and CRDs that point here).

mod cabundle;
mod conversion;
mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use cabundle::{CaTarget, inject_ca_bundle};

/// The resource a pair of webhook configurations is for.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::{configurations, WebhookTarget};
/// let target = WebhookTarget { group: "example.com", version: "v1", resource: "widgets", scope: "Namespaced" };
/// let both = configurations("widgets", "https://127.0.0.1:9443", target, "/default", "/validate");
/// assert_eq!(both[1]["webhooks"][0]["name"], "validate.widgets.example.com");
/// assert_eq!(both[1]["webhooks"][0]["rules"][0]["apiGroups"][0], "example.com");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct WebhookTarget<'a> {
    /// Its API group.
    pub group: &'a str,
    /// Its version.
    pub version: &'a str,
    /// Its plural.
    pub resource: &'a str,
    /// `Namespaced` or `Cluster`.
    pub scope: &'a str,
}

/// Where a webhook server is, as its configurations name it (`clientConfig`).
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::WebhookEndpoint;
/// let outside = WebhookEndpoint::from("https://10.0.0.5:9443");
/// let inside = WebhookEndpoint::service("my-operator/webhook").unwrap();
/// assert_eq!(outside.client_config("/validate")["url"], "https://10.0.0.5:9443/validate");
/// assert_eq!(inside.client_config("/validate")["service"]["port"], 443);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookEndpoint<'a> {
    /// Outside the cluster: its base URL (`https://host:port`).
    Url(&'a str),
    /// Inside: a Service's port; the API server calls one of its endpoints with the TLS name
    /// `<name>.<namespace>.svc`.
    Service {
        /// The Service's namespace.
        namespace: &'a str,
        /// Its name.
        name: &'a str,
        /// Its port.
        port: u16,
    },
}

impl<'a> From<&'a str> for WebhookEndpoint<'a> {
    fn from(url: &'a str) -> Self {
        Self::Url(url)
    }
}

impl<'a> From<&'a String> for WebhookEndpoint<'a> {
    fn from(url: &'a String) -> Self {
        Self::Url(url)
    }
}

impl<'a> WebhookEndpoint<'a> {
    /// Parses a Service reference, `namespace/name` or `namespace/name:port` (443 by default).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::WebhookEndpoint;
    /// assert_eq!(
    ///     WebhookEndpoint::service("my-operator/webhook:8443"),
    ///     Some(WebhookEndpoint::Service { namespace: "my-operator", name: "webhook", port: 8443 })
    /// );
    /// assert_eq!(WebhookEndpoint::service("no-namespace"), None);
    /// ```
    pub fn service(text: &'a str) -> Option<Self> {
        let (namespace, rest) = text.split_once('/')?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (name, port.parse().ok()?),
            None => (rest, 443),
        };
        (!namespace.is_empty() && !name.is_empty()).then_some(Self::Service {
            namespace,
            name,
            port,
        })
    }

    /// The `clientConfig` (without `caBundle`) of `path` on this server.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::WebhookEndpoint;
    /// let service = WebhookEndpoint::service("my-operator/webhook").unwrap();
    /// assert_eq!(
    ///     service.client_config("/validate"),
    ///     serde_json::json!({"service": {"namespace": "my-operator", "name": "webhook",
    ///                                    "path": "/validate", "port": 443}})
    /// );
    /// ```
    pub fn client_config(&self, path: &str) -> Value {
        match self {
            Self::Url(base) => json!({"url": format!("{}{path}", base.trim_end_matches('/'))}),
            Self::Service {
                namespace,
                name,
                port,
            } => {
                json!({"service": {"namespace": namespace, "name": name, "path": path, "port": port}})
            }
        }
    }

    /// The names a Service's serving certificate must hold (`<svc>.<ns>.svc` is the one the
    /// API server checks); none for a URL.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::{self_signed, WebhookEndpoint};
    /// let service = WebhookEndpoint::service("my-operator/webhook").unwrap();
    /// let names = service.dns_names();
    /// assert_eq!(names[0], "webhook.my-operator.svc");
    /// // The serving certificate holds them.
    /// # let dir = std::env::temp_dir().join(format!("dns-names-{}", std::process::id()));
    /// let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
    /// let _certificate = self_signed(&dir, &hosts).unwrap();
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn dns_names(&self) -> Vec<String> {
        match self {
            Self::Url(_) => Vec::new(),
            Self::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
        }
    }
}

/// The MutatingWebhookConfiguration and ValidatingWebhookConfiguration named `name` that send
/// creates and updates of `target` to `server` (a URL such as `https://host:port`, or a
/// Service):
/// `default.<resource>.<group>` at `default_path`, `validate.<resource>.<group>` at
/// `validate_path` (failure policy `Fail`, no side effects, 5 s); `caBundle` left for the
/// server to fill in ([`inject_ca_bundle`]).
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
/// struct NoEmpty;
/// impl Validator<ConfigMap> for NoEmpty {
///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
///         match object.and_then(|c| c.data.as_ref()) {
///             Some(data) if !data.is_empty() => Verdict::allow(),
///             _ => Verdict::deny("data must not be empty"),
///         }
///     }
/// }
/// let env = plinth_testenv::TestEnv::start().await?;
/// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
/// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
/// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
/// let running = WebhookServer::new()
///     .validator("/validate", NoEmpty)
///     .bind("127.0.0.1:0".parse()?, certificate.source)
///     .await?;
/// let url = format!("https://{}", running.local_addr);
/// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
/// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
///     .remove(1); // the validating one (no defaulter is served here)
/// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
/// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
/// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
/// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
/// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// // The API server takes the new configuration up within moments (from its cache, as
/// // kube-apiserver does): wait until a dry run is refused.
/// plinth_testenv::eventually("the webhook is called", || async {
///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
///     probe.metadata.name = Some("probe".into());
///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
/// }).await;
/// let mut empty = ConfigMap::default();
/// empty.metadata.name = Some("empty".into());
/// match configmaps.create(&Default::default(), &empty).await {
///     Err(kube::Error::Api(status)) => {
///         assert_eq!(status.code, 403);
///         assert!(status.message.ends_with("denied the request: data must not be empty"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # running.shutdown().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub fn configurations<'a>(
    name: &str,
    server: impl Into<WebhookEndpoint<'a>>,
    target: WebhookTarget<'_>,
    default_path: &str,
    validate_path: &str,
) -> Vec<serde_json::Value> {
    let server = server.into();
    let hook = |kind: &str, path: &str| {
        serde_json::json!({
            "name": format!("{kind}.{}.{}", target.resource, target.group),
            "clientConfig": server.client_config(path),
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [target.group],
                "apiVersions": [target.version], "resources": [target.resource],
                "scope": target.scope}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        })
    };
    vec![
        serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [hook("default", default_path)]}),
        serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [hook("validate", validate_path)]}),
    ]
}
pub use conversion::Converter;
pub use tls::{Issued, SelfSigned, TlsSource, certificate_secret, issue, self_signed};

/// Largest review accepted (kube-apiserver sends at most its own request limit, 3 MiB, plus
/// the old object).
const MAX_REVIEW: usize = 8 * 1024 * 1024;

/// Who asked for the write (`request.userInfo`).
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::{AdmissionRequest, Validator, Verdict};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// // Only the operator itself may change what it manages.
/// struct OnlyOperator;
/// impl Validator<ConfigMap> for OnlyOperator {
///     async fn validate(&self, request: &AdmissionRequest, _: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
///         if request.user.username == "system:serviceaccount:my-operator:my-operator"
///             || request.user.groups.iter().any(|g| g == "system:masters")
///         {
///             Verdict::allow()
///         } else {
///             Verdict::deny("managed by my-operator")
///         }
///     }
/// }
/// ```
#[derive(Clone, Debug, Default)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The user's uid, if any.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
}

/// The write being admitted (`request` of the AdmissionReview), without its objects.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::{AdmissionRequest, Validator, Verdict};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// struct Immutable;
/// impl Validator<ConfigMap> for Immutable {
///     async fn validate(&self, request: &AdmissionRequest, new: Option<&ConfigMap>, old: Option<&ConfigMap>) -> Verdict {
///         match (request.operation.as_str(), new, old) {
///             ("UPDATE", Some(new), Some(old)) if new.data != old.data => {
///                 Verdict::deny(format!("{} is immutable", request.name))
///             }
///             _ => Verdict::allow(),
///         }
///     }
/// }
/// ```
#[derive(Clone, Debug)]
pub struct AdmissionRequest {
    /// The review's uid (the answer carries it back).
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: String,
    /// The object's name (empty for a create with `generateName`).
    pub name: String,
    /// The object's namespace, for namespaced objects.
    pub namespace: Option<String>,
    /// `status`, `scale`, … when a subresource is written.
    pub sub_resource: Option<String>,
    /// Who writes.
    pub user: UserInfo,
    /// A dry run: nothing will be stored.
    pub dry_run: bool,
    /// The whole `request`, for what the fields above leave out.
    pub raw: Value,
}

/// A validator's answer.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::Verdict;
/// let refused = Verdict::deny("spec.size: must be odd")
///     .with_code(422, "Invalid")
///     .with_audit_annotation("rule", "odd-size");
/// assert!(!refused.allowed());
/// assert!(Verdict::allow().with_warning("spec.legacy is deprecated").allowed());
/// ```
#[derive(Clone, Debug)]
pub struct Verdict {
    allowed: bool,
    message: String,
    code: u16,
    reason: String,
    warnings: Vec<String>,
    audit_annotations: std::collections::BTreeMap<String, String>,
}

impl Verdict {
    /// The write may go ahead.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(plinth_runtime::webhook::Verdict::allow().allowed());
    /// ```
    pub fn allow() -> Self {
        Self {
            allowed: true,
            message: String::new(),
            code: 200,
            reason: String::new(),
            warnings: Vec::new(),
            audit_annotations: std::collections::BTreeMap::new(),
        }
    }

    /// The write is refused with `message` (403 `Forbidden`, as controller-runtime's
    /// `Denied` answers).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
    /// struct NoEmpty;
    /// impl Validator<ConfigMap> for NoEmpty {
    ///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
    ///         match object.and_then(|c| c.data.as_ref()) {
    ///             Some(data) if !data.is_empty() => Verdict::allow(),
    ///             _ => Verdict::deny("data must not be empty"),
    ///         }
    ///     }
    /// }
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
    /// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
    /// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
    /// let running = WebhookServer::new()
    ///     .validator("/validate", NoEmpty)
    ///     .bind("127.0.0.1:0".parse()?, certificate.source)
    ///     .await?;
    /// let url = format!("https://{}", running.local_addr);
    /// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
    /// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
    ///     .remove(1); // the validating one (no defaulter is served here)
    /// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
    /// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
    /// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
    /// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
    /// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// // The API server takes the new configuration up within moments (from its cache, as
    /// // kube-apiserver does): wait until a dry run is refused.
    /// plinth_testenv::eventually("the webhook is called", || async {
    ///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
    ///     probe.metadata.name = Some("probe".into());
    ///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
    /// }).await;
    /// let mut empty = ConfigMap::default();
    /// empty.metadata.name = Some("empty".into());
    /// match configmaps.create(&Default::default(), &empty).await {
    ///     Err(kube::Error::Api(status)) => {
    ///         assert_eq!(status.code, 403);
    ///         assert!(status.message.ends_with("denied the request: data must not be empty"));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # running.shutdown().await;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: message.into(),
            code: 403,
            reason: "Forbidden".into(),
            warnings: Vec::new(),
            audit_annotations: std::collections::BTreeMap::new(),
        }
    }

    /// Another code and reason for a refusal (422 `Invalid`, say).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Verdict;
    /// // What the client gets: 422 Invalid instead of 403 Forbidden.
    /// let verdict = Verdict::deny("spec.size: must be odd").with_code(422, "Invalid");
    /// assert!(!verdict.allowed());
    /// ```
    #[must_use]
    pub fn with_code(mut self, code: u16, reason: &str) -> Self {
        self.code = code;
        self.reason = reason.to_owned();
        self
    }

    /// A warning the client shows (kubectl prints `Warning: …`).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Verdict;
    /// // Allowed, and kubectl prints `Warning: spec.legacy is deprecated`.
    /// let verdict = Verdict::allow().with_warning("spec.legacy is deprecated");
    /// assert!(verdict.allowed());
    /// ```
    #[must_use]
    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// An annotation for the request's audit event (the server files it under this
    /// webhook's name: `<webhook>/<key>`).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Verdict;
    /// // Filed in the request's audit event as `<webhook name>/policy: strict`.
    /// let verdict = Verdict::allow().with_audit_annotation("policy", "strict");
    /// assert!(verdict.allowed());
    /// ```
    #[must_use]
    pub fn with_audit_annotation(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.audit_annotations.insert(key.into(), value.into());
        self
    }

    /// Whether it allows the write.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::Verdict;
    /// assert!(Verdict::allow().allowed());
    /// assert!(!Verdict::deny("no").allowed());
    /// ```
    pub fn allowed(&self) -> bool {
        self.allowed
    }
}

/// Decides whether a write of a `K` may go ahead.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
/// struct NoEmpty;
/// impl Validator<ConfigMap> for NoEmpty {
///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
///         match object.and_then(|c| c.data.as_ref()) {
///             Some(data) if !data.is_empty() => Verdict::allow(),
///             _ => Verdict::deny("data must not be empty"),
///         }
///     }
/// }
/// let env = plinth_testenv::TestEnv::start().await?;
/// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
/// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
/// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
/// let running = WebhookServer::new()
///     .validator("/validate", NoEmpty)
///     .bind("127.0.0.1:0".parse()?, certificate.source)
///     .await?;
/// let url = format!("https://{}", running.local_addr);
/// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
/// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
///     .remove(1); // the validating one (no defaulter is served here)
/// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
/// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
/// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
/// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
/// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// // The API server takes the new configuration up within moments (from its cache, as
/// // kube-apiserver does): wait until a dry run is refused.
/// plinth_testenv::eventually("the webhook is called", || async {
///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
///     probe.metadata.name = Some("probe".into());
///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
/// }).await;
/// let mut empty = ConfigMap::default();
/// empty.metadata.name = Some("empty".into());
/// match configmaps.create(&Default::default(), &empty).await {
///     Err(kube::Error::Api(status)) => {
///         assert_eq!(status.code, 403);
///         assert!(status.message.ends_with("denied the request: data must not be empty"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # running.shutdown().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub trait Validator<K>: Send + Sync + 'static {
    /// `object` is the new object (none for a delete), `old` the stored one (updates and
    /// deletes).
    fn validate(
        &self,
        request: &AdmissionRequest,
        object: Option<&K>,
        old: Option<&K>,
    ) -> impl Future<Output = Verdict> + Send;
}

/// Fills in a `K` before it is validated and stored.
///
/// # Example
///
/// ```
/// use plinth_runtime::webhook::{AdmissionRequest, Defaulter, Verdict, WebhookServer};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// // Every ConfigMap gets `mode: standard` unless it says otherwise.
/// struct StandardMode;
/// impl Defaulter<ConfigMap> for StandardMode {
///     async fn default(&self, _: &AdmissionRequest, object: &mut ConfigMap) -> Result<(), Verdict> {
///         object.data.get_or_insert_with(Default::default)
///             .entry("mode".into())
///             .or_insert_with(|| "standard".into());
///         Ok(())
///     }
/// }
/// let server = WebhookServer::new().defaulter("/default", StandardMode);
/// # let _ = server;
/// ```
pub trait Defaulter<K>: Send + Sync + 'static {
    /// Changes `object` in place; the server receives the JSONPatch from the object as sent
    /// to what this leaves. A refusal stops the write.
    fn default(
        &self,
        request: &AdmissionRequest,
        object: &mut K,
    ) -> impl Future<Output = Result<(), Verdict>> + Send;
}

type Answer = Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;

/// A path's handler, typed away: the review's `request` in, its `response` out.
trait Handler: Send + Sync {
    fn handle(&self, request: AdmissionRequest, object: Value, old: Value) -> Answer;
}

/// A conversion path's handler: a ConversionReview's `request` in, its `response` out.
trait ConvertHandler: Send + Sync {
    fn review(&self, request: &Value) -> Value;
}

impl<H: Send + Sync + 'static> ConvertHandler for Converter<H> {
    fn review(&self, request: &Value) -> Value {
        Converter::review(self, request)
    }
}

/// What a path serves.
#[derive(Clone)]
enum Route {
    Admission(Arc<dyn Handler>),
    Conversion(Arc<dyn ConvertHandler>),
}

struct Validating<K, V> {
    inner: Arc<V>,
    kind: std::marker::PhantomData<fn() -> K>,
}

struct Defaulting<K, D> {
    inner: Arc<D>,
    kind: std::marker::PhantomData<fn() -> K>,
}

fn typed<K: DeserializeOwned>(value: Value) -> Result<Option<K>, String> {
    if value.is_null() {
        return Ok(None);
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| format!("the object does not decode: {e}"))
}

fn response(uid: &str, verdict: &Verdict) -> Value {
    let mut out = json!({"uid": uid, "allowed": verdict.allowed});
    if !verdict.allowed {
        out["status"] = json!({"code": verdict.code, "message": verdict.message,
            "reason": verdict.reason, "status": "Failure", "metadata": {}});
    }
    if !verdict.warnings.is_empty() {
        out["warnings"] = json!(verdict.warnings);
    }
    if !verdict.audit_annotations.is_empty() {
        out["auditAnnotations"] = json!(verdict.audit_annotations);
    }
    out
}

impl<K, V> Handler for Validating<K, V>
where
    K: DeserializeOwned + Send + Sync + 'static,
    V: Validator<K>,
{
    fn handle(&self, request: AdmissionRequest, object: Value, old: Value) -> Answer {
        let inner = self.inner.clone();
        Box::pin(async move {
            let object: Option<K> = typed(object)?;
            let old: Option<K> = typed(old)?;
            let verdict = inner
                .validate(&request, object.as_ref(), old.as_ref())
                .await;
            Ok(response(&request.uid, &verdict))
        })
    }
}

impl<K, D> Handler for Defaulting<K, D>
where
    K: DeserializeOwned + Serialize + Send + Sync + 'static,
    D: Defaulter<K>,
{
    fn handle(&self, request: AdmissionRequest, object: Value, _old: Value) -> Answer {
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(mut typed_object) = typed::<K>(object.clone())? else {
                // A delete: nothing to default.
                return Ok(response(&request.uid, &Verdict::allow()));
            };
            if let Err(verdict) = inner.default(&request, &mut typed_object).await {
                return Ok(response(&request.uid, &verdict));
            }
            let after = serde_json::to_value(&typed_object)
                .map_err(|e| format!("the defaulted object does not encode: {e}"))?;
            let mut out = response(&request.uid, &Verdict::allow());
            let patch = json_patch::diff(&object, &after);
            if !patch.0.is_empty() {
                let bytes = serde_json::to_vec(&patch).map_err(|e| e.to_string())?;
                out["patch"] = json!(base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    bytes
                ));
                out["patchType"] = json!("JSONPatch");
            }
            Ok(out)
        })
    }
}

/// Why the server could not start.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// use plinth_runtime::webhook::{TlsSource, WebhookError, WebhookServer};
/// let missing = TlsSource::files("/nonexistent/tls.crt", "/nonexistent/tls.key");
/// let refused = WebhookServer::new().bind("127.0.0.1:0".parse().unwrap(), missing).await;
/// assert!(matches!(refused, Err(WebhookError::Certificate(_))));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The certificate or key cannot be used.
    #[error("cannot use the serving certificate: {0}")]
    Certificate(String),
}

/// The webhook server: handlers by path.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
/// struct NoEmpty;
/// impl Validator<ConfigMap> for NoEmpty {
///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
///         match object.and_then(|c| c.data.as_ref()) {
///             Some(data) if !data.is_empty() => Verdict::allow(),
///             _ => Verdict::deny("data must not be empty"),
///         }
///     }
/// }
/// let env = plinth_testenv::TestEnv::start().await?;
/// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
/// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
/// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
/// let running = WebhookServer::new()
///     .validator("/validate", NoEmpty)
///     .bind("127.0.0.1:0".parse()?, certificate.source)
///     .await?;
/// let url = format!("https://{}", running.local_addr);
/// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
/// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
///     .remove(1); // the validating one (no defaulter is served here)
/// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
/// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
/// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
/// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
/// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// // The API server takes the new configuration up within moments (from its cache, as
/// // kube-apiserver does): wait until a dry run is refused.
/// plinth_testenv::eventually("the webhook is called", || async {
///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
///     probe.metadata.name = Some("probe".into());
///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
/// }).await;
/// let mut empty = ConfigMap::default();
/// empty.metadata.name = Some("empty".into());
/// match configmaps.create(&Default::default(), &empty).await {
///     Err(kube::Error::Api(status)) => {
///         assert_eq!(status.code, 403);
///         assert!(status.message.ends_with("denied the request: data must not be empty"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # running.shutdown().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct WebhookServer {
    routes: HashMap<String, Route>,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut paths: Vec<&String> = self.routes.keys().collect();
        paths.sort();
        f.debug_struct("WebhookServer")
            .field("paths", &paths)
            .finish()
    }
}

impl WebhookServer {
    /// A server with no handlers.
    ///
    /// # Example
    ///
    /// ```
    /// let server = plinth_runtime::webhook::WebhookServer::new();
    /// assert_eq!(format!("{server:?}"), "WebhookServer { paths: [] }");
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `validator` for `K` at `path`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
    /// struct NoEmpty;
    /// impl Validator<ConfigMap> for NoEmpty {
    ///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
    ///         match object.and_then(|c| c.data.as_ref()) {
    ///             Some(data) if !data.is_empty() => Verdict::allow(),
    ///             _ => Verdict::deny("data must not be empty"),
    ///         }
    ///     }
    /// }
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
    /// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
    /// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
    /// let running = WebhookServer::new()
    ///     .validator("/validate", NoEmpty)
    ///     .bind("127.0.0.1:0".parse()?, certificate.source)
    ///     .await?;
    /// let url = format!("https://{}", running.local_addr);
    /// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
    /// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
    ///     .remove(1); // the validating one (no defaulter is served here)
    /// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
    /// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
    /// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
    /// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
    /// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// // The API server takes the new configuration up within moments (from its cache, as
    /// // kube-apiserver does): wait until a dry run is refused.
    /// plinth_testenv::eventually("the webhook is called", || async {
    ///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
    ///     probe.metadata.name = Some("probe".into());
    ///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
    /// }).await;
    /// let mut empty = ConfigMap::default();
    /// empty.metadata.name = Some("empty".into());
    /// match configmaps.create(&Default::default(), &empty).await {
    ///     Err(kube::Error::Api(status)) => {
    ///         assert_eq!(status.code, 403);
    ///         assert!(status.message.ends_with("denied the request: data must not be empty"));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// // A ConfigMap with data passes.
    /// let mut full = ConfigMap::default();
    /// full.metadata.name = Some("full".into());
    /// full.data = Some([("k".to_owned(), "v".to_owned())].into());
    /// configmaps.create(&Default::default(), &full).await?;
    /// # running.shutdown().await;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn validator<K, V>(mut self, path: &str, validator: V) -> Self
    where
        K: DeserializeOwned + Send + Sync + 'static,
        V: Validator<K>,
    {
        self.routes.insert(
            path.to_owned(),
            Route::Admission(Arc::new(Validating {
                inner: Arc::new(validator),
                kind: std::marker::PhantomData,
            })),
        );
        self
    }

    /// Serves `defaulter` for `K` at `path`.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::{AdmissionRequest, Defaulter, Verdict, WebhookServer};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// struct Labelled;
    /// impl Defaulter<ConfigMap> for Labelled {
    ///     async fn default(&self, _: &AdmissionRequest, object: &mut ConfigMap) -> Result<(), Verdict> {
    ///         object.metadata.labels.get_or_insert_with(Default::default)
    ///             .insert("managed-by".into(), "my-operator".into());
    ///         Ok(())
    ///     }
    /// }
    /// let server = WebhookServer::new().defaulter("/default", Labelled);
    /// assert_eq!(format!("{server:?}"), r#"WebhookServer { paths: ["/default"] }"#);
    /// ```
    #[must_use]
    pub fn defaulter<K, D>(mut self, path: &str, defaulter: D) -> Self
    where
        K: DeserializeOwned + Serialize + Send + Sync + 'static,
        D: Defaulter<K>,
    {
        self.routes.insert(
            path.to_owned(),
            Route::Admission(Arc::new(Defaulting {
                inner: Arc::new(defaulter),
                kind: std::marker::PhantomData,
            })),
        );
        self
    }

    /// Serves CRD conversion by `converter` at `path` (the CRD's
    /// `spec.conversion.webhook.clientConfig`).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::webhook::{Converter, WebhookServer};
    /// // (see `Converter` for one that knows versions)
    /// let server = WebhookServer::new().converter("/convert", Converter::<serde_json::Value>::new());
    /// assert_eq!(format!("{server:?}"), r#"WebhookServer { paths: ["/convert"] }"#);
    /// ```
    #[must_use]
    pub fn converter<H: Send + Sync + 'static>(
        mut self,
        path: &str,
        converter: Converter<H>,
    ) -> Self {
        self.routes
            .insert(path.to_owned(), Route::Conversion(Arc::new(converter)));
        self
    }

    /// Listens on `addr` with the certificate of `tls`; returns once it accepts connections.
    ///
    /// # Errors
    /// The address cannot be bound, or the certificate cannot be loaded.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
    /// struct NoEmpty;
    /// impl Validator<ConfigMap> for NoEmpty {
    ///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
    ///         match object.and_then(|c| c.data.as_ref()) {
    ///             Some(data) if !data.is_empty() => Verdict::allow(),
    ///             _ => Verdict::deny("data must not be empty"),
    ///         }
    ///     }
    /// }
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
    /// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
    /// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
    /// let running = WebhookServer::new()
    ///     .validator("/validate", NoEmpty)
    ///     .bind("127.0.0.1:0".parse()?, certificate.source)
    ///     .await?;
    /// let url = format!("https://{}", running.local_addr);
    /// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
    /// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
    ///     .remove(1); // the validating one (no defaulter is served here)
    /// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
    /// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
    /// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
    /// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
    /// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
    /// // The API server takes the new configuration up within moments (from its cache, as
    /// // kube-apiserver does): wait until a dry run is refused.
    /// plinth_testenv::eventually("the webhook is called", || async {
    ///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
    ///     probe.metadata.name = Some("probe".into());
    ///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
    /// }).await;
    /// let mut empty = ConfigMap::default();
    /// empty.metadata.name = Some("empty".into());
    /// match configmaps.create(&Default::default(), &empty).await {
    ///     Err(kube::Error::Api(status)) => {
    ///         assert_eq!(status.code, 403);
    ///         assert!(status.message.ends_with("denied the request: data must not be empty"));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # running.shutdown().await;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub async fn bind(
        self,
        addr: SocketAddr,
        tls: TlsSource,
    ) -> Result<RunningWebhookServer, WebhookError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| WebhookError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| WebhookError::Bind { addr, source })?;
        let config = tls.server_config().await?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let routes = Arc::new(self.routes);
        let (stop, mut stopping) = watch::channel(false);
        let task = tokio::spawn(async move {
            // Dropped at shutdown: every open connection ends with it (clients keep theirs
            // alive between reviews).
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopping.wait_for(|s| *s) => return,
                };
                while connections.try_join_next().is_some() {}
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                // Small answers: without this, Nagle's algorithm and the peer's delayed ACK
                // hold each one ~40 ms.
                let _ = stream.set_nodelay(true);
                let (acceptor, routes) = (acceptor.clone(), routes.clone());
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let routes = routes.clone();
                        async move { Ok::<_, std::convert::Infallible>(route(&routes, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(RunningWebhookServer {
            local_addr,
            stop,
            task,
        })
    }
}

/// A running webhook server.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use plinth_runtime::webhook::{self, AdmissionRequest, CaTarget, Validator, Verdict, WebhookServer, WebhookTarget};
/// struct NoEmpty;
/// impl Validator<ConfigMap> for NoEmpty {
///     async fn validate(&self, _: &AdmissionRequest, object: Option<&ConfigMap>, _: Option<&ConfigMap>) -> Verdict {
///         match object.and_then(|c| c.data.as_ref()) {
///             Some(data) if !data.is_empty() => Verdict::allow(),
///             _ => Verdict::deny("data must not be empty"),
///         }
///     }
/// }
/// let env = plinth_testenv::TestEnv::start().await?;
/// # let dir = std::env::temp_dir().join(format!("webhook-example-{}", std::process::id()));
/// // A certificate of its own for 127.0.0.1, the server, and a configuration calling it.
/// let certificate = webhook::self_signed(&dir, &["127.0.0.1"])?;
/// let running = WebhookServer::new()
///     .validator("/validate", NoEmpty)
///     .bind("127.0.0.1:0".parse()?, certificate.source)
///     .await?;
/// let url = format!("https://{}", running.local_addr);
/// let target = WebhookTarget { group: "", version: "v1", resource: "configmaps", scope: "Namespaced" };
/// let mut validating = webhook::configurations("no-empty", url.as_str(), target, "/default", "/validate")
///     .remove(1); // the validating one (no defaulter is served here)
/// validating["webhooks"][0]["name"] = "no-empty.example.com".into();
/// let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating)?;
/// kube::Api::all(env.client()).create(&Default::default(), &validating).await?;
/// webhook::inject_ca_bundle(&env.client(), &certificate.ca_pem, &[CaTarget::Validating("no-empty".into())]).await?;
/// let configmaps = kube::Api::<ConfigMap>::namespaced(env.client(), "default");
/// // The API server takes the new configuration up within moments (from its cache, as
/// // kube-apiserver does): wait until a dry run is refused.
/// plinth_testenv::eventually("the webhook is called", || async {
///     let (dry, mut probe) = (kube::api::PostParams { dry_run: true, ..Default::default() }, ConfigMap::default());
///     probe.metadata.name = Some("probe".into());
///     matches!(configmaps.create(&dry, &probe).await, Err(kube::Error::Api(s)) if s.code == 403)
/// }).await;
/// assert_eq!(running.local_addr.ip().to_string(), "127.0.0.1");
/// let mut empty = ConfigMap::default();
/// empty.metadata.name = Some("empty".into());
/// match configmaps.create(&Default::default(), &empty).await {
///     Err(kube::Error::Api(status)) => {
///         assert_eq!(status.code, 403);
///         assert!(status.message.ends_with("denied the request: data must not be empty"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # running.shutdown().await;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RunningWebhookServer {
    /// Where it listens.
    pub local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningWebhookServer {
    /// Stops accepting connections and closes the open ones.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::webhook::{self_signed, WebhookServer};
    /// # let dir = std::env::temp_dir().join(format!("shutdown-{}", std::process::id()));
    /// let certificate = self_signed(&dir, &["127.0.0.1"])?;
    /// let running = WebhookServer::new().bind("127.0.0.1:0".parse()?, certificate.source).await?;
    /// let addr = running.local_addr;
    /// running.shutdown().await;
    /// // Nothing listens there any more.
    /// assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Runs until the task ends (it does not, unless shut down elsewhere).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(running: plinth_runtime::webhook::RunningWebhookServer) {
    /// // A webhook-only process: serve until killed.
    /// running.wait().await;
    /// # }
    /// ```
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

fn plain(code: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = code;
    response
}

async fn route(
    routes: &HashMap<String, Route>,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    if request.uri().path() == "/healthz" {
        return plain(StatusCode::OK, "ok".into());
    }
    let Some(handler) = routes.get(request.uri().path()).cloned() else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("no webhook at {}", request.uri().path()),
        );
    };
    if request.method() != hyper::Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "reviews are POSTed".into());
    }
    let body = match Limited::new(request.into_body(), MAX_REVIEW)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("cannot read the review: {e}"),
            );
        }
    };
    let answered = match handler {
        Route::Admission(handler) => review(handler.as_ref(), &body).await,
        Route::Conversion(handler) => convert_review(handler.as_ref(), &body),
    };
    match answered {
        Ok(answer) => {
            let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(why) => plain(StatusCode::BAD_REQUEST, why),
    }
}

/// Decodes a ConversionReview and answers it in the same version.
fn convert_review(handler: &dyn ConvertHandler, body: &[u8]) -> Result<Value, String> {
    let review: Value =
        serde_json::from_slice(body).map_err(|e| format!("the review is not JSON: {e}"))?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| *v == "apiextensions.k8s.io/v1" || *v == "apiextensions.k8s.io/v1beta1")
        .ok_or("expected a ConversionReview of apiextensions.k8s.io/v1 or v1beta1")?
        .to_owned();
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("the review has no request")?;
    Ok(
        json!({"apiVersion": api_version, "kind": "ConversionReview",
        "response": handler.review(request)}),
    )
}

/// Decodes an AdmissionReview, runs the handler, and wraps its response in a review of the
/// same version.
async fn review(handler: &dyn Handler, body: &[u8]) -> Result<Value, String> {
    let mut review: Value =
        serde_json::from_slice(body).map_err(|e| format!("the review is not JSON: {e}"))?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| *v == "admission.k8s.io/v1" || *v == "admission.k8s.io/v1beta1")
        .ok_or("expected an AdmissionReview of admission.k8s.io/v1 or v1beta1")?
        .to_owned();
    let mut request = review
        .get_mut("request")
        .map(Value::take)
        .filter(Value::is_object)
        .ok_or("the review has no request")?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let user = request.get("userInfo").cloned().unwrap_or(Value::Null);
    let object = request
        .get_mut("object")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let old = request
        .get_mut("oldObject")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let admission = AdmissionRequest {
        uid: text(&request, "uid"),
        operation: text(&request, "operation"),
        name: text(&request, "name"),
        namespace: Some(text(&request, "namespace")).filter(|n| !n.is_empty()),
        sub_resource: Some(text(&request, "subResource")).filter(|s| !s.is_empty()),
        user: UserInfo {
            username: text(&user, "username"),
            uid: text(&user, "uid"),
            groups: user
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        },
        dry_run: request
            .get("dryRun")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        raw: request,
    };
    let response = handler.handle(admission, object, old).await?;
    Ok(json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, serde::Serialize)]
    struct Thing {
        metadata: Value,
        #[serde(default)]
        spec: Value,
    }

    struct NeedsSize;
    impl Validator<Thing> for NeedsSize {
        async fn validate(
            &self,
            _: &AdmissionRequest,
            object: Option<&Thing>,
            _: Option<&Thing>,
        ) -> Verdict {
            match object {
                Some(t) if t.spec.get("size").is_some() => Verdict::allow().with_warning("sized"),
                _ => Verdict::deny("spec.size is required"),
            }
        }
    }

    struct SizeOne;
    impl Defaulter<Thing> for SizeOne {
        async fn default(&self, _: &AdmissionRequest, object: &mut Thing) -> Result<(), Verdict> {
            if object.spec.get("size").is_none() {
                object.spec = json!({"size": 1});
            }
            Ok(())
        }
    }

    fn review_of(object: Value) -> Vec<u8> {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": "CREATE", "name": "t", "userInfo": {"username": "alice"},
            "object": object}})
        .to_string()
        .into_bytes()
    }

    #[tokio::test]
    async fn validators_answer_with_the_review_uid_and_their_verdict() {
        let handler = Validating {
            inner: Arc::new(NeedsSize),
            kind: std::marker::PhantomData::<fn() -> Thing>,
        };
        let denied = review(&handler, &review_of(json!({"metadata": {}})))
            .await
            .unwrap();
        assert_eq!(denied["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(denied["response"]["uid"], "u-1");
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(
            denied["response"]["status"]["message"],
            "spec.size is required"
        );
        assert_eq!(denied["response"]["status"]["code"], 403);
        let allowed = review(
            &handler,
            &review_of(json!({"metadata": {}, "spec": {"size": 2}})),
        )
        .await
        .unwrap();
        assert_eq!(allowed["response"]["allowed"], true);
        assert_eq!(allowed["response"]["warnings"], json!(["sized"]));
        assert!(review(&handler, b"{").await.is_err());
        assert!(
            review(&handler, br#"{"apiVersion":"v1","kind":"AdmissionReview"}"#)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn defaulters_answer_with_the_patch_of_their_change() {
        let handler = Defaulting {
            inner: Arc::new(SizeOne),
            kind: std::marker::PhantomData::<fn() -> Thing>,
        };
        let answer = review(
            &handler,
            &review_of(json!({"metadata": {"name": "t"}, "spec": {}})),
        )
        .await
        .unwrap();
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
        let patch = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            answer["response"]["patch"].as_str().unwrap(),
        )
        .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut object = json!({"metadata": {"name": "t"}, "spec": {}});
        json_patch::patch(&mut object, &patch).unwrap();
        assert_eq!(object["spec"], json!({"size": 1}));
        // Nothing to change: no patch.
        let answer = review(
            &handler,
            &review_of(json!({"metadata": {}, "spec": {"size": 3}})),
        )
        .await
        .unwrap();
        assert!(answer["response"].get("patch").is_none());
    }
}

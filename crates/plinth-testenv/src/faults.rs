//! Fault injection: a [`kube::Client`] whose requests a test can delay, hold back or fail by
//! verb and resource, and whose watches it can drop — so an operator's suite can test what
//! happens when the API server is slow, stops answering or refuses, and when a watch ends.
//!
//! ```no_run
//! # async fn demo() -> Result<(), plinth_testenv::Error> {
//! use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
//! let env = plinth_testenv::TestEnv::start().await?;
//! let faults = Faults::new();
//! let client = faults.client(env.client());
//! // Every write to a Lease waits until the rule is removed.
//! let held = faults.inject(Rule::new(Fault::Hang).writes().resource("leases"));
//! // ... the code under test runs with `client` ...
//! faults.remove(held);
//! // The next two lists of ConfigMaps are refused as an overloaded server refuses them.
//! faults.inject(Rule::new(Fault::status(429, "TooManyRequests", "slow down"))
//!     .verbs(&[Verb::List]).resource("configmaps").times(2));
//! faults.drop_watches(Some("configmaps"));
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use tokio::sync::watch;

/// What a request does, as kube's authorizer names it.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// faults.inject(Rule::new(Fault::Unreachable).verbs(&[Verb::List]));
/// let _ = configmaps.list(&Default::default()).await;
/// assert_eq!(faults.requests()[0].verb, Verb::List);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of one object.
    Get,
    /// `GET` of a collection.
    List,
    /// `GET ?watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
}

impl Verb {
    /// The verbs that change objects.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_testenv::faults::Verb;
    /// assert!(Verb::WRITES.contains(&Verb::Patch));
    /// assert!(!Verb::WRITES.contains(&Verb::Watch));
    /// ```
    pub const WRITES: [Self; 5] = [
        Self::Create,
        Self::Update,
        Self::Patch,
        Self::Delete,
        Self::DeleteCollection,
    ];
}

/// A request as the rules see it.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// faults.inject(Rule::new(Fault::Unreachable));
/// let _ = configmaps.replace_status("settings", &Default::default(), &ConfigMap::default()).await;
/// let seen = &faults.requests()[0];
/// assert_eq!((seen.verb, seen.resource.as_str()), (Verb::Update, "configmaps"));
/// assert_eq!(seen.subresource.as_deref(), Some("status"));
/// assert_eq!(seen.namespace.as_deref(), Some("default"));
/// assert_eq!(seen.name.as_deref(), Some("settings"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its verb.
    pub verb: Verb,
    /// The resource (plural), `""` for paths that name none (discovery, `/version`).
    pub resource: String,
    /// The subresource (`status`, `scale`, …), if any.
    pub subresource: Option<String>,
    /// The namespace, if any.
    pub namespace: Option<String>,
    /// The object's name, if one is named.
    pub name: Option<String>,
    /// When the client sent it.
    pub at: tokio::time::Instant,
}

impl Seen {
    /// Reads a request's method and URI as kube's request-info resolver does.
    fn of<B>(request: &Request<B>) -> Self {
        let path = request.uri().path();
        let query = request.uri().query().unwrap_or("");
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        // /api/v1/… or /apis/group/version/…
        let rest: &[&str] = match parts.as_slice() {
            ["api", _, rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => &[],
        };
        let (namespace, rest): (Option<String>, &[&str]) = match rest {
            ["namespaces", ns, more @ ..] if !more.is_empty() => (Some((*ns).to_owned()), more),
            other => (None, other),
        };
        let resource = rest.first().map_or("", |r| *r).to_owned();
        let name = rest.get(1).map(|n| (*n).to_owned());
        let subresource = rest.get(2).map(|s| (*s).to_owned());
        let watching = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let verb = match request.method().clone() {
            Method::POST => Verb::Create,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE if name.is_none() => Verb::DeleteCollection,
            Method::DELETE => Verb::Delete,
            _ if watching => Verb::Watch,
            _ if name.is_none() => Verb::List,
            _ => Verb::Get,
        };
        Self {
            verb,
            resource,
            subresource,
            namespace,
            name,
            at: tokio::time::Instant::now(),
        }
    }
}

/// What happens to a request a rule matches.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// // Refused once, then sent 10 ms late (to no server, here).
/// faults.inject(Rule::new(Fault::status(500, "InternalError", "boom")).times(1));
/// faults.inject(Rule::new(Fault::Delay(std::time::Duration::from_millis(10))));
/// match configmaps.get("settings").await {
///     Err(kube::Error::Api(status)) => assert_eq!(status.code, 500),
///     other => panic!("{other:?}"),
/// }
/// assert!(!matches!(configmaps.get("settings").await, Err(kube::Error::Api(_))));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub enum Fault {
    /// Sent after this delay.
    Delay(Duration),
    /// Held back until the rule is removed, then sent (a server that stopped answering, as
    /// the client sees it: its own timeouts apply).
    Hang,
    /// Answered by the client itself with this status, never sent.
    Status {
        /// The HTTP code.
        code: u16,
        /// The `Status` reason (`TooManyRequests`, `InternalError`, …).
        reason: String,
        /// The message.
        message: String,
    },
    /// Fails as a connection that could not be made (a transport error, no HTTP answer).
    Unreachable,
}

impl Fault {
    /// An answer with this code, reason and message.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(429, "TooManyRequests", "slow down")));
    /// match configmaps.list(&Default::default()).await {
    ///     Err(kube::Error::Api(status)) => {
    ///         assert_eq!((status.code, status.reason.as_str()), (429, "TooManyRequests"));
    ///         assert_eq!(status.message, "slow down");
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn status(code: u16, reason: &str, message: &str) -> Self {
        Self::Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// Which requests a fault applies to, and how many times.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// // Refuse the next two updates of one object, then let everything through.
/// faults.inject(
///     Rule::new(Fault::status(409, "Conflict", "the object has been modified"))
///         .verbs(&[Verb::Update])
///         .namespace("default")
///         .name("settings")
///         .times(2),
/// );
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Rule {
    fault: Fault,
    verbs: Vec<Verb>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    times: Option<usize>,
}

impl Rule {
    /// `fault` for every request (narrowed by the other methods).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// // Unnarrowed: every request.
    /// faults.inject(Rule::new(Fault::Unreachable));
    /// assert!(configmaps.list(&Default::default()).await.is_err());
    /// assert!(configmaps.get("anything").await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(fault: Fault) -> Self {
        Self {
            fault,
            verbs: Vec::new(),
            resource: None,
            namespace: None,
            name: None,
            times: None,
        }
    }

    /// Only requests with one of these verbs.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(403, "Forbidden", "no")).verbs(&[Verb::Delete]));
    /// faults.inject(Rule::new(Fault::Unreachable));
    /// match configmaps.delete("settings", &Default::default()).await {
    ///     Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
    ///     other => panic!("{other:?}"),
    /// }
    /// // A get is not a delete: the next rule answers it.
    /// assert!(!matches!(configmaps.get("settings").await, Err(kube::Error::Api(_))));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn verbs(mut self, verbs: &[Verb]) -> Self {
        self.verbs = verbs.to_vec();
        self
    }

    /// Only writes (create, update, patch, delete, deletecollection).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(503, "ServiceUnavailable", "read-only")).writes());
    /// match configmaps.create(&Default::default(), &ConfigMap::default()).await {
    ///     Err(kube::Error::Api(status)) => assert_eq!(status.code, 503),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn writes(self) -> Self {
        self.verbs(&Verb::WRITES)
    }

    /// Only this resource (plural; `leases/status` names a subresource).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// // Only the status subresource of ConfigMaps (say, of an operator's custom resource).
    /// faults.inject(Rule::new(Fault::status(500, "InternalError", "x")).resource("configmaps/status"));
    /// match configmaps.get_status("settings").await {
    ///     Err(kube::Error::Api(status)) => assert_eq!(status.code, 500),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_owned());
        self
    }

    /// Only in this namespace.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(500, "InternalError", "x")).namespace("default"));
    /// match configmaps.get("settings").await {
    ///     Err(kube::Error::Api(status)) => assert_eq!(status.code, 500),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Only the object of this name.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(404, "NotFound", "gone")).name("settings"));
    /// assert!(configmaps.get_opt("settings").await?.is_none());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Only the next `count` requests it matches; then the rule is spent.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(500, "InternalError", "once")).times(1));
    /// faults.inject(Rule::new(Fault::status(404, "NotFound", "then")));
    /// assert!(matches!(configmaps.get("a").await, Err(kube::Error::Api(s)) if s.code == 500));
    /// assert!(matches!(configmaps.get("a").await, Err(kube::Error::Api(s)) if s.code == 404));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn times(mut self, count: usize) -> Self {
        self.times = Some(count);
        self
    }

    fn matches(&self, seen: &Seen) -> bool {
        let resource = match &seen.subresource {
            Some(sub) => format!("{}/{sub}", seen.resource),
            None => seen.resource.clone(),
        };
        (self.verbs.is_empty() || self.verbs.contains(&seen.verb))
            && self.resource.as_ref().is_none_or(|r| *r == resource)
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| seen.namespace.as_ref() == Some(n))
            && self
                .name
                .as_ref()
                .is_none_or(|n| seen.name.as_ref() == Some(n))
            && self.times != Some(0)
    }
}

/// A rule's handle, to remove it.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// let id = faults.inject(Rule::new(Fault::status(500, "InternalError", "x")));
/// faults.remove(id);
/// faults.inject(Rule::new(Fault::status(404, "NotFound", "after")));
/// assert!(matches!(configmaps.get("a").await, Err(kube::Error::Api(s)) if s.code == 404));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleId(u64);

#[derive(Default)]
struct State {
    rules: Vec<(RuleId, Rule)>,
    next: u64,
    seen: Vec<Seen>,
}

/// The faults a test injects into the clients it made with [`Faults::client`]; clones share
/// them.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// // A client for an address nothing listens on: the faults answer before anything is sent.
/// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
/// let faults = Faults::new();
/// let client = faults.client(offline);
/// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
/// // Clones share the rules: a test keeps one, the code under test gets the client.
/// let shared = faults.clone();
/// shared.inject(Rule::new(Fault::Unreachable));
/// assert!(configmaps.list(&Default::default()).await.is_err());
/// assert_eq!(faults.requests().len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
    /// Bumped when the rules change (held requests look again).
    changed: watch::Sender<u64>,
    /// Bumped, with the resource named (or none: all), to end open watches.
    drops: watch::Sender<(u64, Option<String>)>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

impl Faults {
    /// No faults yet.
    ///
    /// # Example
    ///
    /// ```
    /// let faults = plinth_testenv::faults::Faults::new();
    /// assert!(faults.requests().is_empty());
    /// ```
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            changed: watch::Sender::new(0),
            drops: watch::Sender::new((0, None)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `client` with these faults between it and its server.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// // Without rules, requests go to the server (here: none answers).
    /// assert!(configmaps.list(&Default::default()).await.is_err());
    /// assert_eq!(faults.requests()[0].resource, "configmaps");
    /// # Ok(()) }
    /// ```
    pub fn client(&self, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_owned();
        let faults = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            faults.clone().send(client.clone(), request)
        });
        kube::Client::new(service, namespace)
    }

    /// Adds a rule (the first rule that matches a request decides).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// // The first matching rule decides.
    /// faults.inject(Rule::new(Fault::status(409, "Conflict", "first")).resource("configmaps"));
    /// faults.inject(Rule::new(Fault::status(500, "InternalError", "second")));
    /// assert!(matches!(configmaps.get("a").await, Err(kube::Error::Api(s)) if s.code == 409));
    /// # Ok(()) }
    /// ```
    pub fn inject(&self, rule: Rule) -> RuleId {
        let id = {
            let mut state = self.lock();
            state.next += 1;
            let id = RuleId(state.next);
            state.rules.push((id, rule));
            id
        };
        self.changed.send_modify(|n| *n += 1);
        id
    }

    /// Removes a rule; requests it holds back are sent.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// let hang = faults.inject(Rule::new(Fault::Hang).verbs(&[Verb::Get]));
    /// let held = tokio::spawn({
    ///     let configmaps = configmaps.clone();
    ///     async move { configmaps.get("a").await }
    /// });
    /// tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// assert!(!held.is_finished());
    /// // Removing the rule sends what it held (here, to no server: a connection error).
    /// faults.remove(hang);
    /// assert!(held.await?.is_err());
    /// # Ok(()) }
    /// ```
    pub fn remove(&self, id: RuleId) {
        self.lock().rules.retain(|(r, _)| *r != id);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Removes every rule.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::status(500, "InternalError", "x")));
    /// faults.clear();
    /// // Sent again (and, here, not answered).
    /// assert!(!matches!(configmaps.get("a").await, Err(kube::Error::Api(_))));
    /// # Ok(()) }
    /// ```
    pub fn clear(&self) {
        self.lock().rules.clear();
        self.changed.send_modify(|n| *n += 1);
    }

    /// Ends the open watches of `resource` (all, with `None`) as a server closing them does:
    /// the watcher sees its stream end and watches again.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use futures::TryStreamExt;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use plinth_testenv::faults::Faults;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let faults = Faults::new();
    /// let configmaps: kube::Api<ConfigMap> =
    ///     kube::Api::namespaced(faults.client(env.client()), "default");
    /// let mut events = Box::pin(configmaps.watch(&Default::default(), "0").await?);
    /// faults.drop_watches(Some("configmaps"));
    /// // The stream ends, as when the server closes a watch: the watcher must watch again.
    /// while events.try_next().await?.is_some() {}
    /// # Ok(()) }
    /// ```
    pub fn drop_watches(&self, resource: Option<&str>) {
        self.drops
            .send_modify(|(n, r)| (*n, *r) = (*n + 1, resource.map(str::to_owned)));
    }

    /// Every request the faulty clients were asked to send, in order.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use plinth_testenv::faults::{Fault, Faults, Rule, Verb};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// // A client for an address nothing listens on: the faults answer before anything is sent.
    /// let offline = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    /// let faults = Faults::new();
    /// let client = faults.client(offline);
    /// let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
    /// faults.inject(Rule::new(Fault::Unreachable));
    /// let _ = configmaps.list(&Default::default()).await;
    /// let _ = configmaps.get("settings").await;
    /// let verbs: Vec<Verb> = faults.requests().iter().map(|s| s.verb).collect();
    /// assert_eq!(verbs, [Verb::List, Verb::Get]);
    /// # Ok(()) }
    /// ```
    pub fn requests(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// The fault for `seen` (spending one of its rule's times), and the rule's id.
    fn decide(&self, seen: &Seen) -> Option<(RuleId, Fault)> {
        let mut state = self.lock();
        state.seen.push(seen.clone());
        let (id, rule) = state.rules.iter_mut().find(|(_, r)| r.matches(seen))?;
        if let Some(times) = &mut rule.times {
            *times -= 1;
        }
        Some((*id, rule.fault.clone()))
    }

    fn has(&self, id: RuleId) -> bool {
        self.lock().rules.iter().any(|(r, _)| *r == id)
    }
}

type Boxed = http_body_util::combinators::UnsyncBoxBody<Bytes, kube::Error>;

impl Faults {
    /// Sends `request` through `client` as the rules decide.
    async fn send(
        self,
        client: kube::Client,
        request: Request<Body>,
    ) -> Result<Response<Boxed>, kube::Error> {
        let seen = Seen::of(&request);
        match self.decide(&seen) {
            None => {}
            Some((_, Fault::Delay(delay))) => tokio::time::sleep(delay).await,
            Some((id, Fault::Hang)) => {
                let mut changed = self.changed.subscribe();
                while self.has(id) {
                    if changed.changed().await.is_err() {
                        break;
                    }
                }
            }
            Some((
                _,
                Fault::Status {
                    code,
                    reason,
                    message,
                },
            )) => {
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": message, "reason": reason, "code": code,
                });
                let body = Body::from(status.to_string().into_bytes());
                return Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(body.boxed_unsync())
                    .map_err(kube::Error::HttpError);
            }
            Some((_, Fault::Unreachable)) => {
                return Err(kube::Error::Service(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused (injected)",
                ))));
            }
        }
        let response = client.send(request).await?;
        if seen.verb != Verb::Watch {
            return Ok(response.map(BodyExt::boxed_unsync));
        }
        let resource = seen.resource.clone();
        let mut drops = self.drops.subscribe();
        drops.mark_unchanged();
        let dropped = Box::pin(async move {
            while drops.changed().await.is_ok() {
                let named = drops.borrow().1.clone();
                if named.is_none_or(|r| r == resource) {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        Ok(response.map(|body| cut_when(body, dropped)))
    }
}

/// `body` until `cut` completes: then it ends as if the server had closed it.
fn cut_when(body: Body, cut: BoxFuture<'static, ()>) -> Boxed {
    let frames = futures::stream::unfold(Some((body, cut)), |state| async move {
        let (mut body, mut cut) = state?;
        tokio::select! {
            () = &mut cut => None,
            frame = body.frame() => match frame {
                Some(Ok(frame)) => Some((Ok(frame), Some((body, cut)))),
                Some(Err(e)) => Some((Err(e), None)),
                None => None,
            },
        }
    });
    http_body_util::StreamBody::new(frames).boxed_unsync()
}

//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules and timings
//! (lease 15 s, renew deadline 10 s, retry 2 s): a candidate takes the lease when it is free or
//! expired — judged, as client-go judges it, by how long this process has seen the record
//! unchanged on its own clock, never by the holder's timestamps — the leader renews it, loses leadership when it cannot renew within the deadline,
//! and releases it on a clean stop so that a standby takes over at once.
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use plinth_runtime::{LeaderElector, Leadership};
//! let elector = LeaderElector::new(client, "default", "my-operator", "pod-a");
//! let outcome = elector
//!     .run(
//!         async { /* the work only a leader does */ },
//!         async { let _ = tokio::signal::ctrl_c().await; },
//!     )
//!     .await;
//! assert!(matches!(outcome, Leadership::Released | Leadership::NeverLed | Leadership::Lost));
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// Lease timings.
///
/// # Example
///
/// ```
/// let timings = plinth_runtime::Timings::default();
/// // client-go's: the renew deadline is shorter than the lease, the retry shorter than both.
/// assert!(timings.retry_period < timings.renew_deadline);
/// assert!(timings.renew_deadline < timings.lease_duration);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader renews.
    pub retry_period: Duration,
}

impl Default for Timings {
    /// client-go's: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A candidate for the lease `namespace/name`.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::{LeaderElector, Leadership, Timings};
/// use std::time::Duration;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let fast = Timings {
///     lease_duration: Duration::from_secs(3),
///     renew_deadline: Duration::from_secs(2),
///     retry_period: Duration::from_millis(200),
/// };
/// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
///     .with_timings(fast);
/// // Leads, runs the work, releases the lease when the work is done.
/// let ran = elector.run(async { /* the leader's work */ }, std::future::pending()).await;
/// assert_eq!(ran, Leadership::Released);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderElector {
    leases: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    leading: watch::Sender<bool>,
    /// When the last acquisition or renewal that succeeded was sent (this process's clock).
    renewed: std::sync::Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    /// The lease record last seen, and when (on this process's clock): another holder's lease
    /// has expired when that record has not changed for a lease duration — client-go's rule,
    /// which never compares the holder's clock with ours.
    observed: std::sync::Arc<std::sync::Mutex<Option<(Observed, tokio::time::Instant)>>>,
}

/// What of a lease record tells that its holder is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    holder: String,
    renew_time: Option<String>,
    transitions: i32,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

enum Attempt {
    Acquired,
    HeldByOther,
    Failed,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    /// A candidate named `identity` for the Lease `namespace/name`.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// assert_eq!(elector.lease_name(), "my-operator");
    /// assert!(!elector.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            leases: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings: Timings::default(),
            leading: watch::Sender::new(false),
            renewed: std::sync::Arc::default(),
            observed: std::sync::Arc::default(),
        }
    }

    /// Other timings (tests use short ones).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// // Leads at its first try (the Lease is free), then the work ends: released.
    /// let outcome = elector.run(async {}, std::future::pending()).await;
    /// assert_eq!(outcome, Leadership::Released);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// The Lease's name.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// assert_eq!(elector.lease_name(), "my-operator");
    /// # Ok(()) }
    /// ```
    pub fn lease_name(&self) -> &str {
        &self.name
    }

    /// `client` with its writes fenced by this candidate's leadership: unless it holds the
    /// lease ([`LeaderElector::holds_lease`]), every write fails at once, unsent (see
    /// [`crate::fence`]). Reconcilers of leader-only
    /// controllers write through it, so that none begins a write after leadership is lost.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let fenced: kube::Api<ConfigMap> = kube::Api::default_namespaced(elector.fence(env.client()));
    /// // Not leading: writes fail unsent; reads go through.
    /// assert!(fenced.create(&Default::default(), &ConfigMap::default()).await.is_err());
    /// assert!(fenced.list(&Default::default()).await.is_ok());
    /// # Ok(()) }
    /// ```
    pub fn fence(&self, client: kube::Client) -> kube::Client {
        crate::fence::fenced(client, self.gate(), &self.name)
    }

    /// Whether this candidate leads and its lease is surely still its own: its last renewal
    /// was sent less than the renew deadline ago. Unlike [`LeaderElector::is_leader`] this
    /// turns false by itself when the process could not renew — paused (SIGSTOP, a stalled
    /// machine) or cut off — before the campaign loop runs again to notice.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// assert!(!elector.holds_lease());
    /// elector
    ///     .run(async { assert!(elector.holds_lease()) }, std::future::pending())
    ///     .await;
    /// assert!(!elector.holds_lease());
    /// # Ok(()) }
    /// ```
    pub fn holds_lease(&self) -> bool {
        self.is_leader()
            && self
                .renewed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|at| at.elapsed() < self.timings.renew_deadline)
    }

    /// [`LeaderElector::holds_lease`] as a shareable check (for fences and gates).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// let gate = elector.gate();
    /// assert!(!gate());
    /// elector.run(async { assert!(gate()) }, std::future::pending()).await;
    /// # Ok(()) }
    /// ```
    pub fn gate(&self) -> LeaseGate {
        let elector = self.clone();
        std::sync::Arc::new(move || elector.holds_lease())
    }

    fn renewed_at(&self, at: tokio::time::Instant) {
        *self
            .renewed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
    }

    /// Whether this candidate leads now.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// elector.run(async { assert!(elector.is_leader()) }, std::future::pending()).await;
    /// assert!(!elector.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Follows leadership changes.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// let mut leading = elector.watch_leadership();
    /// let (saw, seen) = tokio::sync::oneshot::channel();
    /// tokio::spawn(async move {
    ///     if leading.wait_for(|now| *now).await.is_ok() {
    ///         let _ = saw.send(());
    ///     }
    /// });
    /// // The work ends once the watcher has seen this replica lead.
    /// let outcome = elector.run(async { let _ = seen.await; }, std::future::pending()).await;
    /// assert_eq!(outcome, Leadership::Released);
    /// # Ok(()) }
    /// ```
    pub fn watch_leadership(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// One try to acquire or renew the lease.
    async fn try_acquire_or_renew(&self) -> Attempt {
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_duration.as_secs().max(1) as i32),
            acquire_time: acquired.or_else(|| Some(now())),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let current = match self.leases.get_opt(&self.name).await {
            Ok(current) => current,
            Err(_) => return Attempt::Failed,
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(0, None)),
            };
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Attempt::Acquired,
                Err(kube::Error::Api(e)) if e.code == 409 => Attempt::HeldByOther,
                Err(_) => Attempt::Failed,
            };
        };
        let old = lease.spec.clone().unwrap_or_default();
        let holder = old.holder_identity.clone().unwrap_or_default();
        let transitions = old.lease_transitions.unwrap_or(0);
        if holder == self.identity {
            lease.spec = Some(spec(transitions, old.acquire_time.clone()));
        } else {
            let duration =
                Duration::from_secs(old.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let expired = old.renew_time.is_none() || self.unchanged_for(&old) > duration;
            if !holder.is_empty() && !expired {
                return Attempt::HeldByOther;
            }
            lease.spec = Some(spec(transitions + 1, None));
        }
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Attempt::Acquired,
            Err(kube::Error::Api(e)) if e.code == 409 => Attempt::HeldByOther,
            Err(_) => Attempt::Failed,
        }
    }

    /// How long the record `spec` has been seen unchanged on this process's clock (zero when
    /// it just changed).
    fn unchanged_for(&self, spec: &LeaseSpec) -> Duration {
        let record = Observed {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions.unwrap_or(0),
        };
        let mut observed = self
            .observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match observed.as_ref() {
            Some((seen, at)) if *seen == record => at.elapsed(),
            _ => {
                *observed = Some((record, tokio::time::Instant::now()));
                Duration::ZERO
            }
        }
    }

    /// One try, bounded by the renew deadline (a request that hangs is a failed try).
    async fn try_within_deadline(&self) -> Attempt {
        tokio::time::timeout(self.timings.renew_deadline, self.try_acquire_or_renew())
            .await
            .unwrap_or(Attempt::Failed)
    }

    /// Empties the lease's holder so that a standby takes over at once (client-go's
    /// `ReleaseOnCancel`).
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.leases.get_opt(&self.name).await else {
            return;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        let _ = self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await;
    }

    /// Campaigns until leading, then runs `lead` while renewing. Returns when `stop` completes
    /// (releasing the lease) or when leadership is lost (`lead` is then dropped).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use plinth_runtime::{LeaderElector, Leadership, Timings};
    /// use std::time::Duration;
    /// let env = plinth_testenv::TestEnv::start().await?;
    /// let fast = Timings {
    ///     lease_duration: Duration::from_secs(3),
    ///     renew_deadline: Duration::from_secs(2),
    ///     retry_period: Duration::from_millis(200),
    /// };
    /// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
    ///     .with_timings(fast);
    /// // Another replica takes the lease while this one leads: `run` returns Lost and drops the work.
    /// let taken = async {
    ///     plinth_testenv::eventually("leading", || async { elector.is_leader() }).await;
    ///     env.take_lease("default", "my-operator", "replica-b").await.expect("take");
    ///     std::future::pending::<()>().await
    /// };
    /// tokio::select! {
    ///     outcome = elector.run(std::future::pending(), std::future::pending()) => {
    ///         assert_eq!(outcome, Leadership::Lost);
    ///     }
    ///     () = taken => unreachable!(),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<L, S>(&self, lead: L, stop: S) -> Leadership
    where
        L: Future<Output = ()>,
        S: Future<Output = ()>,
    {
        tokio::pin!(stop);
        // Campaign.
        loop {
            let sent = tokio::time::Instant::now();
            if let Attempt::Acquired = self.try_within_deadline().await {
                self.renewed_at(sent);
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(self.timings.retry_period) => {}
                () = &mut stop => return Leadership::NeverLed,
            }
        }
        self.leading.send_replace(true);
        tokio::pin!(lead);
        let outcome = loop {
            tokio::select! {
                () = &mut stop => break Leadership::Released,
                () = &mut lead => break Leadership::Released,
                () = tokio::time::sleep(self.timings.retry_period) => {
                    let sent = tokio::time::Instant::now();
                    match self.try_within_deadline().await {
                        Attempt::Acquired => self.renewed_at(sent),
                        Attempt::HeldByOther => break Leadership::Lost,
                        Attempt::Failed => {
                            if !self.holds_lease() {
                                break Leadership::Lost;
                            }
                        }
                    }
                }
            }
        };
        self.leading.send_replace(false);
        if matches!(outcome, Leadership::Released) {
            // Leadership is given up already; the release is a courtesy to the standby, bounded
            // by the renew deadline (an API server that no longer answers cannot hold the stop).
            if tokio::time::timeout(self.timings.renew_deadline, self.release())
                .await
                .is_err()
            {
                tracing::warn!(lease = %self.name, "the lease was not released within the renew deadline; a standby takes over when it expires");
            }
        }
        outcome
    }
}

/// Whether this process may act as the leader now ([`LeaderElector::gate`]).
///
/// # Example
///
/// ```
/// // Any check will do where a gate is asked for (a manager's leader-only runnables use the
/// // elector's).
/// let always: plinth_runtime::LeaseGate = std::sync::Arc::new(|| true);
/// assert!(always());
/// ```
pub type LeaseGate = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// How a [`LeaderElector::run`] ended.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use plinth_runtime::{LeaderElector, Leadership, Timings};
/// use std::time::Duration;
/// let env = plinth_testenv::TestEnv::start().await?;
/// let fast = Timings {
///     lease_duration: Duration::from_secs(3),
///     renew_deadline: Duration::from_secs(2),
///     retry_period: Duration::from_millis(200),
/// };
/// let elector = LeaderElector::new(env.client(), "default", "my-operator", "replica-a")
///     .with_timings(fast);
/// let outcome = elector.run(async {}, std::future::pending()).await;
/// assert!(matches!(outcome, Leadership::Released));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Stopped before it ever led.
    NeverLed,
    /// Led, then stopped cleanly and released the lease.
    Released,
    /// Led, then could not renew (another candidate holds the lease).
    Lost,
}

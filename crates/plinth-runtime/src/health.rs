//! Health and readiness checks registered on a manager, answered on `/healthz` (`/livez`) and
//! `/readyz` as controller-runtime's healthz handler answers them: `200 ok` when every check
//! passes, else `500` listing each check (`[+]name ok`, `[-]name failed: reason withheld`).
//!
//! ```
//! let checks = plinth_runtime::health::Checks::default();
//! checks.add_ready("database", || Ok(()));
//! checks.add_health("worker", || Err("stuck".to_owned()));
//! let (status, body) = checks.answer(plinth_runtime::health::Probe::Health, true);
//! assert_eq!(status, 500);
//! assert!(body.contains("[-]worker failed: reason withheld"));
//! ```

use std::sync::{Arc, Mutex, PoisonError};

/// A check: `Ok` when healthy, else why not (logged, not served).
///
/// # Example
///
/// ```
/// let check: plinth_runtime::health::Check = std::sync::Arc::new(|| Err("no connection".into()));
/// assert!(check().is_err());
/// ```
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Which endpoint a check belongs to.
///
/// # Example
///
/// ```
/// use plinth_runtime::health::{Checks, Probe};
/// let checks = Checks::default();
/// // Readiness waits for the caches; health does not.
/// assert_eq!(checks.answer(Probe::Ready, false).0, 500);
/// assert_eq!(checks.answer(Probe::Health, false).0, 200);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz` (and `/livez`): the process should be restarted when failing.
    Health,
    /// `/readyz`: the process should get no traffic while failing.
    Ready,
}

/// The checks of one manager; clones share them.
///
/// # Example
///
/// ```
/// use plinth_runtime::health::{Checks, Probe};
/// let checks = Checks::default();
/// let shared = checks.clone();
/// shared.add_ready("database", || Ok(()));
/// assert_eq!(checks.answer(Probe::Ready, true), (200, "ok".to_owned()));
/// ```
#[derive(Clone, Default)]
pub struct Checks {
    checks: Arc<Mutex<Vec<(Probe, String, Check)>>>,
}

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checks").finish_non_exhaustive()
    }
}

impl Checks {
    /// Adds a `/healthz` check named `name`.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::health::{Checks, Probe};
    /// let checks = Checks::default();
    /// checks.add_health("worker", || Err("stuck for 5 minutes".into()));
    /// let (code, body) = checks.answer(Probe::Health, true);
    /// assert_eq!(code, 500);
    /// assert_eq!(body, "[+]ping ok\n[-]worker failed: reason withheld\nhealthz check failed");
    /// ```
    pub fn add_health(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.add(Probe::Health, name, Arc::new(check));
    }

    /// Adds a `/readyz` check named `name`.
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::health::{Checks, Probe};
    /// let checks = Checks::default();
    /// checks.add_ready("database", || Err("connection refused".into()));
    /// let (code, body) = checks.answer(Probe::Ready, true);
    /// assert_eq!(code, 500);
    /// assert!(body.contains("[+]informer-sync ok\n[-]database failed: reason withheld"));
    /// ```
    pub fn add_ready(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.add(Probe::Ready, name, Arc::new(check));
    }

    fn add(&self, probe: Probe, name: &str, check: Check) {
        self.checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((probe, name.to_owned(), check));
    }

    /// The status code and body of `probe`; `synced` is whether the manager's caches have
    /// synced (a readiness condition of its own, `informer-sync`).
    ///
    /// # Example
    ///
    /// ```
    /// use plinth_runtime::health::{Checks, Probe};
    /// let checks = Checks::default();
    /// let (code, body) = checks.answer(Probe::Ready, false);
    /// assert_eq!(code, 500);
    /// assert!(body.contains("[-]informer-sync failed: reason withheld"));
    /// assert_eq!(checks.answer(Probe::Ready, true), (200, "ok".to_owned()));
    /// ```
    pub fn answer(&self, probe: Probe, synced: bool) -> (u16, String) {
        let checks: Vec<(String, Check)> = self
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(p, _, _)| *p == probe)
            .map(|(_, name, check)| (name.clone(), check.clone()))
            .collect();
        let mut lines = vec![("ping".to_owned(), Ok(()))];
        if probe == Probe::Ready {
            let sync = if synced {
                Ok(())
            } else {
                Err("caches not synced".to_owned())
            };
            lines.push(("informer-sync".to_owned(), sync));
        }
        lines.extend(checks.into_iter().map(|(name, check)| {
            let outcome = check();
            (name, outcome)
        }));
        if lines.iter().all(|(_, r)| r.is_ok()) {
            return (200, "ok".to_owned());
        }
        let mut body = String::new();
        for (name, outcome) in &lines {
            match outcome {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    tracing::info!(check = %name, %reason, "{} check failed", probe.word());
                    body.push_str(&format!("[-]{name} failed: reason withheld\n"));
                }
            }
        }
        body.push_str(&format!("{} check failed", probe.word()));
        (500, body)
    }
}

impl Probe {
    fn word(self) -> &'static str {
        match self {
            Self::Health => "healthz",
            Self::Ready => "readyz",
        }
    }
}

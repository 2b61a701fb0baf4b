//! Concurrency limits with per-user fair queuing (kube-apiserver's `--max-requests-inflight`
//! and `--max-mutating-requests-inflight`, with a simplified API Priority and Fairness): reads
//! and writes each have a number of seats. A request takes a free seat, or waits in its user's
//! queue; when a seat frees, it goes to the waiting user who holds the fewest — so one user
//! flooding the server gets its share, and another user's request waits for one request to
//! finish, not for the flood. A queue longer than [`QUEUE_LENGTH`], or a wait longer than
//! [`QUEUE_WAIT`], is answered 429 `TooManyRequests` with `Retry-After: 1`. Long-running
//! requests (watches) are not counted; members of `system:masters` are never held (kube's
//! `exempt` priority level).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::Method;
use plinth_core::{ApiError, StatusReason};
use tokio::sync::oneshot;

use plinth_auth::{MASTERS, User};

pub(crate) use plinth_types::flowcontrol::QUEUE_LENGTH;
/// How long a request waits for a seat at most.
pub(crate) const QUEUE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    taken: usize,
    held: HashMap<String, usize>,
    /// Each user's waiting requests, with when they began to wait.
    waiting: HashMap<String, VecDeque<(oneshot::Sender<()>, std::time::Instant)>>,
}

/// Seats of one kind (reads or writes).
#[derive(Debug)]
struct Pool {
    seats: usize,
    state: Mutex<State>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands free seats to waiting users, fewest seats held first, then the longest waiting.
    fn dispatch(state: &mut State, seats: usize) {
        while state.taken < seats {
            let Some(user) = state
                .waiting
                .iter()
                .filter_map(|(user, queue)| Some((user, queue.front()?.1)))
                .min_by_key(|(user, since)| (state.held.get(*user).copied().unwrap_or(0), *since))
                .map(|(user, _)| user.clone())
            else {
                return;
            };
            let Some(queue) = state.waiting.get_mut(&user) else {
                return;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                state.waiting.remove(&user);
            }
            // A waiter that gave up (its receiver is gone) takes nothing.
            if let Some((waiter, _)) = waiter
                && waiter.send(()).is_ok()
            {
                state.taken += 1;
                *state.held.entry(user).or_default() += 1;
            }
        }
    }

    fn release(&self, user: &str) {
        let mut state = self.lock();
        state.taken = state.taken.saturating_sub(1);
        if let Some(held) = state.held.get_mut(user) {
            *held -= 1;
            if *held == 0 {
                state.held.remove(user);
            }
        }
        Self::dispatch(&mut state, self.seats);
    }
}

/// The limits; `None`: unlimited.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    readonly: Option<Arc<Pool>>,
    mutating: Option<Arc<Pool>>,
}

/// Holds a request's seat until dropped.
#[derive(Debug)]
pub(crate) struct Place(Option<(Arc<Pool>, String)>);

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((pool, user)) = self.0.take() {
            pool.release(&user);
        }
    }
}

fn too_many() -> ApiError {
    let mut error = ApiError::new(
        StatusReason::TooManyRequests,
        "Too many requests, please try again later.",
    );
    error.details.retry_after_seconds = Some(1);
    error
}

impl Inflight {
    /// `readonly` and `mutating` seats (0: unlimited).
    pub(crate) fn new(readonly: usize, mutating: usize) -> Self {
        let pool = |seats: usize| {
            (seats > 0).then(|| {
                Arc::new(Pool {
                    seats,
                    state: Mutex::default(),
                })
            })
        };
        Self {
            readonly: pool(readonly),
            mutating: pool(mutating),
        }
    }

    /// A seat for a request of `user` with `method`, unless it is long-running; waits in the
    /// user's queue while every seat is taken.
    ///
    /// # Errors
    /// 429 when the user's queue is full or the wait too long.
    pub(crate) async fn admit(
        &self,
        user: &User,
        method: &Method,
        long_running: bool,
    ) -> Result<Place, ApiError> {
        if long_running || user.in_group(MASTERS) {
            return Ok(Place(None));
        }
        let mutating = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let Some(pool) = (if mutating {
            &self.mutating
        } else {
            &self.readonly
        }) else {
            return Ok(Place(None));
        };
        let waiting = {
            let mut state = pool.lock();
            // Nobody waiting and a seat free: take it.
            if state.taken < pool.seats && state.waiting.is_empty() {
                state.taken += 1;
                *state.held.entry(user.name.clone()).or_default() += 1;
                return Ok(Place(Some((pool.clone(), user.name.clone()))));
            }
            let queue = state.waiting.entry(user.name.clone()).or_default();
            if queue.len() >= QUEUE_LENGTH {
                return Err(too_many());
            }
            let (tx, rx) = oneshot::channel();
            queue.push_back((tx, std::time::Instant::now()));
            let seats = pool.seats;
            Pool::dispatch(&mut state, seats);
            rx
        };
        match tokio::time::timeout(QUEUE_WAIT, waiting).await {
            Ok(Ok(())) => Ok(Place(Some((pool.clone(), user.name.clone())))),
            _ => Err(too_many()),
        }
    }
}

impl Inflight {
    /// `apiserver_current_inflight_requests` and `apiserver_current_inqueue_requests` by
    /// request kind (`readOnly`, `mutating`), in the Prometheus text format.
    pub(crate) fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for (name, help, queued) in [
            (
                "apiserver_current_inflight_requests",
                "Requests holding a seat, by kind",
                false,
            ),
            (
                "apiserver_current_inqueue_requests",
                "Requests waiting for a seat, by kind",
                true,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (kind, pool) in [("readOnly", &self.readonly), ("mutating", &self.mutating)] {
                let value = pool.as_ref().map_or(0, |pool| {
                    let state = pool.lock();
                    if queued {
                        state.waiting.values().map(VecDeque::len).sum()
                    } else {
                        state.taken
                    }
                });
                let _ = writeln!(out, "{name}{{request_kind=\"{kind}\"}} {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_seat_goes_to_the_user_holding_fewest() {
        let inflight = Inflight::new(2, 1);
        let (flood, other) = (User::new("flood", &[]), User::new("other", &[]));
        let a = inflight.admit(&flood, &Method::GET, false).await.unwrap();
        let b = inflight.admit(&flood, &Method::GET, false).await.unwrap();
        // Both seats taken: the flood's third request and the other user's wait.
        let pool = inflight.readonly.clone().unwrap();
        let queued_flood = {
            let inflight = &inflight;
            let flood = &flood;
            async move { inflight.admit(flood, &Method::GET, false).await }
        };
        let queued_other = {
            let inflight = &inflight;
            let other = &other;
            async move { inflight.admit(other, &Method::GET, false).await }
        };
        let (mut queued_flood, mut queued_other) = (Box::pin(queued_flood), Box::pin(queued_other));
        // Poll both once so that they queue.
        assert!(futures::poll!(&mut queued_flood).is_pending());
        assert!(futures::poll!(&mut queued_other).is_pending());
        assert_eq!(pool.lock().waiting.len(), 2);
        // A flood seat frees: it goes to `other`, who holds none.
        drop(a);
        let seat = queued_other.await.unwrap();
        assert!(futures::poll!(&mut queued_flood).is_pending());
        assert_eq!(pool.lock().held.get("other"), Some(&1));
        drop((b, seat));
        assert!(queued_flood.await.is_ok());
        // Watches and masters are not held; writes have their own seats.
        assert!(inflight.admit(&flood, &Method::GET, true).await.is_ok());
        let root = User::new("root", &[MASTERS]);
        assert!(inflight.admit(&root, &Method::GET, false).await.is_ok());
        let write = inflight.admit(&flood, &Method::POST, false).await.unwrap();
        drop(write);
        assert!(
            Inflight::new(0, 0)
                .admit(&flood, &Method::GET, false)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_with_retry_after() {
        let inflight = Inflight::new(1, 1);
        let user = User::new("flood", &[]);
        let _seat = inflight.admit(&user, &Method::GET, false).await.unwrap();
        let mut queued = Vec::new();
        for _ in 0..QUEUE_LENGTH {
            let mut waiting = Box::pin(inflight.admit(&user, &Method::GET, false));
            assert!(futures::poll!(&mut waiting).is_pending());
            queued.push(waiting);
        }
        let refused = inflight
            .admit(&user, &Method::GET, false)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), 429);
        assert_eq!(refused.details.retry_after_seconds, Some(1));
    }
}

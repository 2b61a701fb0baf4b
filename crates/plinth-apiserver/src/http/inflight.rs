//! Concurrency limits (kube-apiserver's `--max-requests-inflight` and
//! `--max-mutating-requests-inflight`): past either, a request is answered at once with 429
//! `TooManyRequests` and `Retry-After: 1` instead of queueing without bound. Long-running
//! requests (watches) are not counted; members of `system:masters` are never refused, so an
//! administrator can always get in.

use std::sync::Arc;

use axum::http::Method;
use plinth_core::{ApiError, StatusReason};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{MASTERS, User};

/// The limits; `None`: unlimited.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    readonly: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// Holds a request's place until dropped.
#[derive(Debug)]
pub(crate) struct Place(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Inflight {
    /// Limits of `readonly` and `mutating` requests at once (0: unlimited).
    pub(crate) fn new(readonly: usize, mutating: usize) -> Self {
        let limit = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Self {
            readonly: limit(readonly),
            mutating: limit(mutating),
        }
    }

    /// A place for a request of `user` with `method`, unless it is long-running.
    ///
    /// # Errors
    /// 429 when the request's kind is at its limit.
    pub(crate) fn admit(
        &self,
        user: &User,
        method: &Method,
        long_running: bool,
    ) -> Result<Place, ApiError> {
        if long_running || user.in_group(MASTERS) {
            return Ok(Place(None));
        }
        let mutating = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let Some(semaphore) = (if mutating {
            &self.mutating
        } else {
            &self.readonly
        }) else {
            return Ok(Place(None));
        };
        match semaphore.clone().try_acquire_owned() {
            Ok(permit) => Ok(Place(Some(permit))),
            Err(_) => {
                let mut error = ApiError::new(
                    StatusReason::TooManyRequests,
                    "Too many requests, please try again later.",
                );
                error.details.retry_after_seconds = Some(1);
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_past_the_limit_are_refused_until_a_place_frees() {
        let inflight = Inflight::new(1, 1);
        let user = User::new("alice", &[]);
        let first = inflight.admit(&user, &Method::GET, false).unwrap();
        let refused = inflight.admit(&user, &Method::GET, false).unwrap_err();
        assert_eq!(refused.code(), 429);
        assert_eq!(refused.details.retry_after_seconds, Some(1));
        // Writes have their own limit; watches and masters are not counted.
        let write = inflight.admit(&user, &Method::POST, false).unwrap();
        assert!(inflight.admit(&user, &Method::PUT, false).is_err());
        assert!(inflight.admit(&user, &Method::GET, true).is_ok());
        assert!(
            inflight
                .admit(&User::new("root", &[MASTERS]), &Method::GET, false)
                .is_ok()
        );
        drop((first, write));
        assert!(inflight.admit(&user, &Method::GET, false).is_ok());
        assert!(
            Inflight::new(0, 0)
                .admit(&user, &Method::GET, false)
                .is_ok()
        );
    }
}

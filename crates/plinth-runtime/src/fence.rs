//! A client fenced by leadership: its writes are refused unless this process leads and renewed
//! its lease less than the renew deadline ago ([`crate::LeaderElector::holds_lease`]), so work
//! that was in flight when the lease was lost — or that wakes after the process was paused
//! past its lease — cannot begin a new write.
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use plinth_runtime::LeaderElector;
//! let elector = LeaderElector::new(client.clone(), "default", "my-operator", "pod-a");
//! // Reconcilers write through this client: a write after leadership is lost is refused.
//! let fenced = elector.fence(client);
//! # let _ = fenced; }
//! ```

use http::{Method, Request};
use kube::client::Body;

use crate::leader::LeaseGate;

/// `client` whose writes (every method but `GET`, `HEAD` and `OPTIONS`) fail at once while
/// `leading` says no.
pub(crate) fn fenced(client: kube::Client, leading: LeaseGate, lease: &str) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    let lease = lease.to_owned();
    let service = tower::service_fn(move |request: Request<Body>| {
        // Judged as the request is handed over, not when its future first runs.
        let refused = !matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        ) && !leading();
        let (client, lease) = (client.clone(), lease.clone());
        async move {
            if refused {
                return Err(kube::Error::Service(
                    format!("not the leader of lease {lease}: the write was not sent").into(),
                ));
            }
            client.send(request).await
        }
    });
    kube::Client::new(service, namespace)
}

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

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use kube::client::Body;

use crate::leader::LeaseGate;

/// The tower service under a fenced client.
#[derive(Clone)]
struct Fenced {
    client: kube::Client,
    leading: LeaseGate,
    lease: String,
}

impl tower::Service<Request<Body>> for Fenced {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let writes = !matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        );
        if writes && !(self.leading)() {
            let lease = self.lease.clone();
            return Box::pin(async move {
                Err(kube::Error::Service(
                    format!("not the leader of lease {lease}: the write was not sent").into(),
                ))
            });
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// `client` whose writes (every method but `GET`, `HEAD` and `OPTIONS`) fail at once while
/// `leading` says no.
pub(crate) fn fenced(client: kube::Client, leading: LeaseGate, lease: &str) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    kube::Client::new(
        Fenced {
            client,
            leading,
            lease: lease.to_owned(),
        },
        namespace,
    )
}

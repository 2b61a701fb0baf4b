//! What the runtime's tests share: waiting for a condition, and reading the manager's
//! `/metrics` and probe endpoints.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a condition may take before the test gives up: a hang guard far above any
/// expected wait, not a measurement.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

/// Polls `check` until it holds; fails the test (naming `what`) only if it never does.
pub(crate) async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let give_up = Instant::now() + HANG_GUARD;
    while !check().await {
        assert!(Instant::now() < give_up, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The raw HTTP/1.1 response to `GET path` on `addr` (status line, headers, body).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

//! What the runtime's tests share: waiting for a condition, and reading the manager's
//! `/metrics` and probe endpoints.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) use plinth_testenv::eventually;

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

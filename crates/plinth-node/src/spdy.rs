//! `kubectl port-forward` on the agent's side: SPDY/3.1 (its framing is
//! `plinth_net::spdy`; settings and window updates read and ignored, as spdystream does) and
//! the `portforward.k8s.io` protocol on it: for every forwarded connection the client opens an error stream and a data stream
//! with the same `requestid` and a `port`; the data stream is joined to a TCP connection to
//! the pod's address on that port, and a failure is written on the error stream.

use std::collections::HashMap;
use std::sync::Arc;

pub(crate) use plinth_net::spdy::{
    Deflater, FLAG_FIN, Frame, GOAWAY, Inflater, PING, RST_STREAM, SYN_REPLY, SYN_STREAM, be32,
    control, data, frame_writer, read_frame,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The upgrade a port-forward asks for.
pub(crate) const PROTOCOL: &str = "portforward.k8s.io";

/// The WebSocket subprotocol of SPDY tunnelled in WebSocket binary messages.
pub(crate) const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// One forwarded connection's streams.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
}

/// Serves port forwards on a WebSocket whose binary messages carry the SPDY connection's
/// bytes (in any split: the messages are one byte stream each way).
pub(crate) async fn serve_tunnelled(
    upgraded: hyper::upgrade::Upgraded,
    pod_ip: Arc<crate::netns::Reach>,
    label: String,
) {
    use futures::{SinkExt, StreamExt};
    use tokio::io::AsyncReadExt;
    use tokio_tungstenite::tungstenite::Message;
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        hyper_util::rt::TokioIo::new(upgraded),
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        None,
    )
    .await;
    let (mut sink, mut messages) = ws.split();
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(serve(ours, pod_ip, label));
    let (mut from_spdy, mut to_spdy) = tokio::io::split(theirs);
    let inbound = async move {
        while let Some(Ok(message)) = messages.next().await {
            let bytes = match message {
                Message::Binary(bytes) => bytes,
                Message::Close(_) => break,
                _ => continue,
            };
            if to_spdy.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to_spdy.shutdown().await;
    };
    let outbound = async move {
        let mut buffer = vec![0u8; 32 * 1024];
        while let Ok(n) = from_spdy.read(&mut buffer).await {
            if n == 0
                || sink
                    .send(Message::Binary(buffer[..n].to_vec().into()))
                    .await
                    .is_err()
            {
                break;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    tokio::join!(inbound, outbound);
    serving.abort();
}

/// Serves port forwards to `pod_ip` on an upgraded connection until the client goes.
pub(crate) async fn serve<T>(io: T, pod_ip: Arc<crate::netns::Reach>, label: String)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut reader, writer) = tokio::io::split(io);
    let (out_tx, writing) = frame_writer(writer);
    let mut inflater = Inflater::new();
    let Ok(mut deflater) = Deflater::new() else {
        return;
    };
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    // Data for a stream goes to its TCP connection's writer.
    let mut inbound: HashMap<u32, mpsc::Sender<Option<Vec<u8>>>> = HashMap::new();
    let label = Arc::new(label);
    loop {
        let (kind, body) = match read_frame(&mut reader).await {
            Some(Frame::Data { stream, fin, body }) => {
                if let Some(sender) = inbound.get(&stream) {
                    if !body.is_empty() {
                        let _ = sender.send(Some(body)).await;
                    }
                    if fin {
                        let _ = sender.send(None).await;
                    }
                }
                continue;
            }
            Some(Frame::Control { kind, body }) => (kind, body),
            None => break,
        };
        match kind {
            SYN_STREAM => {
                let Some(stream) = be32(&body, 0).map(|s| s & 0x7fff_ffff) else {
                    continue;
                };
                let headers = match body.get(10..).map(|block| inflater.headers(block)) {
                    Some(Ok(headers)) => headers,
                    _ => break,
                };
                let mut reply = stream.to_be_bytes().to_vec();
                match deflater.empty_block() {
                    Ok(block) => reply.extend_from_slice(&block),
                    Err(_) => break,
                }
                if out_tx.send(control(SYN_REPLY, 0, &reply)).await.is_err() {
                    break;
                }
                let request = headers.get("requestid").cloned().unwrap_or_default();
                let port = headers
                    .get("port")
                    .and_then(|p| p.parse::<u16>().ok())
                    .unwrap_or(0);
                let pair = pairs.entry(request.clone()).or_default();
                pair.port = port;
                match headers.get("streamtype").map(String::as_str) {
                    Some("error") => pair.error = Some(stream),
                    Some("data") => pair.data = Some(stream),
                    _ => {}
                }
                if let (Some(error), Some(data_stream)) = (pair.error, pair.data) {
                    pairs.remove(&request);
                    let (tx, rx) = mpsc::channel(64);
                    inbound.insert(data_stream, tx);
                    tokio::spawn(forward(
                        pod_ip.clone(),
                        port,
                        error,
                        data_stream,
                        rx,
                        out_tx.clone(),
                        label.clone(),
                    ));
                }
            }
            RST_STREAM => {
                if let Some(stream) = be32(&body, 0).map(|s| s & 0x7fff_ffff)
                    && let Some(sender) = inbound.remove(&stream)
                {
                    let _ = sender.send(None).await;
                }
            }
            PING if out_tx.send(control(PING, 0, &body)).await.is_err() => break,
            GOAWAY => break,
            _ => {}
        }
    }
    drop(inbound);
    drop(out_tx);
    let _ = writing.await;
}

/// Joins one data stream to a TCP connection to `ip:port`; a failure to connect is written
/// on the error stream, as the kubelet writes it.
async fn forward(
    ip: Arc<crate::netns::Reach>,
    port: u16,
    error: u32,
    stream: u32,
    mut inbound: mpsc::Receiver<Option<Vec<u8>>>,
    out: mpsc::Sender<Vec<u8>>,
    label: Arc<String>,
) {
    let tcp = match ip.connect(port).await {
        Ok(tcp) => tcp,
        Err(e) => {
            let message = format!("error forwarding port {port} to pod {label}: {e}");
            let _ = out.send(data(error, FLAG_FIN, message.as_bytes())).await;
            let _ = out.send(data(stream, FLAG_FIN, &[])).await;
            return;
        }
    };
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let to = tokio::spawn(async move {
        while let Some(Some(bytes)) = inbound.recv().await {
            if to_pod.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to_pod.shutdown().await;
    });
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        match from_pod.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(data(stream, 0, &buffer[..n])).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = out.send(data(stream, FLAG_FIN, &[])).await;
    let _ = out.send(data(error, FLAG_FIN, &[])).await;
    let _ = to.await;
}

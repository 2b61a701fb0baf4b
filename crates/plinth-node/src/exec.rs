//! `kubectl exec` and `kubectl attach` on the agent's side: the WebSocket channel protocol
//! (`v5.channel.k8s.io`, or `v4`): every binary message starts with its stream — 0 stdin,
//! 1 stdout, 2 stderr, 3 the final `Status`, 4 terminal resizes; in v5, `[255, n]` closes
//! stream `n`. An exec runs its command inside the container's namespaces with the
//! container's environment; an attach follows the container's output.

use std::process::Stdio;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// The subprotocols served, most preferred first.
pub(crate) const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// The subprotocol to answer with, from the client's `Sec-WebSocket-Protocol`.
pub(crate) fn pick_protocol(offered: &str) -> Option<&'static str> {
    let offered: Vec<&str> = offered.split(',').map(str::trim).collect();
    PROTOCOLS.iter().copied().find(|p| offered.contains(p))
}

/// What the streams of a request are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Streams {
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
}

fn status(code: Option<i32>, command: &[String]) -> serde_json::Value {
    match code {
        Some(0) => json!({"metadata": {}, "status": "Success"}),
        Some(code) => json!({
            "metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command.join(" ")),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        None => json!({"metadata": {}, "status": "Failure",
            "message": "command terminated by a signal", "reason": "InternalError"}),
    }
}

/// A close frame with code 1000: the client reads it as the end of every stream.
fn normal_close() -> Message {
    Message::Close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    }))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(Bytes::from(bytes))
}

/// Runs `argv` (already wrapped to enter the container) with `env`, its streams on `ws`.
pub(crate) async fn exec(
    upgraded: Upgraded,
    argv: Vec<String>,
    shown: Vec<String>,
    env: Vec<(String, String)>,
    streams: Streams,
) {
    let mut ws = WebSocketStream::from_raw_socket(
        TokioIo::new(upgraded),
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        None,
    )
    .await;
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(if streams.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if streams.stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(if streams.stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let failure = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": format!("failed to exec in container: {e}")});
            let _ = ws.send(frame(ERROR, failure.to_string().as_bytes())).await;
            let _ = ws.send(normal_close()).await;
            return;
        }
    };
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Message>(32);
    let mut pumps = Vec::new();
    for (pipe, channel) in [
        (
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            STDOUT,
        ),
        (
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            STDERR,
        ),
    ] {
        let Some(mut pipe) = pipe else { continue };
        let tx = out_tx.clone();
        pumps.push(tokio::spawn(async move {
            let mut buffer = vec![0u8; 32 * 1024];
            loop {
                match tokio::io::AsyncReadExt::read(&mut pipe, &mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.send(frame(channel, &buffer[..n])).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }));
    }
    drop(out_tx);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if sink.send(message).await.is_err() {
                break;
            }
        }
        sink
    });
    let mut stdin = child.stdin.take();
    let reader = tokio::spawn(async move {
        while let Some(Ok(message)) = source.next().await {
            match message {
                Message::Binary(data) if !data.is_empty() => match data[0] {
                    STDIN => {
                        if let Some(pipe) = stdin.as_mut()
                            && pipe.write_all(&data[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    CLOSE if data.get(1) == Some(&STDIN) => stdin = None,
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
    });
    let code = child.wait().await.ok().and_then(|s| s.code());
    for pump in pumps {
        let _ = pump.await;
    }
    reader.abort();
    if let Ok(mut sink) = writer.await {
        let _ = sink
            .send(frame(ERROR, status(code, &shown).to_string().as_bytes()))
            .await;
        let _ = sink.send(normal_close()).await;
    }
}

/// Follows the container's log on stdout (and stderr) until the client goes.
pub(crate) async fn attach(upgraded: Upgraded, log: std::path::PathBuf, streams: Streams) {
    let ws = WebSocketStream::from_raw_socket(
        TokioIo::new(upgraded),
        tokio_tungstenite::tungstenite::protocol::Role::Server,
        None,
    )
    .await;
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let start = std::fs::metadata(&log).map_or(0, |m| usize::try_from(m.len()).unwrap_or(0));
    tokio::spawn(crate::logs::follow(log, start, tx));
    loop {
        tokio::select! {
            line = rx.recv() => {
                let Some(line) = line else { break };
                let (stream, text) = crate::logs::stream_and_text(&line);
                let channel = if stream == "stderr" { STDERR } else { STDOUT };
                let wanted = if channel == STDERR { streams.stderr } else { streams.stdout };
                if wanted && sink.send(frame(channel, text.as_bytes())).await.is_err() {
                    return;
                }
            }
            message = source.next() => match message {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                _ => {}
            },
        }
    }
    let _ = sink
        .send(frame(ERROR, status(Some(0), &[]).to_string().as_bytes()))
        .await;
    let _ = sink.send(normal_close()).await;
}

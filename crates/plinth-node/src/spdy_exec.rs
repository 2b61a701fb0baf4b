//! `exec` over SPDY/3.1 — client-go's SPDY executor (remotecommand `v4.channel.k8s.io` and
//! older), which the e2e suite's framework and clients before kubectl 1.31 use: the client
//! opens one SPDY stream per channel (`streamtype` error, stdin, stdout, stderr, resize);
//! once every stream the request asked for is open the command starts, its output goes out
//! on the stdout and stderr streams, and its outcome on the error stream (v4: a `Status`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::exec::Streams;
use crate::spdy::{self, FLAG_FIN, Frame, GOAWAY, PING, SYN_REPLY, SYN_STREAM};

/// The remotecommand versions served over SPDY, preferred first.
const PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// How long the client has to open its streams (the kubelet's stream creation timeout).
const STREAMS_TIMEOUT: Duration = Duration::from_secs(30);

/// The version to speak of those the client offers (`X-Stream-Protocol-Version` values).
pub(crate) fn pick(offered: &[&str]) -> Option<&'static str> {
    PROTOCOLS.iter().copied().find(|p| offered.contains(p))
}

/// Runs `argv` for an exec on an upgraded SPDY connection until the command ends.
pub(crate) async fn serve(
    upgraded: hyper::upgrade::Upgraded,
    protocol: &'static str,
    argv: Vec<String>,
    command: Vec<String>,
    env: Vec<(String, String)>,
    streams: Streams,
) {
    let io = hyper_util::rt::TokioIo::new(upgraded);
    let (mut reader, writer) = tokio::io::split(io);
    let (out, writing) = spdy::frame_writer(writer);
    let mut inflater = spdy::Inflater::new();
    let Ok(mut deflater) = spdy::Deflater::new() else {
        return;
    };
    // The streams the request asked for: error always, resize with a terminal (v3+).
    let mut wanted = vec!["error"];
    if streams.stdin {
        wanted.push("stdin");
    }
    if streams.stdout {
        wanted.push("stdout");
    }
    if streams.stderr && !streams.tty {
        wanted.push("stderr");
    }
    if streams.tty && protocol != "v2.channel.k8s.io" && protocol != "channel.k8s.io" {
        wanted.push("resize");
    }
    let mut ids: HashMap<String, u32> = HashMap::new();
    let opened = tokio::time::timeout(STREAMS_TIMEOUT, async {
        while !wanted.iter().all(|w| ids.contains_key(*w)) {
            match spdy::read_frame(&mut reader).await {
                Some(Frame::Control { kind, body }) => {
                    if !answer(kind, &body, &mut inflater, &mut deflater, &out, &mut ids).await {
                        return false;
                    }
                }
                Some(Frame::Data { .. }) => {}
                None => return false,
            }
        }
        true
    })
    .await;
    if opened != Ok(true) {
        drop(out);
        let _ = writing.await;
        return;
    }
    let id = |name: &str| ids.get(name).copied();
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let piped = |on: bool| {
        if on {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        }
    };
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(piped(streams.stdin))
        .stdout(piped(streams.stdout))
        .stderr(piped(streams.stderr && !streams.tty))
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            if let Some(error) = id("error") {
                let message = format!("failed to exec in container: {e}");
                let _ = out
                    .send(spdy::data(error, FLAG_FIN, message.as_bytes()))
                    .await;
            }
            drop(out);
            let _ = writing.await;
            return;
        }
    };
    // The rest of the connection: stdin's data into the command; pings answered.
    let mut stdin = child.stdin.take();
    let stdin_id = id("stdin");
    let pings = out.clone();
    let reading = tokio::spawn(async move {
        while let Some(frame) = spdy::read_frame(&mut reader).await {
            match frame {
                Frame::Data { stream, fin, body } if Some(stream) == stdin_id => {
                    if let Some(pipe) = stdin.as_mut()
                        && !body.is_empty()
                        && pipe.write_all(&body).await.is_err()
                    {
                        stdin = None;
                    }
                    if fin {
                        stdin = None;
                    }
                }
                Frame::Control { kind: PING, body } => {
                    let _ = pings.send(spdy::control(PING, 0, &body)).await;
                }
                Frame::Control { kind: GOAWAY, .. } => break,
                _ => {}
            }
        }
    });
    let mut copies = Vec::new();
    if let (Some(pipe), Some(stream)) = (child.stdout.take(), id("stdout")) {
        copies.push(tokio::spawn(copy(pipe, stream, out.clone())));
    }
    if let (Some(pipe), Some(stream)) = (child.stderr.take(), id("stderr")) {
        copies.push(tokio::spawn(copy(pipe, stream, out.clone())));
    }
    let code = child.wait().await.ok().and_then(|s| s.code());
    for copy in copies {
        let _ = copy.await;
    }
    if let Some(error) = id("error") {
        let outcome = crate::exec::status(code, &command);
        let body = if protocol == "v4.channel.k8s.io" {
            outcome.to_string()
        } else if code == Some(0) {
            String::new()
        } else {
            outcome["message"].as_str().unwrap_or("").to_owned()
        };
        let _ = out.send(spdy::data(error, FLAG_FIN, body.as_bytes())).await;
    }
    reading.abort();
    drop(out);
    let _ = writing.await;
}

/// Answers a control frame while the streams open: a new stream is accepted and named by
/// its `streamtype`; false when the connection ends.
async fn answer(
    kind: u16,
    body: &[u8],
    inflater: &mut spdy::Inflater,
    deflater: &mut spdy::Deflater,
    out: &mpsc::Sender<Vec<u8>>,
    ids: &mut HashMap<String, u32>,
) -> bool {
    match kind {
        SYN_STREAM => {
            let Some(stream) = spdy::be32(body, 0).map(|s| s & 0x7fff_ffff) else {
                return false;
            };
            let Some(Ok(headers)) = body.get(10..).map(|block| inflater.headers(block)) else {
                return false;
            };
            let mut reply = stream.to_be_bytes().to_vec();
            match deflater.empty_block() {
                Ok(block) => reply.extend_from_slice(&block),
                Err(_) => return false,
            }
            if out.send(spdy::control(SYN_REPLY, 0, &reply)).await.is_err() {
                return false;
            }
            if let Some(kind) = headers.get("streamtype") {
                ids.insert(kind.clone(), stream);
            }
            true
        }
        PING => out.send(spdy::control(PING, 0, body)).await.is_ok(),
        GOAWAY => false,
        _ => true,
    }
}

/// Copies a pipe of the command's into `stream`, then ends the stream.
async fn copy<R: tokio::io::AsyncRead + Unpin>(
    mut pipe: R,
    stream: u32,
    out: mpsc::Sender<Vec<u8>>,
) {
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(spdy::data(stream, 0, &buffer[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = out.send(spdy::data(stream, FLAG_FIN, &[])).await;
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn the_newest_offered_version_is_spoken() {
        assert_eq!(
            pick(&["channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"]),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(pick(&["v2.channel.k8s.io"]), Some("v2.channel.k8s.io"));
        assert_eq!(pick(&["v5.channel.k8s.io"]), None);
    }
}

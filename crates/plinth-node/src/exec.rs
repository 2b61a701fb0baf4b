//! `kubectl exec` and `kubectl attach` on the agent's side: the WebSocket channel protocol
//! (`v5.channel.k8s.io`, `v4`, or the first, `channel.k8s.io`, whose error stream is text):
//! every binary message starts with its stream — 0 stdin,
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
pub(crate) const PROTOCOLS: &[&str] = &["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// A terminal resize (`{"Width": 80, "Height": 24}`), applied with `stty`.
async fn resize(tty: &std::path::Path, message: &[u8]) {
    let Ok(size) = serde_json::from_slice::<serde_json::Value>(message) else {
        return;
    };
    let (Some(width), Some(height)) = (size["Width"].as_u64(), size["Height"].as_u64()) else {
        return;
    };
    let _ = tokio::process::Command::new("stty")
        .arg("-F")
        .arg(tty)
        .args(["cols", &width.to_string(), "rows", &height.to_string()])
        .status()
        .await;
}

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
    /// A terminal (`kubectl exec -t`): output on stdout only, resizes on stream 4.
    pub(crate) tty: bool,
}

pub(crate) fn status(code: Option<i32>, command: &[String]) -> serde_json::Value {
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
    protocol: &'static str,
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
    // With a terminal, the command runs in its own session on a pty (`setsid -c` makes it
    // the controlling terminal); its output is one stream.
    let tty = if streams.tty {
        match nix::pty::openpty(None, None) {
            Ok(pty) => Some(pty),
            Err(e) => {
                let failure = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                    "message": format!("failed to allocate a terminal: {e}")});
                let _ = ws.send(frame(ERROR, failure.to_string().as_bytes())).await;
                let _ = ws.send(normal_close()).await;
                return;
            }
        }
    } else {
        None
    };
    let mut argv = argv;
    if tty.is_some() {
        argv.splice(0..0, ["setsid".to_owned(), "-c".to_owned()]);
    }
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).env_clear().envs(env).kill_on_drop(true);
    let slave_path = tty
        .as_ref()
        .and_then(|pty| nix::unistd::ttyname(&pty.slave).ok());
    // kubectl reads the connection before it has made its streams, and drops what comes
    // for a stream not made yet: a terminal session waits (a second at most) for the
    // client's first message — kubectl's is the terminal's size, which the command then
    // starts with. Input that comes first is kept for the command.
    let mut early_stdin = None;
    let mut greeted = false;
    if let Some(path) = &slave_path
        && let Ok(Some(Ok(Message::Binary(data)))) =
            tokio::time::timeout(std::time::Duration::from_secs(1), ws.next()).await
    {
        greeted = true;
        match data.first() {
            Some(&RESIZE) => resize(path, &data[1..]).await,
            Some(&STDIN) => early_stdin = Some(data.slice(1..)),
            _ => {}
        }
    }
    match &tty {
        Some(pty) => {
            let end = || {
                pty.slave
                    .try_clone()
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null())
            };
            command.stdin(end()).stdout(end()).stderr(end());
        }
        None => {
            let pipe = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
            command
                .stdin(pipe(streams.stdin))
                .stdout(pipe(streams.stdout))
                .stderr(pipe(streams.stderr));
        }
    }
    let spawned = command.spawn();
    // The command's copies of the terminal's ends go (else the terminal never ends).
    drop(command);
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
    type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
    type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
    let (outputs, input): (Vec<(Reader, u8)>, Option<Writer>) = match tty {
        Some(pty) => {
            drop(pty.slave);
            let master = std::fs::File::from(pty.master);
            let reading = master.try_clone().ok().map(tokio::fs::File::from_std);
            let outputs = reading
                .map(|r| (Box::new(r) as Reader, STDOUT))
                .into_iter()
                .collect();
            let input = streams
                .stdin
                .then(|| Box::new(tokio::fs::File::from_std(master)) as Writer);
            (outputs, input)
        }
        None => {
            let mut outputs = Vec::new();
            if let Some(out) = child.stdout.take() {
                outputs.push((Box::new(out) as Reader, STDOUT));
            }
            if let Some(err) = child.stderr.take() {
                outputs.push((Box::new(err) as Reader, STDERR));
            }
            (outputs, child.stdin.take().map(|i| Box::new(i) as Writer))
        }
    };
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Message>(32);
    let mut pumps = Vec::new();
    for (mut pipe, channel) in outputs {
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
        // Without a first message from the client to go by (a terminal session has one), a
        // moment's grace for its streams: client-go makes them while it already reads, and
        // drops a frame for a stream not made yet — a command done in a millisecond lost
        // its output and status. kube's own path (API server, kubelet, runtime) takes longer.
        if !greeted {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        while let Some(message) = out_rx.recv().await {
            if sink.send(message).await.is_err() {
                break;
            }
        }
        sink
    });
    let mut stdin = input;
    let reader = tokio::spawn(async move {
        if let (Some(pipe), Some(data)) = (stdin.as_mut(), early_stdin)
            && (pipe.write_all(&data).await.is_err() || pipe.flush().await.is_err())
        {
            stdin = None;
        }
        while let Some(Ok(message)) = source.next().await {
            match message {
                Message::Binary(data) if !data.is_empty() => match data[0] {
                    STDIN => {
                        if let Some(pipe) = stdin.as_mut()
                            && (pipe.write_all(&data[1..]).await.is_err()
                                || pipe.flush().await.is_err())
                        {
                            stdin = None;
                        }
                    }
                    RESIZE => {
                        if let Some(path) = &slave_path {
                            resize(path, &data[1..]).await;
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
        let outcome = status(code, &shown);
        // The first version's error stream is text, and says nothing on success.
        let report = if protocol == "channel.k8s.io" {
            outcome["message"].as_str().unwrap_or("").to_owned()
        } else {
            outcome.to_string()
        };
        if !report.is_empty() {
            let _ = sink.send(frame(ERROR, report.as_bytes())).await;
        }
        let _ = sink.send(normal_close()).await;
    }
}

/// Follows the container's log on stdout (and stderr) until the client goes; what the
/// client sends on stdin goes to the process (when the container keeps its stdin open).
pub(crate) async fn attach(
    upgraded: Upgraded,
    log: std::path::PathBuf,
    stdin: Option<crate::pods::Stdin>,
    stdin_once: bool,
    streams: Streams,
) {
    attach_session(upgraded, log, stdin.as_ref(), stdin_once, streams).await;
    // `stdinOnce`: the first session's end is the end of the container's input.
    if stdin_once && let Some(pipe) = stdin {
        close(&pipe).await;
    }
}

/// Closes a container's standard input (it reads end-of-file).
async fn close(pipe: &crate::pods::Stdin) {
    if let Some(mut open) = pipe.lock().await.take() {
        let _ = open.shutdown().await;
    }
}

async fn attach_session(
    upgraded: Upgraded,
    log: std::path::PathBuf,
    stdin: Option<&crate::pods::Stdin>,
    stdin_once: bool,
    streams: Streams,
) {
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
                Some(Ok(Message::Binary(data))) if data.first() == Some(&STDIN) && streams.stdin => {
                    if let Some(pipe) = stdin
                        && let Some(open) = pipe.lock().await.as_mut()
                    {
                        let _ = open.write_all(&data[1..]).await;
                        let _ = open.flush().await;
                    }
                }
                // The client's input ended (v5): with `stdinOnce` the container's ends too.
                Some(Ok(Message::Binary(data)))
                    if data.first() == Some(&CLOSE) && data.get(1) == Some(&STDIN) =>
                {
                    if stdin_once && let Some(pipe) = stdin {
                        close(pipe).await;
                    }
                }
                _ => {}
            },
        }
    }
    let _ = sink
        .send(frame(ERROR, status(Some(0), &[]).to_string().as_bytes()))
        .await;
    let _ = sink.send(normal_close()).await;
}

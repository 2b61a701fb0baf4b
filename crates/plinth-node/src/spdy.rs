//! `kubectl port-forward` on the agent's side: SPDY/3.1 framing (the part kubectl's
//! `spdystream` uses — SYN_STREAM, SYN_REPLY, DATA, RST_STREAM, PING, GOAWAY; settings and
//! window updates read and ignored, as spdystream does) and the `portforward.k8s.io` protocol
//! on it: for every forwarded connection the client opens an error stream and a data stream
//! with the same `requestid` and a `port`; the data stream is joined to a TCP connection to
//! the pod's address on that port, and a failure is written on the error stream.

use std::collections::HashMap;
use std::sync::Arc;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The upgrade a port-forward asks for.
pub(crate) const PROTOCOL: &str = "portforward.k8s.io";

/// The WebSocket subprotocol of SPDY tunnelled in WebSocket binary messages.
pub(crate) const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

const VERSION: u16 = 3;
pub(crate) const SYN_STREAM: u16 = 1;
pub(crate) const SYN_REPLY: u16 = 2;
pub(crate) const RST_STREAM: u16 = 3;
pub(crate) const PING: u16 = 6;
pub(crate) const GOAWAY: u16 = 7;
pub(crate) const FLAG_FIN: u8 = 0x01;
/// The largest frame read (spdystream's limit).
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The SPDY/3 header compression dictionary (the draft's §2.6.10.1): these names, each after
/// its length in four bytes, then the common values.
fn dictionary() -> Vec<u8> {
    const WORDS: &[&str] = &[
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const TAIL: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
        "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently",
        "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov ",
        "Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,",
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,",
        "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut bytes = Vec::with_capacity(1423);
    for word in WORDS {
        bytes.extend_from_slice(&u32::try_from(word.len()).unwrap_or(0).to_be_bytes());
        bytes.extend_from_slice(word.as_bytes());
    }
    bytes.extend_from_slice(TAIL.as_bytes());
    bytes
}

/// Header blocks of one direction: one zlib stream for the connection.
pub(crate) struct Inflater {
    zlib: Decompress,
    dictionary: Vec<u8>,
}

impl Inflater {
    pub(crate) fn new() -> Self {
        Self {
            zlib: Decompress::new(true),
            dictionary: dictionary(),
        }
    }

    /// The name/value pairs of a compressed header block.
    pub(crate) fn headers(&mut self, block: &[u8]) -> Result<HashMap<String, String>, String> {
        let mut out: Vec<u8> = Vec::with_capacity(block.len() * 4 + 1024);
        let mut input = block;
        loop {
            if out.capacity() - out.len() < 1024 {
                out.reserve(16 * 1024);
            }
            let (before_in, before_out) = (self.zlib.total_in(), out.len());
            let result = self
                .zlib
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let used = usize::try_from(self.zlib.total_in() - before_in).unwrap_or(0);
            input = &input[used.min(input.len())..];
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(&self.dictionary)
                        .map_err(|e| format!("header dictionary: {e}"))?;
                    continue;
                }
                Err(e) => return Err(format!("header block: {e}")),
            }
            let produced = out.len() - before_out;
            if (input.is_empty() && out.len() < out.capacity()) || (used == 0 && produced == 0) {
                break;
            }
        }
        if out.len() > MAX_FRAME {
            return Err("header block too large".into());
        }
        parse_headers(&out)
    }
}

pub(crate) fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn parse_headers(block: &[u8]) -> Result<HashMap<String, String>, String> {
    let bad = || "malformed header block".to_owned();
    let count = be32(block, 0).ok_or_else(bad)?;
    let mut at = 4;
    let mut headers = HashMap::new();
    for _ in 0..count {
        let length = usize::try_from(be32(block, at).ok_or_else(bad)?).map_err(|_| bad())?;
        let name = block.get(at + 4..at + 4 + length).ok_or_else(bad)?;
        at += 4 + length;
        let length = usize::try_from(be32(block, at).ok_or_else(bad)?).map_err(|_| bad())?;
        let value = block.get(at + 4..at + 4 + length).ok_or_else(bad)?;
        at += 4 + length;
        headers.insert(
            String::from_utf8_lossy(name).to_lowercase(),
            String::from_utf8_lossy(value).into_owned(),
        );
    }
    Ok(headers)
}

/// The other direction's header blocks.
pub(crate) struct Deflater {
    zlib: Compress,
}

impl Deflater {
    pub(crate) fn new() -> Result<Self, String> {
        let mut zlib = Compress::new(Compression::default(), true);
        zlib.set_dictionary(&dictionary())
            .map_err(|e| format!("header dictionary: {e}"))?;
        Ok(Self { zlib })
    }

    /// An empty header block, compressed (flushed so the peer can read it whole).
    pub(crate) fn empty_block(&mut self) -> Result<Vec<u8>, String> {
        let plain = 0u32.to_be_bytes();
        let mut input = &plain[..];
        let mut out = Vec::with_capacity(256);
        loop {
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| e.to_string())?;
            let used = usize::try_from(self.zlib.total_in() - before).unwrap_or(0);
            input = &input[used.min(input.len())..];
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(256);
        }
    }
}

pub(crate) fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    let length = u32::try_from(body.len()).unwrap_or(0);
    frame.push(flags);
    frame.extend_from_slice(&length.to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

pub(crate) fn data(stream: u32, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.push(flags);
    let length = u32::try_from(body.len()).unwrap_or(0);
    frame.extend_from_slice(&length.to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

/// A task writing the frames sent to it, in order, then closing the connection once every
/// sender is gone.
pub(crate) fn frame_writer<W>(mut writer: W) -> (mpsc::Sender<Vec<u8>>, tokio::task::JoinHandle<()>)
where
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (out, mut frames) = mpsc::channel::<Vec<u8>>(64);
    let writing = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                return;
            }
            let _ = writer.flush().await;
        }
        let _ = writer.shutdown().await;
    });
    (out, writing)
}

/// A frame read from the connection.
pub(crate) enum Frame {
    /// Data for a stream (`fin`: its sender's last).
    Data {
        stream: u32,
        fin: bool,
        body: Vec<u8>,
    },
    /// A control frame: its type and body.
    Control { kind: u16, body: Vec<u8> },
}

/// The next frame, or none when the connection ends (or sends a frame too large).
pub(crate) async fn read_frame<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> Option<Frame> {
    let mut head = [0u8; 8];
    reader.read_exact(&mut head).await.ok()?;
    let flags = head[4];
    let length = usize::try_from(u32::from_be_bytes([0, head[5], head[6], head[7]])).ok()?;
    if length > MAX_FRAME {
        return None;
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await.ok()?;
    Some(if head[0] & 0x80 == 0 {
        Frame::Data {
            stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff,
            fin: flags & FLAG_FIN != 0,
            body,
        }
    } else {
        Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            body,
        }
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        let dictionary = dictionary();
        assert_eq!(dictionary.len(), 1423);
        assert_eq!(&dictionary[..11], b"\0\0\0\x07options");
        assert!(dictionary.ends_with(b"enq=0."));
    }

    #[test]
    fn header_blocks_round_trip_through_the_dictionary() {
        // A block the way a client writes one: compressed with the dictionary.
        let mut plain = 2u32.to_be_bytes().to_vec();
        for (k, v) in [("streamtype", "data"), ("port", "6379")] {
            plain.extend_from_slice(&u32::try_from(k.len()).unwrap_or(0).to_be_bytes());
            plain.extend_from_slice(k.as_bytes());
            plain.extend_from_slice(&u32::try_from(v.len()).unwrap_or(0).to_be_bytes());
            plain.extend_from_slice(v.as_bytes());
        }
        let mut compress = Compress::new(Compression::default(), true);
        compress.set_dictionary(&dictionary()).unwrap_or_default();
        let mut block = Vec::with_capacity(1024);
        let _ = compress.compress_vec(&plain, &mut block, FlushCompress::Sync);
        let headers = Inflater::new()
            .headers(&block)
            .unwrap_or_else(|e| panic!("{e} ({} bytes)", block.len()));
        assert_eq!(headers.get("streamtype").map(String::as_str), Some("data"));
        assert_eq!(headers.get("port").map(String::as_str), Some("6379"));
        let mut deflater = Deflater::new().unwrap_or_else(|e| panic!("{e}"));
        let reply = deflater.empty_block().unwrap_or_default();
        assert!(
            Inflater::new()
                .headers(&reply)
                .unwrap_or_default()
                .is_empty()
        );
    }
}

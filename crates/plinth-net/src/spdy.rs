//! SPDY/3.1 framing, as `kubectl port-forward` and exec over SPDY use it (the part
//! kubectl's `spdystream` speaks: SYN_STREAM, SYN_REPLY, DATA, RST_STREAM, PING, GOAWAY), with
//! the connection's zlib-compressed header blocks. The node agent serves its streams; this is
//! the byte-level part, apart so that it is fuzzed without the agent (`fuzz/`).

use std::collections::HashMap;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const VERSION: u16 = 3;
/// Control frame: a stream opened.
pub const SYN_STREAM: u16 = 1;
/// Control frame: a stream accepted.
pub const SYN_REPLY: u16 = 2;
/// Control frame: a stream reset.
pub const RST_STREAM: u16 = 3;
/// Control frame: a ping (answered with its body).
pub const PING: u16 = 6;
/// Control frame: the connection ends.
pub const GOAWAY: u16 = 7;
/// The flag of a stream's last frame.
pub const FLAG_FIN: u8 = 0x01;
/// The largest frame read (spdystream's limit).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

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
pub struct Inflater {
    zlib: Decompress,
    dictionary: Vec<u8>,
}

impl Default for Inflater {
    fn default() -> Self {
        Self::new()
    }
}

impl Inflater {
    /// A new connection's inflater (the dictionary is set when the stream asks for it).
    pub fn new() -> Self {
        Self {
            zlib: Decompress::new(true),
            dictionary: dictionary(),
        }
    }

    /// The name/value pairs of a compressed header block.
    pub fn headers(&mut self, block: &[u8]) -> Result<HashMap<String, String>, String> {
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

/// The big-endian `u32` at `at`, if the bytes reach that far.
pub fn be32(bytes: &[u8], at: usize) -> Option<u32> {
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
pub struct Deflater {
    zlib: Compress,
}

impl Deflater {
    /// A new connection's deflater, primed with the dictionary.
    ///
    /// # Errors
    /// zlib's, if the dictionary is refused.
    pub fn new() -> Result<Self, String> {
        let mut zlib = Compress::new(Compression::default(), true);
        zlib.set_dictionary(&dictionary())
            .map_err(|e| format!("header dictionary: {e}"))?;
        Ok(Self { zlib })
    }

    /// An empty header block, compressed (flushed so the peer can read it whole).
    pub fn empty_block(&mut self) -> Result<Vec<u8>, String> {
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

/// A control frame of `kind` with `flags` and `body`.
pub fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    let length = u32::try_from(body.len()).unwrap_or(0);
    frame.push(flags);
    frame.extend_from_slice(&length.to_be_bytes()[1..]);
    frame.extend_from_slice(body);
    frame
}

/// A data frame of `stream` with `flags` and `body`.
pub fn data(stream: u32, flags: u8, body: &[u8]) -> Vec<u8> {
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
pub fn frame_writer<W>(mut writer: W) -> (mpsc::Sender<Vec<u8>>, tokio::task::JoinHandle<()>)
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
pub enum Frame {
    /// Data for a stream (`fin`: its sender's last).
    Data {
        /// The stream.
        stream: u32,
        /// Whether it is the sender's last.
        fin: bool,
        /// The bytes.
        body: Vec<u8>,
    },
    /// A control frame: its type and body.
    Control {
        /// The frame type (`SYN_STREAM`, …).
        kind: u16,
        /// The frame's body.
        body: Vec<u8>,
    },
}

/// The next frame, or none when the connection ends (or sends a frame too large).
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> Option<Frame> {
    let mut head = [0u8; 8];
    reader.read_exact(&mut head).await.ok()?;
    let flags = head[4];
    let length = usize::try_from(u32::from_be_bytes([0, head[5], head[6], head[7]])).ok()?;
    if length > MAX_FRAME {
        return None;
    }
    // Grown as bytes arrive: a header announcing 16 MiB costs nothing until they do.
    let mut body = Vec::with_capacity(length.min(64 * 1024));
    (&mut *reader)
        .take(length as u64)
        .read_to_end(&mut body)
        .await
        .ok()?;
    if body.len() != length {
        return None;
    }
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

/// Reads `bytes` as one SPDY connection: every frame, and the header block of every control
/// frame that carries one (SYN_STREAM, SYN_REPLY, HEADERS) through the connection's zlib
/// stream, as the agent would. Returns how many frames and header blocks were read — the fuzz
/// target's entry.
pub fn read_connection(bytes: &[u8]) -> (usize, usize) {
    let mut reader = bytes;
    let mut inflater = Inflater::new();
    let (mut frames, mut blocks) = (0, 0);
    // Reading from memory never waits: each frame is ready at the first poll.
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        let read = std::pin::pin!(read_frame(&mut reader));
        let std::task::Poll::Ready(Some(frame)) = std::future::Future::poll(read, &mut context)
        else {
            break;
        };
        frames += 1;
        if let Frame::Control { kind, body } = frame {
            // SYN_STREAM's block follows stream id, associated id and priority; SYN_REPLY's
            // and HEADERS' the stream id.
            let at = match kind {
                SYN_STREAM => 10,
                SYN_REPLY | 8 => 4,
                _ => continue,
            };
            if let Some(block) = body.get(at..)
                && inflater.headers(block).is_ok()
            {
                blocks += 1;
            }
        }
    }
    (frames, blocks)
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

    #[test]
    fn the_fuzz_seed_is_a_whole_port_forward() {
        // fuzz/corpus/spdy/port-forward: two SYN_STREAMs (error and data streams of one
        // request), data, a PING, the data stream's FIN.
        let seed = include_bytes!("../../../fuzz/corpus/spdy/port-forward");
        assert_eq!(read_connection(seed), (5, 2));
    }
}

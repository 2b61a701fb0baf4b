//! Container logs in the CRI format the kubelet reads (`<RFC 3339 nano time> <stream> F
//! <line>`), one file per container run (`<restart count>.log`), and their reading with
//! `PodLogOptions`: `previous`, `sinceSeconds`/`sinceTime`, `tailLines`, `limitBytes`,
//! `timestamps`, `follow` (to the end of the run).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// Marks a run's log complete (the container exited): a follower stops there.
pub(crate) fn done_marker(log: &Path) -> PathBuf {
    log.with_extension("done")
}

/// `2006-01-02T15:04:05.999999999Z` for now.
pub(crate) fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let base = plinth_core::meta::format_time(seconds);
    format!("{}.{:09}Z", base.trim_end_matches('Z'), now.subsec_nanos())
}

/// Copies `from` into `file` line by line, as `stream`.
pub(crate) async fn copy(
    from: impl AsyncRead + Unpin,
    stream: &'static str,
    file: Arc<Mutex<tokio::fs::File>>,
) {
    let mut reader = BufReader::new(from);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => {
                // The stream ended: what is left is a partial line.
                if !line.is_empty() {
                    let _ = write_record(&file, stream, "P", &line).await;
                }
                return;
            }
            Ok(chunk) => chunk,
        };
        let room = MAX_LINE - line.len();
        let upto = chunk.len().min(room);
        let (taken, whole) = match chunk[..upto].iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (upto, false),
        };
        line.extend_from_slice(&chunk[..taken]);
        reader.consume(taken);
        if whole {
            line.pop();
            if write_record(&file, stream, "F", &line).await.is_err() {
                return;
            }
            line.clear();
        } else if line.len() >= MAX_LINE {
            // A long line is cut into partial records, as the kubelet cuts it.
            if write_record(&file, stream, "P", &line).await.is_err() {
                return;
            }
            line.clear();
        }
    }
}

/// The longest record; longer lines are split (`P` records, then the `F` one).
const MAX_LINE: usize = 16 * 1024;

async fn write_record(
    file: &Mutex<tokio::fs::File>,
    stream: &str,
    tag: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let mut record = format!("{} {stream} {tag} ", timestamp()).into_bytes();
    record.extend_from_slice(body);
    record.push(b'\n');
    let mut file = file.lock().await;
    file.write_all(&record).await?;
    file.flush().await
}

/// What a reader asked for.
#[derive(Debug, Default, Clone)]
pub(crate) struct Options {
    pub(crate) follow: bool,
    pub(crate) timestamps: bool,
    pub(crate) tail_lines: Option<usize>,
    pub(crate) limit_bytes: Option<usize>,
    /// Lines before this time (RFC 3339) are skipped.
    pub(crate) since: Option<String>,
}

/// One line of a CRI log: its time and its text.
fn parse(line: &str) -> Option<(&str, &str, bool)> {
    let (time, rest) = line.split_once(' ')?;
    let (_stream, rest) = rest.split_once(' ')?;
    let (tag, text) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((time, text, tag == "F"))
}

fn render(time: &str, text: &str, full: bool, options: &Options) -> String {
    let newline = if full { "\n" } else { "" };
    if options.timestamps {
        format!("{time} {text}{newline}")
    } else {
        format!("{text}{newline}")
    }
}

/// The lines of `log` as the options select them, then (following) the lines that come
/// until the run ends; sent in chunks through `out`.
pub(crate) async fn read(
    log: PathBuf,
    options: Options,
    out: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>,
) {
    // Bytes, not text: a process may write anything (shown with replacement characters).
    let raw = tokio::fs::read(&log).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    let mut lines: Vec<&str> = text.lines().collect();
    if let Some(since) = &options.since {
        lines.retain(|l| parse(l).is_some_and(|(t, _, _)| t >= since.as_str()));
    }
    if let Some(tail) = options.tail_lines {
        let skip = lines.len().saturating_sub(tail);
        lines.drain(..skip);
    }
    let mut budget = options.limit_bytes.unwrap_or(usize::MAX);
    let send = |chunk: String, budget: &mut usize| -> Option<bytes::Bytes> {
        if *budget == 0 {
            return None;
        }
        let bytes = chunk.into_bytes();
        let take = bytes.len().min(*budget);
        *budget -= take;
        Some(bytes::Bytes::from(bytes[..take].to_vec()))
    };
    let mut chunk = String::new();
    for line in &lines {
        if let Some((time, body, full)) = parse(line) {
            chunk.push_str(&render(time, body, full, &options));
        }
    }
    if let Some(bytes) = send(chunk, &mut budget)
        && out.send(Ok(bytes)).await.is_err()
    {
        return;
    }
    if !options.follow {
        return;
    }
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::channel::<String>(64);
    tokio::spawn(follow(log, raw.len(), lines_tx));
    while let Some(line) = lines_rx.recv().await {
        let Some((time, body, full)) = parse(&line) else {
            continue;
        };
        match send(render(time, body, full, &options), &mut budget) {
            Some(bytes) => {
                if out.send(Ok(bytes)).await.is_err() {
                    return;
                }
            }
            None => return,
        }
    }
}

/// The whole lines written to `log` after byte `start`, as they are stored, until the run
/// ends or the receiver goes (a line being written is sent once it is whole).
pub(crate) async fn follow(log: PathBuf, start: usize, out: tokio::sync::mpsc::Sender<String>) {
    let mut offset = start;
    loop {
        let finished = done_marker(&log).exists();
        let now = tokio::fs::read(&log).await.unwrap_or_default();
        if now.len() > offset {
            let fresh = &now[offset..];
            let whole = fresh.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            for line in String::from_utf8_lossy(&fresh[..whole]).lines() {
                if out.send(line.to_owned()).await.is_err() {
                    return;
                }
            }
            offset += whole;
        }
        if finished || out.is_closed() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The text of the last `lines` lines of `log` (without times), cut to its first `bytes`
/// bytes: the kubelet's termination message from a failed container's log.
pub(crate) fn tail_text(log: &Path, lines: usize, bytes: usize) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return String::new();
    };
    let records: Vec<_> = text.lines().filter_map(parse).collect();
    let start = records.len().saturating_sub(lines);
    let mut out = String::new();
    for (_, line, full) in &records[start..] {
        out.push_str(line);
        if *full {
            out.push('\n');
        }
    }
    if out.len() > bytes {
        let mut cut = bytes;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// A stored line's stream and text (with its newline when the line was whole).
pub(crate) fn stream_and_text(line: &str) -> (String, String) {
    let mut parts = line.splitn(4, ' ');
    let (_, stream, tag, text) = (parts.next(), parts.next(), parts.next(), parts.next());
    let newline = if tag == Some("F") { "\n" } else { "" };
    (
        stream.unwrap_or("stdout").to_owned(),
        format!("{}{newline}", text.unwrap_or("")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn long_lines_are_cut_into_partial_records() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("0.log");
        let file = tokio::fs::File::create(&path)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut input = vec![b'a'; 40_000];
        input.extend_from_slice(b"\nshort\ntail");
        copy(input.as_slice(), "stdout", Arc::new(Mutex::new(file))).await;
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let records: Vec<(&str, &str, bool)> = text.lines().filter_map(parse).collect();
        let tags: Vec<bool> = records.iter().map(|r| r.2).collect();
        assert_eq!(tags, [false, false, true, true, false]);
        let joined: String = records[..3].iter().map(|r| r.1).collect();
        assert_eq!(joined.len(), 40_000);
        assert_eq!(records[3].1, "short");
        assert_eq!(records[4].1, "tail");
    }

    #[test]
    fn cri_lines_parse() {
        let (time, text, full) =
            parse("2026-12-01T10:00:00.000000001Z stdout F hello world").unwrap_or_default();
        assert_eq!(
            (time, text, full),
            ("2026-12-01T10:00:00.000000001Z", "hello world", true)
        );
        let (_, text, full) = parse("2026-12-01T10:00:00.1Z stderr P part").unwrap_or_default();
        assert_eq!((text, full), ("part", false));
        assert!(timestamp().ends_with('Z') && timestamp().len() == 30);
    }
}

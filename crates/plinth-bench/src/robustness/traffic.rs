//! The traffic of a robustness run, and its record: clients calling create, conditional
//! update, conditional delete, get and list on a few ConfigMaps (some hot), and watchers
//! following them from revisions, each call and event written down for the checker.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use plinth_check::{Call, Event, Op, Outcome, Rev, Version, Watch, WatchEnd};
use serde_json::{Value, json};
use tokio::sync::watch;

/// How long a call may take before its outcome counts as unknown.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The label every object of the run carries (its value is the run's).
pub(crate) const LABEL: &str = "plinth-robustness";

/// Where the traffic goes and the run's clock.
pub(crate) struct Target {
    pub(crate) namespace: String,
    pub(crate) run: String,
    clock: Instant,
}

/// Everything recorded so far.
#[derive(Default)]
pub(crate) struct Record {
    pub(crate) calls: Mutex<Vec<Call>>,
    pub(crate) watches: Mutex<Vec<Watch>>,
}

impl Record {
    pub(crate) fn call(&self, call: Call) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    fn watch(&self, watch: Watch) {
        if let Ok(mut watches) = self.watches.lock() {
            watches.push(watch);
        }
    }
}

/// A small deterministic generator (xorshift), so a run's choices follow from its seed.
pub(crate) struct Dice(u64);

impl Dice {
    pub(crate) fn new(seed: u64) -> Dice {
        Dice(seed.max(1))
    }

    pub(crate) fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides.max(1)
    }
}

impl Target {
    pub(crate) fn new(namespace: &str, run: &str) -> Target {
        Target {
            namespace: namespace.to_owned(),
            run: run.to_owned(),
            clock: Instant::now(),
        }
    }

    /// Microseconds since the run began.
    pub(crate) fn now(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    fn path(&self, name: Option<&str>) -> String {
        let base = format!("/api/v1/namespaces/{}/configmaps", self.namespace);
        match name {
            Some(name) => format!("{base}/{name}"),
            None => base,
        }
    }

    fn selector(&self) -> String {
        format!("labelSelector={LABEL}%3D{}", self.run)
    }

    fn object(&self, key: &str, value: &str, rev: Option<Rev>) -> Value {
        let mut object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": key, "labels": {LABEL: self.run}},
            "data": {"v": value},
        });
        if let Some(rev) = rev {
            object["metadata"]["resourceVersion"] = json!(rev.to_string());
        }
        object
    }

    /// Makes `op`'s request and says how it ended.
    pub(crate) async fn call(&self, client: &Client, op: &Op) -> Outcome {
        let (method, path, body) = match op {
            Op::Create { key, value } => (
                Method::POST,
                self.path(None),
                Some(self.object(key, value, None)),
            ),
            Op::Update { key, value, expect } => (
                Method::PUT,
                self.path(Some(key)),
                Some(self.object(key, value, Some(*expect))),
            ),
            Op::Delete { key, expect } => (
                Method::DELETE,
                self.path(Some(key)),
                Some(json!({"apiVersion": "v1", "kind": "DeleteOptions",
                    "preconditions": {"resourceVersion": expect.to_string()}})),
            ),
            Op::Get { key } => (Method::GET, self.path(Some(key)), None),
            Op::List => (
                Method::GET,
                format!("{}?{}", self.path(None), self.selector()),
                None,
            ),
        };
        let (status, answer) = match request(client, method, &path, body).await {
            Ok(reply) => reply,
            Err(why) => return Outcome::Unknown { why },
        };
        if status.is_client_error() {
            return match (op, status) {
                (Op::Get { .. }, StatusCode::NOT_FOUND) => Outcome::Missing,
                (Op::Get { .. } | Op::List, _) => Outcome::Unknown {
                    why: format!("{status}"),
                },
                _ => Outcome::Refused {
                    code: status.as_u16(),
                },
            };
        }
        if !status.is_success() {
            return Outcome::Unknown {
                why: format!("{status}: {}", answer["message"].as_str().unwrap_or("")),
            };
        }
        let unreadable = || Outcome::Unknown {
            why: format!("an answer without a resourceVersion: {answer}"),
        };
        match op {
            Op::Create { .. } | Op::Update { .. } => {
                rev_of(&answer).map_or_else(unreadable, |rev| Outcome::Written { rev })
            }
            Op::Delete { .. } => Outcome::Deleted,
            Op::Get { .. } => version(&answer).map_or_else(unreadable, Outcome::Found),
            Op::List => {
                let Some(rev) = rev_of(&answer) else {
                    return unreadable();
                };
                let items = answer["items"].as_array().cloned().unwrap_or_default();
                let items: Option<BTreeMap<String, Version>> = items
                    .iter()
                    .map(|item| {
                        Some((
                            item["metadata"]["name"].as_str()?.to_owned(),
                            version(item)?,
                        ))
                    })
                    .collect();
                items.map_or_else(unreadable, |items| Outcome::Listed { rev, items })
            }
        }
    }
}

impl Target {
    /// Makes `op`'s call as client `id`, writes it into `record` with its start and end, and
    /// returns how it ended.
    pub(crate) async fn recorded(
        &self,
        client: &Client,
        id: u32,
        op: Op,
        record: &Record,
    ) -> Outcome {
        let start = self.now();
        let outcome = self.call(client, &op).await;
        record.call(Call {
            client: id,
            op,
            start,
            end: self.now(),
            outcome: outcome.clone(),
        });
        outcome
    }
}

fn rev_of(object: &Value) -> Option<Rev> {
    object["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

fn version(object: &Value) -> Option<Version> {
    Some(Version {
        value: object["data"]["v"].as_str()?.to_owned(),
        rev: rev_of(object)?,
    })
}

async fn request(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), String> {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .map_err(|e| e.to_string())?;
    let answer = async {
        let response = client.send(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    };
    tokio::time::timeout(CALL_TIMEOUT, answer)
        .await
        .map_err(|_| format!("no answer in {CALL_TIMEOUT:?}"))?
}

/// One client: random calls on `keys` keys (half of them on the first three) until `stop`.
/// Updates and deletes are conditional on the last version this client saw of the key.
pub(crate) async fn client(
    id: u32,
    client: Client,
    target: Arc<Target>,
    keys: u64,
    stop: Arc<AtomicBool>,
    record: Arc<Record>,
) {
    let mut dice = Dice::new(u64::from(id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut seen: HashMap<String, Rev> = HashMap::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = match dice.roll(2) {
            0 => format!("key-{}", dice.roll(keys.min(3))),
            _ => format!("key-{}", dice.roll(keys)),
        };
        n += 1;
        let value = format!("c{id}-{n}");
        let op = match (dice.roll(100), seen.get(&key)) {
            (0..30, _) => Op::Get { key },
            (30..40, _) => Op::List,
            (40..60, _) | (_, None) => Op::Create { key, value },
            (60..85, Some(&expect)) => Op::Update { key, value, expect },
            (_, Some(&expect)) => Op::Delete { key, expect },
        };
        let key = op.key().unwrap_or_default().to_owned();
        let outcome = target.recorded(&client, id, op, &record).await;
        match &outcome {
            Outcome::Written { rev } => {
                seen.insert(key, *rev);
            }
            Outcome::Found(version) => {
                seen.insert(key, version.rev);
            }
            Outcome::Missing | Outcome::Deleted => {
                seen.remove(&key);
            }
            Outcome::Listed { items, .. } => {
                for (key, version) in items {
                    seen.insert(key.clone(), version.rev);
                }
            }
            _ => {}
        }
        let failed = matches!(outcome, Outcome::Unknown { .. });
        if failed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Where the run is, as watchers are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Traffic flows.
    Running,
    /// The run is over and its last write is at this revision: deliver it, then stop.
    CatchUp(Rev),
    /// Stop now (those not caught up by now end as they are).
    Stop,
}

/// The receiving end of the run's [`Phase`].
pub(crate) type Signal = watch::Receiver<Phase>;

/// A watcher that follows the run's ConfigMaps from `from`: each connection is one recorded
/// [`Watch`]; a broken one is resumed from the last revision it delivered, one ended by 410
/// from a fresh list's. It stops once it has caught up with the run's last write, when told
/// to stop, or — with `lasting` — after that long.
pub(crate) async fn watcher(
    client: Client,
    target: Arc<Target>,
    mut from: Rev,
    mut signal: Signal,
    lasting: Option<Duration>,
    record: Arc<Record>,
) {
    let deadline = lasting.map(|l| tokio::time::Instant::now() + l);
    loop {
        let (events, end) = watch_once(&client, &target, from, &mut signal, deadline).await;
        let delivered = events.iter().map(Event::rev).max().unwrap_or(from);
        let phase = *signal.borrow();
        let over = matches!(end, WatchEnd::CaughtUp { .. })
            || phase == Phase::Stop
            || (lasting.is_some() && phase != Phase::Running)
            || deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
        let gone = end == WatchEnd::Gone;
        if !events.is_empty() || !matches!(end, WatchEnd::Broken { .. }) {
            record.watch(Watch { from, events, end });
        }
        if over {
            return;
        }
        from = delivered;
        if gone && let Outcome::Listed { rev, .. } = target.call(&client, &Op::List).await {
            from = rev;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One watch connection, until it breaks, the server ends it, `deadline` passes, the run
/// says stop, or it has delivered the run's last write.
async fn watch_once(
    client: &Client,
    target: &Target,
    from: Rev,
    signal: &mut Signal,
    deadline: Option<tokio::time::Instant>,
) -> (Vec<Event>, WatchEnd) {
    let mut events = Vec::new();
    let path = format!(
        "{}?watch=1&allowWatchBookmarks=true&resourceVersion={from}&{}",
        target.path(None),
        target.selector()
    );
    let deadline =
        deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
    let Ok(request) = Request::builder().uri(&path).body(Body::from(Vec::new())) else {
        return (events, broken("an unbuildable request"));
    };
    let response = tokio::select! {
        response = client.send(request) => response,
        () = tokio::time::sleep_until(deadline) => return (events, broken("stopped")),
        _ = signal.wait_for(|p| *p == Phase::Stop) => return (events, broken("stopped")),
    };
    let response = match response {
        Ok(response) if response.status().is_success() => response,
        Ok(response) if response.status() == StatusCode::GONE => return (events, WatchEnd::Gone),
        Ok(response) => return (events, broken(&response.status().to_string())),
        Err(e) => return (events, broken(&e.to_string())),
    };
    let mut body = response.into_body().into_data_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut last = from;
    loop {
        match *signal.borrow_and_update() {
            Phase::CatchUp(rev) if last >= rev => return (events, WatchEnd::CaughtUp { rev }),
            Phase::Stop => return (events, broken("stopped")),
            _ => {}
        }
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            _ = signal.changed() => continue,
            () = tokio::time::sleep_until(deadline) => return (events, broken("stopped")),
        };
        let bytes = match chunk {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => return (events, broken(&e.to_string())),
            None => return (events, broken("closed by the server")),
        };
        pending.extend_from_slice(&bytes);
        while let Some(at) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=at).collect();
            let Ok(frame) = serde_json::from_slice::<Value>(&line) else {
                return (events, broken("an unreadable event"));
            };
            match parse(&frame) {
                Ok(event) => {
                    last = last.max(event.rev());
                    events.push(event);
                }
                Err(end) => return (events, end),
            }
        }
    }
}

fn broken(why: &str) -> WatchEnd {
    WatchEnd::Broken {
        why: why.to_owned(),
    }
}

/// A watch frame as an event, or the end an `ERROR` frame means.
fn parse(frame: &Value) -> Result<Event, WatchEnd> {
    let object = &frame["object"];
    let kind = frame["type"].as_str().unwrap_or("");
    if kind == "ERROR" {
        return Err(match object["code"].as_u64() {
            Some(410) => WatchEnd::Gone,
            _ => broken(&format!("ERROR {object}")),
        });
    }
    let rev = rev_of(object).ok_or_else(|| broken(&format!("no resourceVersion: {frame}")))?;
    if kind == "BOOKMARK" {
        return Ok(Event::Bookmark { rev });
    }
    let key = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let value = object["data"]["v"].as_str().unwrap_or("").to_owned();
    match kind {
        "ADDED" => Ok(Event::Added { key, value, rev }),
        "MODIFIED" => Ok(Event::Modified { key, value, rev }),
        "DELETED" => Ok(Event::Deleted { key, value, rev }),
        _ => Err(broken(&format!("an event of type {kind:?}"))),
    }
}

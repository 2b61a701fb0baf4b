//! A rate-limited, de-duplicating work queue (client-go's `workqueue`), shared by
//! `plinth-runtime`'s controllers and Plinth's built-in controllers.
//!
//! # Guarantees
//! - A key waits in the queue at most once, however often it is added.
//! - A key is handed to one worker at a time: added again while being processed, it is queued
//!   once more when that worker calls [`WorkQueue::done`] — so a change during a reconcile is
//!   never lost, and never processed concurrently.
//! - [`WorkQueue::add_rate_limited`] delays a key by `5 ms × 2^(failures-1)` (at most 1000 s),
//!   and never faster than an overall 10 keys/s after a burst of 100: client-go's
//!   `DefaultControllerRateLimiter`. [`WorkQueue::forget`] resets the key's failures.
//! - After [`WorkQueue::shut_down`], [`WorkQueue::get`] returns what is left, then `None`;
//!   [`WorkQueue::shut_down_with_drain`] also waits for keys in flight to be done.
//!
//! Time is tokio's, so tests run on a paused clock.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let queue = plinth_workqueue::WorkQueue::new();
//! queue.add("a");
//! queue.add("a"); // waiting already: one entry
//! assert_eq!(queue.len(), 1);
//! let key = queue.get().await.unwrap();
//! queue.add("a"); // being processed: queued again once it is done
//! assert_eq!(queue.len(), 0);
//! queue.done(&key);
//! assert_eq!(queue.len(), 1);
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The buckets of client-go's workqueue duration histograms (`ExponentialBuckets(10e-9, 10,
/// 10)`: 10 ns to 10 s).
pub const QUEUE_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// Per-key exponential backoff combined with an overall token bucket.
#[derive(Debug)]
pub struct RateLimiter<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
    /// Tokens per second and bucket size.
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl<K: Eq + Hash + Clone> RateLimiter<K> {
    /// client-go's default: 5 ms doubling to 1000 s per key, 10 keys/s with a burst of 100.
    pub fn default_controller() -> Self {
        Self::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
            10.0,
            100,
        )
    }

    /// A limiter with the given per-key backoff and overall rate.
    pub fn new(base: Duration, max: Duration, per_second: f64, burst: u32) -> Self {
        Self {
            base,
            max,
            failures: HashMap::new(),
            rate: per_second,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
        }
    }

    /// How long `key` must wait now (and counts one more failure for it).
    pub fn when(&mut self, key: &K, now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exponent = (*failures).min(40);
        *failures += 1;
        let backoff = self
            .base
            .checked_mul(1u32 << exponent.min(31))
            .map_or(self.max, |d| d.min(self.max));
        backoff.max(self.reserve(now))
    }

    /// Takes a token from the bucket; returns how long until it is really available.
    fn reserve(&mut self, now: Instant) -> Duration {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// Forgets `key`'s failures.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// How many times `key` has been rate-limited since it was last forgotten.
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys waiting to be processed (in `queue`, or to be queued when their worker is done).
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed adds: (when, sequence, key). An entry whose time is not the key's in
    /// `delayed_until` is stale (the key was asked for earlier since) and is skipped.
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    /// When each delayed key is due: the earliest time it was asked for (client-go's delaying
    /// queue keeps one entry per key).
    delayed_until: HashMap<K, Instant>,
    sequence: u64,
    shutting_down: bool,
    limiter: RateLimiter<K>,
    /// When each waiting key was queued (for the queue-duration metric).
    queued_at: HashMap<K, Instant>,
    adds: u64,
    retries: u64,
    /// Seconds keys waited, and how many.
    waited: (f64, u64),
    /// How many waits were at most each of [`QUEUE_BUCKETS`].
    waited_buckets: [u64; QUEUE_BUCKETS.len()],
}

/// Counters of a queue, named after client-go's workqueue metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// `workqueue_depth`.
    pub depth: usize,
    /// `workqueue_adds_total`.
    pub adds: u64,
    /// `workqueue_retries_total`.
    pub retries: u64,
    /// `workqueue_queue_duration_seconds` sum and count.
    pub queue_seconds: (f64, u64),
    /// `workqueue_queue_duration_seconds` cumulative bucket counts, by [`QUEUE_BUCKETS`].
    pub queue_buckets: [u64; QUEUE_BUCKETS.len()],
    /// Keys being processed.
    pub in_flight: usize,
}

/// A work queue of keys; clones share the queue.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    ready: Arc<Notify>,
    idle: Arc<Notify>,
    delayed_changed: Arc<Notify>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            ready: self.ready.clone(),
            idle: self.idle.clone(),
            delayed_changed: self.delayed_changed.clone(),
        }
    }
}

impl<K> std::fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").finish_non_exhaustive()
    }
}

impl<K: Eq + Hash + Clone + Ord + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone + Ord + Send + 'static> WorkQueue<K> {
    /// A queue with client-go's default rate limiter. Must be called within a tokio runtime:
    /// a task moves delayed keys into the queue when their time comes, until
    /// [`WorkQueue::shut_down`].
    pub fn new() -> Self {
        Self::with_rate_limiter(RateLimiter::default_controller())
    }

    /// A queue with the given rate limiter.
    pub fn with_rate_limiter(limiter: RateLimiter<K>) -> Self {
        let queue = Self {
            state: Arc::new(Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: BinaryHeap::new(),
                delayed_until: HashMap::new(),
                sequence: 0,
                shutting_down: false,
                limiter,
                queued_at: HashMap::new(),
                adds: 0,
                retries: 0,
                waited: (0.0, 0),
                waited_buckets: [0; QUEUE_BUCKETS.len()],
            })),
            ready: Arc::new(Notify::new()),
            idle: Arc::new(Notify::new()),
            delayed_changed: Arc::new(Notify::new()),
        };
        tokio::spawn(queue.clone().run_delays());
        queue
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `key` (once, however often it is added while waiting).
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.shutting_down || !state.dirty.insert(key.clone()) {
            return;
        }
        state.adds += 1;
        if state.processing.contains(&key) {
            return;
        }
        state.queued_at.insert(key.clone(), Instant::now());
        state.queue.push_back(key);
        drop(state);
        self.ready.notify_one();
    }

    /// Queues `key` after `delay`. A key already waiting to be queued keeps the earlier of its
    /// two times: ten `add_after`s of one key queue it once.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        let at = Instant::now() + delay;
        if state.delayed_until.get(&key).is_some_and(|due| *due <= at) {
            return;
        }
        state.delayed_until.insert(key.clone(), at);
        state.sequence += 1;
        let sequence = state.sequence;
        state.delayed.push(Reverse((at, sequence, key)));
        drop(state);
        self.delayed_changed.notify_one();
    }

    /// Queues `key` after its rate-limited backoff (a failed reconcile).
    pub fn add_rate_limited(&self, key: K) {
        let delay = {
            let mut state = self.lock();
            state.retries += 1;
            state.limiter.when(&key, Instant::now())
        };
        self.add_after(key, delay);
    }

    /// Forgets `key`'s failures (a successful reconcile).
    pub fn forget(&self, key: &K) {
        self.lock().limiter.forget(key);
    }

    /// How many times `key` has been retried since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().limiter.failures(key)
    }

    /// Keys waiting (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue's counters.
    pub fn metrics(&self) -> Metrics {
        let state = self.lock();
        Metrics {
            depth: state.queue.len(),
            adds: state.adds,
            retries: state.retries,
            queue_seconds: state.waited,
            queue_buckets: state.waited_buckets,
            in_flight: state.processing.len(),
        }
    }

    /// The next key to process, waiting for one; `None` once the queue is shut down and empty.
    /// Call [`WorkQueue::done`] with it when finished.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.ready.notified();
            {
                let mut state = self.lock();
                if let Some(key) = state.queue.pop_front() {
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone());
                    if let Some(at) = state.queued_at.remove(&key) {
                        let seconds = at.elapsed().as_secs_f64();
                        state.waited.0 += seconds;
                        state.waited.1 += 1;
                        for (count, bound) in state.waited_buckets.iter_mut().zip(QUEUE_BUCKETS) {
                            if seconds <= bound {
                                *count += 1;
                            }
                        }
                    }
                    let more = !state.queue.is_empty();
                    drop(state);
                    if more {
                        self.ready.notify_one();
                    }
                    return Some(key);
                }
                if state.shutting_down {
                    drop(state);
                    // Let other waiting workers see the shutdown too.
                    self.ready.notify_one();
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        state.processing.remove(key);
        let requeue = state.dirty.contains(key);
        if requeue {
            state.queued_at.insert(key.clone(), Instant::now());
            state.queue.push_back(key.clone());
        }
        let idle = state.processing.is_empty();
        drop(state);
        if requeue {
            self.ready.notify_one();
        }
        if idle {
            self.idle.notify_waiters();
        }
    }

    /// Stops taking keys; waiting workers get what is left, then `None`.
    pub fn shut_down(&self) {
        let mut state = self.lock();
        state.shutting_down = true;
        state.delayed.clear();
        state.delayed_until.clear();
        drop(state);
        self.ready.notify_waiters();
        self.ready.notify_one();
        self.delayed_changed.notify_one();
    }

    /// Shuts down, then waits until every key in flight is done.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let idle = self.idle.notified();
            if self.lock().processing.is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Moves delayed keys into the queue when their time comes.
    async fn run_delays(self) {
        loop {
            let changed = self.delayed_changed.notified();
            let next = {
                let mut state = self.lock();
                if state.shutting_down {
                    return;
                }
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some(Reverse((at, _, _))) = state.delayed.peek() {
                    if *at > now {
                        break;
                    }
                    if let Some(Reverse((at, _, key))) = state.delayed.pop()
                        && state.delayed_until.get(&key) == Some(&at)
                    {
                        state.delayed_until.remove(&key);
                        due.push(key);
                    }
                }
                let next = state.delayed.peek().map(|Reverse((at, _, _))| *at);
                drop(state);
                for key in due {
                    self.add(key);
                }
                next
            };
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_of_one_key_keep_the_earliest_time() {
        let queue: WorkQueue<String> = WorkQueue::new();
        for seconds in [30, 10, 20, 10, 60, 15, 40, 25, 50, 35] {
            queue.add_after("k".to_owned(), Duration::from_secs(seconds));
        }
        settle().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        settle().await;
        assert!(queue.is_empty(), "not before the earliest time");
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(queue.len(), 1);
        let key = queue.get().await.unwrap();
        queue.done(&key);
        // The later requests were folded into the earliest: nothing else comes.
        tokio::time::advance(Duration::from_secs(120)).await;
        settle().await;
        assert!(queue.is_empty(), "ten RequeueAfters gave one reconcile");
        assert_eq!(queue.metrics().adds, 1);
        // A later time after the key was delivered is a new request.
        queue.add_after("k".to_owned(), Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(5)).await;
        settle().await;
        assert_eq!(queue.len(), 1);
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_deduplicated_and_never_processed_twice_at_once() {
        let queue = WorkQueue::new();
        for _ in 0..3 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get().await, Some("a"));
        // Added while processing: not handed to another worker...
        queue.add("a");
        queue.add("a");
        assert_eq!(queue.get().await, Some("b"));
        assert!(queue.is_empty());
        // ...but queued once more when its worker is done.
        queue.done(&"a");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("a"));
        queue.done(&"a");
        queue.done(&"b");
        assert!(queue.is_empty());
        assert_eq!(queue.metrics().adds, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let mut limiter = RateLimiter::default_controller();
        let now = Instant::now();
        let delays: Vec<Duration> = (0..5).map(|_| limiter.when(&"k", now)).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40, 80].map(Duration::from_millis).to_vec()
        );
        for _ in 0..40 {
            limiter.when(&"k", now + Duration::from_secs(3600));
        }
        assert_eq!(
            limiter.when(&"k", now + Duration::from_secs(7200)),
            Duration::from_secs(1000)
        );
        assert_eq!(limiter.failures(&"k"), 46);
        limiter.forget(&"k");
        assert_eq!(
            limiter.when(&"k", now + Duration::from_secs(7200)),
            Duration::from_millis(5)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_token_bucket_limits_all_keys_together() {
        let mut limiter: RateLimiter<u32> = RateLimiter::default_controller();
        let now = Instant::now();
        // A burst of 100 goes at the per-key backoff; then one every 100 ms.
        for key in 0..100 {
            assert_eq!(limiter.when(&key, now), Duration::from_millis(5));
        }
        assert_eq!(limiter.when(&100, now), Duration::from_millis(100));
        assert_eq!(limiter.when(&101, now), Duration::from_millis(200));
        // Tokens come back with time.
        assert_eq!(
            limiter.when(&102, now + Duration::from_secs(10)),
            Duration::from_millis(5)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_and_rate_limited_keys_arrive_on_time() {
        let queue = WorkQueue::new();
        queue.add_after("later", Duration::from_secs(2));
        queue.add_rate_limited("retry");
        settle().await;
        assert!(queue.is_empty());
        tokio::time::advance(Duration::from_millis(6)).await;
        settle().await;
        assert_eq!(queue.get().await, Some("retry"));
        queue.done(&"retry");
        assert_eq!(queue.num_requeues(&"retry"), 1);
        queue.add_rate_limited("retry");
        tokio::time::advance(Duration::from_millis(6)).await;
        settle().await;
        assert!(queue.is_empty(), "the second failure waits 10 ms");
        tokio::time::advance(Duration::from_millis(5)).await;
        settle().await;
        assert_eq!(queue.len(), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        settle().await;
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.metrics().retries, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_hands_out_what_is_left_then_drains_work_in_flight() {
        let queue = WorkQueue::new();
        queue.add(1);
        queue.add(2);
        let first = queue.get().await;
        assert_eq!(first, Some(1));
        let draining = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.shut_down_with_drain().await })
        };
        settle().await;
        assert!(!draining.is_finished(), "key 1 is still in flight");
        queue.add(3);
        assert_eq!(
            queue.get().await,
            Some(2),
            "what was queued is still handed out"
        );
        assert_eq!(
            queue.get().await,
            None,
            "nothing new is taken after shutdown"
        );
        queue.done(&2);
        settle().await;
        assert!(!draining.is_finished());
        queue.done(&1);
        draining.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn many_workers_share_the_queue() {
        let queue: WorkQueue<u32> = WorkQueue::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (queue, seen) = (queue.clone(), seen.clone());
            workers.push(tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    seen.lock().unwrap().push(key);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    queue.done(&key);
                }
            }));
        }
        for key in 0..20 {
            queue.add(key);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        queue.shut_down_with_drain().await;
        for worker in workers {
            worker.await.unwrap();
        }
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }
}

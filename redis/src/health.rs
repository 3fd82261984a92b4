//! [`Health`] and [`Stats`]: what a node's link to Redis is doing, and
//! what its flushes have done.

use crate::error::ClusterError;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The state of a node's connection to Redis. On a Redis Cluster the node
/// has a connection a group (to the master of the group's slot): the state
/// is the worst of the groups' (see [`Health::groups_disconnected`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// No connection attempt has succeeded yet.
    NeverConnected,
    /// The last request succeeded (on a cluster: every group's that made
    /// one).
    Connected,
    /// The last attempt failed (on a cluster: some group's); it is retried
    /// with backoff. Adds are held locally (see [`Health::pending_counts`]).
    Disconnected,
}

/// A snapshot of a node's health ([`ClusterWindows::health`](crate::ClusterWindows::health)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Health {
    /// The connection's state.
    pub state: LinkState,
    /// Failed attempts since the last success (on a cluster: the most of
    /// any group).
    pub consecutive_failures: u64,
    /// Groups whose last attempt failed with a transient error (0 or 1 on
    /// a single instance; on a cluster, the groups served by a master that
    /// is unreachable now).
    pub groups_disconnected: usize,
    /// Groups whose master had fewer replicas connected than
    /// `wait_for_replicas` asks for at the group's last attempt
    /// ([`ClusterError::TooFewReplicas`]): held back until enough are
    /// connected (after a failover, until a replica rejoins the promoted
    /// master). Always 0 without `wait_for_replicas`.
    pub replicas_short: usize,
    /// The last error (kept after a success, for the record).
    pub last_error: Option<ClusterError>,
    /// Time since the last successful flush (`None`: never).
    pub since_last_flush: Option<Duration>,
    /// Counts taken from the local windows and not yet acknowledged by
    /// Redis (the local windows' own unflushed counts are not included).
    pub pending_counts: u64,
    /// Keys staged for the next batch.
    pub staged_keys: usize,
    /// Whether a batch awaits its acknowledgement (it is resent as is; the
    /// next may be cut, unsent, behind it).
    pub batch_in_flight: bool,
    /// The bound on the node's error against the server's time (`None`:
    /// not sampled yet).
    pub time_uncertainty: Option<Duration>,
}

/// Counters of a node's flushes since it was built
/// ([`ClusterWindows::stats`](crate::ClusterWindows::stats)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Flushes that ended with nothing left to send (on a cluster, one a
    /// group; not a group that had nothing to send and skipped its round
    /// trip).
    pub flushes: u64,
    /// Flushes that failed (their counts are held and sent again).
    pub flush_errors: u64,
    /// Batches Redis applied.
    pub batches_applied: u64,
    /// Batches Redis had already applied when they were resent (their
    /// first reply was lost): acknowledged, not applied again.
    pub batches_replayed: u64,
    /// Sends of a batch after its first.
    pub resends: u64,
    /// `(key, slice)` deltas acknowledged.
    pub key_deltas_flushed: u64,
    /// Counts acknowledged (applied once, replays included once).
    pub counts_flushed: u64,
    /// Counts dropped because their slice left the window before Redis had
    /// them: by the node while held (e.g. during an outage) or by the
    /// script (a batch that arrived late). No window includes them.
    pub dropped_old: u64,
    /// Counts dropped because the staging buffer held its maximum of keys.
    pub dropped_full: u64,
    /// Connections opened.
    pub connects: u64,
    /// Hot crossings this node reported (each crossing is reported by
    /// exactly one node of the cluster).
    pub hot_crossings: u64,
    /// `TIME` samples accepted.
    pub time_samples: u64,
    /// Redirections followed on a Redis Cluster (`MOVED`: the group's slot
    /// is served by another master; `ASK`: it is migrating). A batch
    /// resent after one is still applied exactly once.
    pub redirects: u64,
    /// Batches a master acknowledged and Redis then lost (a failover to a
    /// replica that did not have them yet, or a restart without
    /// persistence), as the node learnt at its next batch to the group;
    /// only batches acknowledged within the record's lifetime (the window
    /// plus a slice plus 5 minutes) are noticed.
    pub lost_batches: u64,
    /// The counts in [`lost_batches`](Self::lost_batches): missing from
    /// the cluster's windows.
    pub lost_counts: u64,
    /// Batches held and resent because fewer replicas than asked had them
    /// in time (`wait_for_replicas`).
    pub not_replicated: u64,
    /// Calls of the [`on_hot_crossing`](crate::ClusterWindowsBuilder::on_hot_crossing)
    /// callback that panicked. The background flusher catches such a panic
    /// and goes on (the other crossings are still delivered); a
    /// [`flush`](crate::ClusterWindows::flush) delivers the others, then
    /// resumes the first panic in its caller.
    pub callback_panics: u64,
    /// Panics of the key type's own code (`RedisKey::write_key`, `Hash`,
    /// `Eq`, `Clone`) during a flush. The flush goes on with the other
    /// keys and groups: the background flusher counts the panic, a
    /// [`flush`](crate::ClusterWindows::flush) resumes the first one once
    /// every group was flushed. A batch in flight is never lost to one:
    /// the connection is reset and the batch resent.
    pub key_panics: u64,
    /// Counts dropped because their key's code panicked while a flush took
    /// them from the local windows (the key cannot be named in Redis).
    pub dropped_panicked: u64,
}

const NEVER: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// The node's live counters and state.
#[derive(Debug)]
pub(crate) struct Counters {
    /// A group's link state: `NEVER`, `UP` or `DOWN`.
    state: Box<[AtomicU8]>,
    /// A group's failed attempts since its last success.
    failures: Box<[AtomicU64]>,
    /// Whether a group's last attempt met too few replicas.
    short: Box<[AtomicBool]>,
    last_error: Mutex<Option<ClusterError>>,
    last_flush: Mutex<Option<Instant>>,
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_errors: AtomicU64,
    pub(crate) batches_applied: AtomicU64,
    pub(crate) batches_replayed: AtomicU64,
    pub(crate) resends: AtomicU64,
    pub(crate) key_deltas_flushed: AtomicU64,
    pub(crate) counts_flushed: AtomicU64,
    pub(crate) dropped_old: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) hot_crossings: AtomicU64,
    pub(crate) time_samples: AtomicU64,
    pub(crate) redirects: AtomicU64,
    pub(crate) lost_batches: AtomicU64,
    pub(crate) lost_counts: AtomicU64,
    pub(crate) not_replicated: AtomicU64,
    pub(crate) callback_panics: AtomicU64,
    pub(crate) key_panics: AtomicU64,
    pub(crate) dropped_panicked: AtomicU64,
}

/// Adds `n` to a counter.
#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// The counters of a node with `groups` groups (one a connection).
    pub(crate) fn new(groups: usize) -> Counters {
        let z = || AtomicU64::new(0);
        Counters {
            state: (0..groups).map(|_| AtomicU8::new(NEVER)).collect(),
            failures: (0..groups).map(|_| z()).collect(),
            short: (0..groups).map(|_| AtomicBool::new(false)).collect(),
            last_error: Mutex::new(None),
            last_flush: Mutex::new(None),
            flushes: z(),
            flush_errors: z(),
            batches_applied: z(),
            batches_replayed: z(),
            resends: z(),
            key_deltas_flushed: z(),
            counts_flushed: z(),
            dropped_old: z(),
            dropped_full: z(),
            connects: z(),
            hot_crossings: z(),
            time_samples: z(),
            redirects: z(),
            lost_batches: z(),
            lost_counts: z(),
            not_replicated: z(),
            callback_panics: z(),
            key_panics: z(),
            dropped_panicked: z(),
        }
    }

    /// A request of group `g` succeeded.
    pub(crate) fn up(&self, g: usize) {
        self.state[g].store(UP, Ordering::Relaxed);
        self.failures[g].store(0, Ordering::Relaxed);
        self.short[g].store(false, Ordering::Relaxed);
    }

    /// A request or connection of group `g` failed with `e`.
    pub(crate) fn down(&self, g: usize, e: &ClusterError) {
        if e.is_transient() {
            self.state[g].store(DOWN, Ordering::Relaxed);
        }
        self.failures[g].fetch_add(1, Ordering::Relaxed);
        let short = matches!(e, ClusterError::TooFewReplicas { .. });
        self.short[g].store(short, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
    }

    /// A flush ended with nothing left to send.
    pub(crate) fn flushed(&self) {
        bump(&self.flushes, 1);
        *self.last_flush.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether group `g`'s last attempt failed (transiently).
    pub(crate) fn is_down(&self, g: usize) -> bool {
        self.state[g].load(Ordering::Relaxed) == DOWN
    }

    pub(crate) fn health(&self) -> Health {
        let states: Vec<u8> = self
            .state
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect();
        let down = states.iter().filter(|&&s| s == DOWN).count();
        Health {
            state: if down > 0 {
                LinkState::Disconnected
            } else if states.contains(&UP) {
                LinkState::Connected
            } else {
                LinkState::NeverConnected
            },
            consecutive_failures: self
                .failures
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0),
            groups_disconnected: down,
            replicas_short: self
                .short
                .iter()
                .filter(|s| s.load(Ordering::Relaxed))
                .count(),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            since_last_flush: self
                .last_flush
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .map(|t| t.elapsed()),
            pending_counts: 0,
            staged_keys: 0,
            batch_in_flight: false,
            time_uncertainty: None,
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            flushes: l(&self.flushes),
            flush_errors: l(&self.flush_errors),
            batches_applied: l(&self.batches_applied),
            batches_replayed: l(&self.batches_replayed),
            resends: l(&self.resends),
            key_deltas_flushed: l(&self.key_deltas_flushed),
            counts_flushed: l(&self.counts_flushed),
            dropped_old: l(&self.dropped_old),
            dropped_full: l(&self.dropped_full),
            connects: l(&self.connects),
            hot_crossings: l(&self.hot_crossings),
            time_samples: l(&self.time_samples),
            redirects: l(&self.redirects),
            lost_batches: l(&self.lost_batches),
            lost_counts: l(&self.lost_counts),
            not_replicated: l(&self.not_replicated),
            callback_panics: l(&self.callback_panics),
            key_panics: l(&self.key_panics),
            dropped_panicked: l(&self.dropped_panicked),
        }
    }
}

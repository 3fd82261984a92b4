//! What a [`ClusterWindows`](crate::ClusterWindows) hands back beyond a
//! number: the parts of a key's window sum as one node sees them
//! ([`SumParts`], `reads.rs`, "Reads"), and what one flush did
//! ([`FlushReport`], `flush.rs`).

/// The parts of a key's window sum as one node sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SumParts {
    /// From the key's cluster ring as Redis last returned it to this node.
    pub cluster: u64,
    /// This node's counts taken by a flush and not yet acknowledged.
    pub pending: u64,
    /// This node's counts not yet taken by a flush.
    pub local: u64,
}

impl SumParts {
    /// The sum of the parts.
    pub fn total(&self) -> u64 {
        self.cluster
            .saturating_add(self.pending)
            .saturating_add(self.local)
    }
}

/// What one [`flush`](crate::ClusterWindows::flush) did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlushReport<K> {
    /// Batches acknowledged (applied now or, for `replayed`, earlier).
    pub batches: u64,
    /// Batches Redis had already applied (a lost reply, resent).
    pub replayed: u64,
    /// `(key, slice)` deltas acknowledged.
    pub key_deltas: u64,
    /// Counts acknowledged.
    pub counts: u64,
    /// Counts Redis dropped as older than the window.
    pub dropped_old: u64,
    /// Crossings this node reported: each key that a batch of this node
    /// made hot in the cluster, with its cluster window sum then. A flush
    /// that failed after some batches were acknowledged hands their
    /// crossings to the next flush that succeeds.
    pub crossings: Vec<(K, u64)>,
}

impl<K> FlushReport<K> {
    pub(crate) fn new() -> Self {
        FlushReport {
            batches: 0,
            replayed: 0,
            key_deltas: 0,
            counts: 0,
            dropped_old: 0,
            crossings: Vec::new(),
        }
    }

    /// Adds another flush's report (of another group) to this one.
    pub(crate) fn merge(&mut self, other: FlushReport<K>) {
        self.batches += other.batches;
        self.replayed += other.replayed;
        self.key_deltas += other.key_deltas;
        self.counts += other.counts;
        self.dropped_old += other.dropped_old;
        self.crossings.extend(other.crossings);
    }
}

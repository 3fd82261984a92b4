//! [`Acked`]: the batches of one group Redis acknowledged recently, kept
//! to count what Redis loses after acknowledging it.
//!
//! Redis replicates asynchronously: a master may acknowledge a batch and
//! die before its replica has it, and the promoted replica then holds the
//! node's record as it was before the batch. The flush script answers
//! every batch with the record's sequence before it (`prev_seq`); when that
//! is below the last sequence acknowledged, the batches between were lost
//! with their counts. A replica's data is a prefix of its master's writes
//! and every batch rewrites the record, so the batches after `prev_seq` are
//! exactly the lost ones.
//!
//! Entries are kept while the record they wrote could still exist (the
//! record TTL less a second, so that a record that expired is never taken
//! for a loss) and at most [`MAX_ENTRIES`] of them: a loss of older
//! batches is not noticed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Acknowledged batches kept at most, a group.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;

/// `(sequence, counts applied, when acknowledged)`, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Acked {
    entries: VecDeque<(u64, u64, Instant)>,
}

impl Acked {
    /// Batch `seq` was acknowledged now with `counts`; forgets entries
    /// older than `ttl` less a second.
    pub(crate) fn push(&mut self, seq: u64, counts: u64, ttl: Duration) {
        let now = Instant::now();
        let keep = ttl.saturating_sub(Duration::from_secs(1));
        while let Some(&(_, _, at)) = self.entries.front() {
            if now.duration_since(at) < keep && self.entries.len() < MAX_ENTRIES {
                break;
            }
            self.entries.pop_front();
        }
        self.entries.push_back((seq, counts, now));
    }

    /// Redis's record said `prev` (`-1`: none) before the batch now
    /// acknowledged: the batches kept after `prev` were lost. Returns how
    /// many and their counts, and forgets them.
    pub(crate) fn lost_after(&mut self, prev: i64) -> (u64, u64) {
        let (mut n, mut counts) = (0u64, 0u64);
        while let Some(&(seq, c, _)) = self.entries.back() {
            if i64::try_from(seq).is_ok_and(|s| s <= prev) {
                break;
            }
            self.entries.pop_back();
            n += 1;
            counts = counts.saturating_add(c);
        }
        (n, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_batches_after_the_records_sequence() {
        let ttl = Duration::from_secs(600);
        let mut a = Acked::default();
        assert_eq!(a.lost_after(-1), (0, 0));
        for seq in 1..=5 {
            a.push(seq, 10 * seq, ttl);
        }
        assert_eq!(a.lost_after(5), (0, 0)); // nothing lost
        assert_eq!(a.lost_after(3), (2, 90)); // 4 and 5
        assert_eq!(a.lost_after(3), (0, 0)); // counted once
        a.push(6, 60, ttl);
        assert_eq!(a.lost_after(-1), (4, 10 + 20 + 30 + 60)); // the record is gone
                                                              // A record that may have expired is not taken for a loss.
        let mut a = Acked::default();
        a.push(1, 7, Duration::from_millis(500));
        a.push(2, 8, Duration::from_millis(500));
        assert_eq!(a.lost_after(-1), (1, 8));
    }

    #[test]
    fn keeps_a_bounded_number() {
        let mut a = Acked::default();
        for seq in 1..=(MAX_ENTRIES as u64 + 10) {
            a.push(seq, 1, Duration::from_secs(600));
        }
        assert_eq!(a.lost_after(-1).0, MAX_ENTRIES as u64);
    }
}

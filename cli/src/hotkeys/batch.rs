//! `hotkeys`' batches of lines on one thread: up to [`LINES`] consecutive
//! records of one time, their keys copied side by side into one reused
//! buffer, added by one `add_many_at` call (`stripecount`'s batches hash a
//! group of keys and fetch their slots before adding, so that the keys'
//! cache misses overlap). A batch is what the single adds would do, one
//! line after the other, so the output is the same.

use super::KeyRef;

/// Records a batch holds: a few of the library's groups (16 keys).
pub(super) const LINES: usize = 64;

/// The records of one time, in order.
pub(super) struct Lines {
    /// The batch's time (millis).
    pub(super) ms: u64,
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl Lines {
    pub(super) fn new() -> Lines {
        Lines {
            ms: 0,
            bytes: Vec::with_capacity(LINES * 32),
            ends: Vec::with_capacity(LINES),
        }
    }

    /// Whether a record at `ms` must wait for the next batch: this one is
    /// full, or of another time.
    #[inline]
    pub(super) fn is_closed_to(&self, ms: u64) -> bool {
        !self.ends.is_empty() && (self.ms != ms || self.ends.len() == LINES)
    }

    #[inline]
    pub(super) fn push(&mut self, ms: u64, key: &[u8]) {
        self.ms = ms;
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The keys, in order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &KeyRef> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let k = KeyRef::new(&self.bytes[start..end]);
            start = end;
            k
        })
    }
}

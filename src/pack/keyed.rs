//! The per-key engine's packed words (`crate::keyed`): one key's count in
//! one slice, the detector's word beside it, and a heavy key's home. Each
//! protocol is described where its word is used; this file says only
//! where each fact lives, so that no two files can disagree about a bit.

use super::Field;

/// One key's count in one slice (`keyed/entry.rs`):
/// `sealed:1 | incoming:1 | striped:1 | watched:1 | count:60`.
pub(crate) enum EntryWord {}

impl EntryWord {
    /// The count (adds saturate at its max).
    pub(crate) const COUNT: Field<EntryWord, u64> = Field::lowest(60);
    /// A detector's bound read this count: adds take the slow path.
    pub(crate) const WATCHED: Field<EntryWord, bool> = Field::above(Self::COUNT, 1);
    /// The rest of the count is in the entry's striped counter.
    pub(crate) const STRIPED: Field<EntryWord, bool> = Field::above(Self::WATCHED, 1);
    /// A move is filling this entry: readers wait.
    pub(crate) const INCOMING: Field<EntryWord, bool> = Field::above(Self::STRIPED, 1);
    /// The entry moved to a bigger table: adds look the key up again.
    pub(crate) const SEALED: Field<EntryWord, bool> = Field::above(Self::INCOMING, 1);
}

const _: () = assert!(EntryWord::SEALED.end() == 64);

/// The hot-key detector's word beside an entry's count (`keyed/hot.rs`,
/// `keyed/bound.rs`): `bound:56 | spare:1 | near:1 | installing:1 |
/// stale:1 | noted:1 | hot_here:1 | has_home:1 | checked:1`. Zero in plain
/// windows.
pub(crate) enum EntryHot {}

impl EntryHot {
    /// Whether the key has a home was looked up.
    pub(crate) const CHECKED: Field<EntryHot, bool> = Field::lowest(1);
    /// The key had a home, or got one since.
    pub(crate) const HAS_HOME: Field<EntryHot, bool> = Field::above(Self::CHECKED, 1);
    /// The key is hot at this entry's epoch.
    pub(crate) const HOT_HERE: Field<EntryHot, bool> = Field::above(Self::HAS_HOME, 1);
    /// This slice reached the heavy count and the home knows it.
    pub(crate) const NOTED: Field<EntryHot, bool> = Field::above(Self::HOT_HERE, 1);
    /// A late add came since the bound was installed: it is not used.
    pub(crate) const STALE: Field<EntryHot, bool> = Field::above(Self::NOTED, 1);
    /// A bound is being installed (its reads of the older slices run).
    pub(crate) const INSTALLING: Field<EntryHot, bool> = Field::above(Self::STALE, 1);
    /// A stripe of this striped entry reached its share of the heavy count:
    /// every striped add reads the whole count (`keyed/hot.rs`, "Striped
    /// entries"). Never cleared.
    pub(crate) const NEAR: Field<EntryHot, bool> = Field::above(Self::INSTALLING, 1);
    /// Unused.
    const SPARE: Field<EntryHot, u64> = Field::above(Self::NEAR, 1);
    /// How far the count may grow before the window could reach the
    /// threshold (0: no bound).
    pub(crate) const BOUND: Field<EntryHot, u64> = Field::above(Self::SPARE, 56);
}

const _: () = assert!(EntryHot::BOUND.end() == 64);

/// A heavy key's home (`keyed/home.rs`): `hot:1 | dead:1 | incoming:1 |
/// epoch:61`.
pub(crate) enum HomeWord {}

impl HomeWord {
    /// The epoch of the latest add that saw the key at or above the
    /// threshold (saturating: 2^61 ns is 73 years).
    pub(crate) const EPOCH: Field<HomeWord, u64> = Field::lowest(61);
    /// A move is filling the home: users wait.
    pub(crate) const INCOMING: Field<HomeWord, bool> = Field::above(Self::EPOCH, 1);
    /// Retired or moved out: users look the key up again.
    pub(crate) const DEAD: Field<HomeWord, bool> = Field::above(Self::INCOMING, 1);
    /// The key is hot.
    pub(crate) const HOT: Field<HomeWord, bool> = Field::above(Self::DEAD, 1);
}

const _: () = assert!(HomeWord::HOT.end() == 64);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_per_key_words_keep_their_bits() {
        assert_eq!(EntryWord::SEALED.mask(), 1 << 63);
        assert_eq!(EntryWord::INCOMING.mask(), 1 << 62);
        assert_eq!(EntryWord::STRIPED.mask(), 1 << 61);
        assert_eq!(EntryWord::WATCHED.mask(), 1 << 60);
        assert_eq!(EntryWord::COUNT.max(), (1 << 60) - 1);
        assert_eq!(EntryHot::STALE.mask(), 1 << 4);
        assert_eq!(EntryHot::INSTALLING.mask(), 1 << 5);
        assert_eq!(EntryHot::NEAR.mask(), 1 << 6);
        assert_eq!(EntryHot::BOUND.shift(), 8);
        assert_eq!(HomeWord::HOT.mask(), 1 << 63);
        assert_eq!(HomeWord::EPOCH.max(), (1 << 61) - 1);
    }
}

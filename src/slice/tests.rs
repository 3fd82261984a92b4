//! Unit tests of the slice cell (`slice.rs`): adds within an epoch, a
//! cell recycled into a new one, tags that must not alias, saturation,
//! and the sole writer's fast path, against exact expected values.

use super::*;

#[test]
fn add_same_epoch_accumulates() {
    let c = SliceCell::new(3);
    let mut k = false;
    assert_eq!(c.add(3, 5, 4, &mut k), Added::Recorded);
    assert_eq!(c.add(3, 2, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (3, 7));
    assert!(!k);
}

#[test]
fn recycle_clears_in_the_same_step() {
    let c = SliceCell::new(3);
    let mut k = false;
    c.add(3, 5, 4, &mut k);
    assert_eq!(c.add(7, 1, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (7, 1));
    assert_eq!(c.add(3, 1, 4, &mut k), Added::TooOld);
    assert_eq!(c.read(), (7, 1));
}

#[test]
fn jump_by_multiple_of_tag_space_does_not_alias() {
    let c = SliceCell::new(3);
    let mut k = false;
    c.add(3, 9, 4, &mut k);
    let far = 3 + (1u64 << 16) * 4; // same residue, same 16-bit tag
    assert_eq!(tag(far), tag(3));
    assert_eq!(c.add(far, 1, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (far, 1));
}

#[test]
fn saturates_at_cell_maximum() {
    let c = SliceCell::new(0);
    let mut k = false;
    c.add(0, MAX_COUNT_PER_SLICE - 1, 1, &mut k);
    c.add(0, 10, 1, &mut k);
    assert_eq!(c.read(), (0, MAX_COUNT_PER_SLICE));
    c.add(0, u64::MAX, 1, &mut k);
    assert_eq!(c.read(), (0, MAX_COUNT_PER_SLICE));
}

#[test]
fn a_sole_writer_goes_through_the_same_states() {
    // The same sequence as the shared tests, written with plain stores:
    // accumulate, recycle, too old, tag-space jump.
    let c = SliceCell::new(3);
    let mut k = false;
    let sole = Writer::Sole;
    assert!(c.try_add_as(sole, 3, 5, &mut k));
    assert_eq!(c.add_as(sole, 3, 2, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (3, 7));
    assert!(
        !c.try_add_as(sole, 7, 1, &mut k),
        "a recycle is the slow path"
    );
    assert_eq!(c.add_as(sole, 7, 1, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (7, 1));
    assert_eq!(c.add_as(sole, 3, 1, 4, &mut k), Added::TooOld);
    let far = 7 + (1u64 << 16) * 4;
    assert_eq!(c.add_as(sole, far, 2, 4, &mut k), Added::Recorded);
    assert_eq!(c.read(), (far, 2));
    assert!(!k, "a sole writer never sees contention");
}

#[test]
fn the_fast_path_stops_short_of_saturation() {
    let c = SliceCell::new(0);
    let mut k = false;
    assert!(c.try_add_as(Writer::Shared, 0, MAX_COUNT_PER_SLICE - 1, &mut k));
    assert!(c.try_add_as(Writer::Shared, 0, 1, &mut k));
    assert!(!c.try_add_as(Writer::Shared, 0, 1, &mut k), "saturated");
    assert_eq!(c.add(0, 1, 1, &mut k), Added::Recorded);
    assert_eq!(c.read(), (0, MAX_COUNT_PER_SLICE));
    let d = SliceCell::new(0);
    assert!(
        !d.try_add_as(Writer::Sole, 0, u64::MAX, &mut k),
        "n too large"
    );
    assert!(!d.try_add_as(Writer::Sole, 1, 1, &mut k), "wrong epoch");
    assert_eq!(d.read(), (0, 0));
}

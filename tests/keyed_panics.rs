//! A key type whose `Clone` panics, against the per-key map every keyed
//! type is built on (`src/map/`, "Panics"): a panic in an insert
//! leaves the map whole and gives back the key's place under the bound;
//! a panic in the middle of a move (a shard growing to a bigger table)
//! aborts the process, which a child process of this test shows.

use std::cell::Cell;
use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::limiter::KeyedLimiterBuilder;
use stripecount::{KeyedLimiter, KeyedWindows, Quota, Timestamp};

/// The payload of a [`Touchy`] clone's panic.
const BOOM: &str = "Touchy::clone was told to panic";
/// The child process's marker (see `a_panic_in_a_move_aborts`).
#[cfg(not(miri))]
const CHILD: &str = "STRIPECOUNT_KEYED_PANICS_CHILD";

thread_local! {
    /// Clones of a [`Touchy`] left before one panics (`None`: never).
    static CLONES_LEFT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// A key whose clone panics once [`CLONES_LEFT`] runs out.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Touchy(u64);

impl Clone for Touchy {
    fn clone(&self) -> Self {
        CLONES_LEFT.with(|c| match c.get() {
            Some(0) => panic!("{BOOM}"),
            Some(n) => c.set(Some(n - 1)),
            None => {}
        });
        Touchy(self.0)
    }
}

/// A fixed hasher: the same keys share the same shards in every run.
type Fixed = BuildHasherDefault<DefaultHasher>;

/// Keeps the expected panics out of the test output.
fn quiet_expected_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<String>().map(String::as_str) != Some(BOOM) {
                default(info);
            }
        }));
    });
}

/// Runs `f` with every `Touchy` clone panicking; whether it panicked.
fn with_clones_panicking(f: impl FnOnce()) -> bool {
    CLONES_LEFT.with(|c| c.set(Some(0)));
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    CLONES_LEFT.with(|c| c.set(None));
    r.is_err()
}

/// The time `ns` nanoseconds after the origin.
const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// The builder of a limiter of 3 permits per 10 s in 10 slices, on a
/// manual clock.
fn limiter_builder() -> KeyedLimiterBuilder<Touchy, ManualClock, Fixed> {
    KeyedLimiter::builder(Quota::per(3, Duration::from_secs(10)).slices(10))
        .clock(ManualClock::new())
        .hasher(Fixed::default())
}

/// 3 permits per 10 s in 10 slices, on a manual clock.
fn limiter() -> KeyedLimiter<Touchy, ManualClock, Fixed> {
    limiter_builder().build().unwrap()
}

#[test]
fn a_panicking_clone_on_insert_leaves_the_limiter_whole() {
    quiet_expected_panics();
    const MAX_KEYS: u64 = 100;
    let l = limiter_builder()
        .max_keys(MAX_KEYS as usize)
        .build()
        .unwrap();
    for k in 0..50 {
        assert!(l.try_acquire_at(&Touchy(k), ts(0), 1));
    }
    for k in 50..60 {
        assert!(with_clones_panicking(|| {
            l.try_acquire_at(&Touchy(k), ts(0), 1);
        }));
    }
    // A held key needs no clone: it is granted as before.
    assert!(!with_clones_panicking(|| {
        assert!(l.try_acquire_at(&Touchy(0), ts(0), 1));
    }));
    assert_eq!(l.len(), 50, "no key of a panicked insert is held");
    // Every place under the bound is still there: 50 more keys, no more.
    for k in 50..MAX_KEYS {
        assert!(l.try_acquire_at(&Touchy(k), ts(0), 1), "key {k}");
    }
    assert!(
        !l.try_acquire_at(&Touchy(MAX_KEYS), ts(0), 1),
        "the bound holds"
    );
    assert_eq!(l.len(), MAX_KEYS as usize);
    // And every key's count is exact, the poisoned shard's ones included.
    for k in 0..MAX_KEYS {
        let used = if k == 0 { 2 } else { 1 };
        assert_eq!(l.available_at(&Touchy(k), ts(0)), 3 - used, "key {k}");
    }
}

#[test]
fn a_panicking_clone_on_insert_leaves_the_windows_whole() {
    quiet_expected_panics();
    let w = KeyedWindows::<Touchy>::builder(Duration::from_secs(10), 10)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .max_keys(100)
        .build()
        .unwrap();
    for k in 0..50 {
        assert!(w.add_at(&Touchy(k), ts(0), k + 1));
    }
    for k in 50..60 {
        assert!(with_clones_panicking(|| {
            w.add_at(&Touchy(k), ts(0), 1);
        }));
    }
    // Every place under the bound is still there: 50 more keys, no more.
    for k in 50..100 {
        assert!(w.add_at(&Touchy(k), ts(0), k + 1), "key {k}");
    }
    assert!(!w.add_at(&Touchy(100), ts(0), 1), "the bound holds");
    for k in 0..100 {
        assert_eq!(w.sum_at(&Touchy(k), ts(0)), k + 1, "key {k}");
    }
}

/// In a child process (this test, run again with [`CHILD`] set): new keys
/// whose second clone from each insert panics. An insert that does not
/// move clones its key once; the first insert into a full table moves the
/// shard's keys first, and its second clone panics mid-move, which must
/// abort. The parent checks that the child died so, and said why.
///
/// Not under Miri: it runs the test binary again as a child process, which
/// Miri cannot start, and a process abort ends Miri's run.
#[cfg(not(miri))]
#[test]
fn a_panic_in_a_move_aborts() {
    use std::process::Command;
    if std::env::var_os(CHILD).is_some() {
        quiet_expected_panics();
        let l = limiter();
        for k in 0..100_000 {
            CLONES_LEFT.with(|c| c.set(Some(1)));
            assert!(l.try_acquire_at(&Touchy(k), ts(0), 1));
        }
        return; // no move panicked: the parent fails
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_panic_in_a_move_aborts",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child finished: {stderr}");
    assert!(
        stderr.contains("while its shard moved (the move cannot be undone): aborting"),
        "the child did not abort for the move: {stderr}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT");
    }
}

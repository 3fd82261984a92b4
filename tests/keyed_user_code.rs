//! Every call the per-key structures make into the caller's code, made to
//! panic: a key whose `Hash`, `Eq`, `Clone` or `Drop` panics on its N-th
//! call, for every N a scripted workload reaches, on [`KeyedWindows`],
//! [`HotKeyDetector`] and [`KeyedLimiter`]; and callbacks that panic or
//! call back into the structure.
//!
//! Where the caller's code runs (`src/unwind.rs` says what each place
//! guarantees):
//! - `Hash`: at the start of every keyed call, outside every lock; in a
//!   move to a bigger table (under the shard lock: a panic aborts); when a
//!   take gives back what its callback did not get (a panic aborts).
//! - `Eq`: in lock-free lookups; in an insert's probe under the shard lock,
//!   before anything is written; in the detector's home check of a new
//!   entry, before anything is written; in the detector's marking of a new
//!   home and a late add's clearing of newer bounds, after the add landed
//!   (a panic aborts); in reads (`top_at`, `hot_keys_at`) outside every lock.
//! - `Clone`: making a new key, before anything is written; in a move (a
//!   panic aborts); the keys `top_at` and `hot_keys_at` return.
//! - `Drop`: a freed table's keys, at the start of an insert, before it
//!   does anything; a structure's drop (every key is dropped, then the
//!   first panic goes on).
//! - Callbacks: `take` and `take_all` call theirs under no lock; a panic
//!   there gives back the counts not delivered.
//!
//! After every step: the bounds hold (`len`). After each run: every count
//! that was added is accounted for (delivered by a take, or still held),
//! never lost and never doubled (an add that panicked may or may not have
//! counted, and nothing else); the structure still counts exactly; and
//! once it is dropped no key is left alive.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::Duration;
use stripecount::{HotKeyDetector, KeyedLimiter, KeyedWindows, ManualClock};

/// The payload of an injected panic.
const BOOM: &str = "a Faulty key was told to panic";
const SLICE: u64 = 1_000_000_000;
/// Few keys: no shard grows to a bigger table (a move that panics aborts,
/// which `keyed_panics.rs` tests on its own).
const KEYS: u64 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Site {
    Hash = 0,
    Eq = 1,
    Clone = 2,
    Drop = 3,
}

const SITES: [Site; 4] = [Site::Hash, Site::Eq, Site::Clone, Site::Drop];

thread_local! {
    /// Calls made so far, per site.
    static CALLS: Cell<[u32; 4]> = const { Cell::new([0; 4]) };
    /// The call that panics: `(site, n)` panics on that site's `n`-th call
    /// (from 0), once.
    static FAULT: Cell<Option<(Site, u32)>> = const { Cell::new(None) };
    /// `Faulty` values alive.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// `Drop` faults that fired.
    static DROPS_FIRED: Cell<u32> = const { Cell::new(0) };
}

fn tick(site: Site) {
    let mut c = CALLS.get();
    let n = c[site as usize];
    c[site as usize] += 1;
    CALLS.set(c);
    if FAULT.get() == Some((site, n)) {
        FAULT.set(None);
        panic!("{BOOM}");
    }
}

/// Counts the `Faulty` values alive (a field, so it is dropped even when
/// `Faulty::drop` panics).
#[derive(Debug)]
struct Live;

impl Live {
    fn new() -> Live {
        LIVE.set(LIVE.get() + 1);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.set(LIVE.get() - 1);
    }
}

/// A key whose every `Hash`, `Eq`, `Clone` and `Drop` call is counted, and
/// may be told to panic.
#[derive(Debug)]
struct Faulty {
    id: u64,
    _live: Live,
}

impl Faulty {
    fn new(id: u64) -> Faulty {
        Faulty {
            id,
            _live: Live::new(),
        }
    }
}

impl Hash for Faulty {
    fn hash<H: Hasher>(&self, h: &mut H) {
        tick(Site::Hash);
        self.id.hash(h);
    }
}

impl PartialEq for Faulty {
    fn eq(&self, other: &Faulty) -> bool {
        tick(Site::Eq);
        self.id == other.id
    }
}

impl Eq for Faulty {}

impl Clone for Faulty {
    fn clone(&self) -> Faulty {
        tick(Site::Clone);
        Faulty::new(self.id)
    }
}

impl Drop for Faulty {
    fn drop(&mut self) {
        tick(Site::Drop);
    }
}

/// A fixed hasher: the same keys share the same shards in every run.
type Fixed = BuildHasherDefault<DefaultHasher>;

fn quiet_expected_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<String>().map(String::as_str);
            if std::env::var_os("LOUD").is_some()
                || (msg != Some(BOOM) && info.payload().downcast_ref::<&str>() != Some(&BOOM))
            {
                default(info);
            }
        }));
    });
}

/// Runs `f` with no fault armed and its calls not counted.
fn paused<R>(f: impl FnOnce() -> R) -> R {
    let (fault, calls) = (FAULT.replace(None), CALLS.get());
    let r = f();
    FAULT.set(fault);
    CALLS.set(calls);
    r
}

/// One run of a workload: the keys, and what its steps did.
struct Run {
    keys: Vec<Faulty>,
    /// Per key: the sum of adds that returned counted, and of adds that
    /// panicked (which may or may not have counted).
    counted: RefCell<Vec<u64>>,
    unsure: RefCell<Vec<u64>>,
    /// Per key: what takes delivered.
    taken: RefCell<Vec<u64>>,
    panics: Cell<u32>,
}

impl Run {
    /// A run whose calls are counted from now, and `fault` armed.
    fn new(fault: Option<(Site, u32)>) -> Run {
        let run = Run {
            keys: (0..KEYS).map(Faulty::new).collect(),
            counted: RefCell::new(vec![0; KEYS as usize]),
            unsure: RefCell::new(vec![0; KEYS as usize]),
            taken: RefCell::new(vec![0; KEYS as usize]),
            panics: Cell::new(0),
        };
        CALLS.set([0; 4]);
        FAULT.set(fault);
        run
    }

    /// Runs `f`; `None` if it panicked (with the injected panic: any other
    /// fails the test).
    fn step<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => Some(r),
            Err(p) => {
                let ours = p.downcast_ref::<String>().map(String::as_str) == Some(BOOM)
                    || p.downcast_ref::<&str>() == Some(&BOOM);
                assert!(ours, "a panic that was not injected");
                self.panics.set(self.panics.get() + 1);
                None
            }
        }
    }

    /// An add of `n` to key `k`: `f` says whether it counted.
    fn add(&self, k: usize, n: u64, f: impl FnOnce() -> bool) {
        match self.step(f) {
            Some(true) => self.counted.borrow_mut()[k] += n,
            Some(false) => {}
            None => self.unsure.borrow_mut()[k] += n,
        }
    }

    /// What added to key `k` may have counted.
    fn added(&self, k: usize) -> std::ops::RangeInclusive<u64> {
        let lo = self.counted.borrow()[k];
        lo..=lo + self.unsure.borrow()[k]
    }

    /// A callback for takes: credits what it is given.
    fn credit(&self, key: &Faulty, c: u64) {
        self.taken.borrow_mut()[key.id as usize] += c;
    }

    /// Ends the armed part: the calls it made. Checks the fault fired once
    /// (if there was one). A `Drop` fault may not fire: a retired table is
    /// freed when no thread of the process is pinned from before its
    /// retirement, so other tests' threads move its keys' drops between
    /// the steps and the checks, whose calls are not counted.
    fn disarm(&self, fault: Option<(Site, u32)>) -> [u32; 4] {
        let calls = CALLS.get();
        FAULT.set(None);
        let fired = self.panics.get();
        match fault {
            None => assert_eq!(fired, 0),
            Some((Site::Drop, _)) => {
                assert!(fired <= 1, "{fault:?} fired {fired} times");
                DROPS_FIRED.set(DROPS_FIRED.get() + fired);
            }
            Some(_) => assert_eq!(fired, 1, "{fault:?} fired {fired} times"),
        }
        calls
    }

    /// Checks, once the structure is dropped, that no key is alive but the
    /// run's own.
    fn finish(self) {
        assert_eq!(LIVE.get(), KEYS as i64, "keys leaked or dropped twice");
        drop(self);
        assert_eq!(LIVE.get(), 0);
    }
}

/// Runs `scenario` once clean, then once per call it made at each of
/// `sites`, with that call panicking. `scenario` checks its own results
/// and returns the calls it made while armed.
fn sweep(name: &str, sites: &[Site], scenario: impl Fn(Option<(Site, u32)>) -> [u32; 4]) {
    quiet_expected_panics();
    let calls = scenario(None);
    DROPS_FIRED.set(0);
    for &site in sites {
        let n = calls[site as usize];
        assert!(n > 0, "{name}: no {site:?} call to break");
        // Under Miri, a sample of the calls (each run is slow there).
        let step = if cfg!(miri) { (n / 6).max(1) } else { 1 };
        for i in (0..n).step_by(step as usize) {
            scenario(Some((site, i)));
        }
    }
    if sites.contains(&Site::Drop) {
        assert!(DROPS_FIRED.get() > 0, "{name}: no Drop fault fired");
    }
}

type Windows = KeyedWindows<Faulty, ManualClock, Fixed>;

fn windows_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    const MAX_KEYS: usize = 4;
    let w: Windows = KeyedWindows::with_hasher(
        Duration::from_secs(4),
        4,
        ManualClock::new(),
        Fixed::default(),
    )
    .unwrap()
    .with_max_keys(MAX_KEYS);
    let run = Run::new(fault);
    let bound = |w: &Windows| assert!(paused(|| w.len()) <= 4 * MAX_KEYS, "the bound holds");
    // One window: every count stays in the ring.
    for e in 0..4u64 {
        for k in 0..KEYS as usize {
            let n = k as u64 + 1;
            run.add(k, n, || w.add_at(&run.keys[k], e * SLICE, n));
            bound(&w);
        }
        let k = e as usize;
        run.step(|| w.sum_at(&run.keys[k], e * SLICE));
        run.step(|| drop(w.top_at(e * SLICE, 2)));
        if e == 1 {
            run.step(|| w.take(&run.keys[2], |_, c| run.credit(&run.keys[2], c)));
        }
        if e == 2 {
            run.step(|| w.take_all(|key, _, c| run.credit(key, c)));
        }
        bound(&w);
    }
    // Every count added is taken or held, once.
    paused(|| {
        let held: Vec<u64> = run.keys.iter().map(|k| w.sum_at(k, 3 * SLICE)).collect();
        for (k, h) in held.iter().enumerate() {
            let total = run.taken.borrow()[k] + h;
            assert!(
                run.added(k).contains(&total),
                "key {k}: {total} of {:?}",
                run.added(k)
            );
        }
    });
    // Slices leave the window: retired tables are freed (their keys
    // dropped) at later inserts.
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| w.add_at(&run.keys[k], e * SLICE, 1));
        bound(&w);
    }
    run.step(|| w.evict_idle_at(40 * SLICE));
    // Still exact.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let now = (50 + k as u64) * SLICE;
            assert!(w.add_at(key, now, 7));
            assert_eq!(w.sum_at(key, now), 7, "key {k}");
        }
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(w));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

#[test]
fn windows_survive_a_panic_at_every_call_into_the_key() {
    sweep("windows", &SITES, windows_scenario);
}

type Limiter = KeyedLimiter<Faulty, ManualClock, Fixed>;

fn limiter_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    const LIMIT: u64 = 3;
    const MAX_KEYS: usize = 4;
    let l: Limiter = KeyedLimiter::with_hasher(
        LIMIT,
        Duration::from_secs(4),
        4,
        ManualClock::new(),
        Fixed::default(),
    )
    .unwrap()
    .with_max_keys(MAX_KEYS);
    let run = Run::new(fault);
    let bound = |l: &Limiter| assert!(paused(|| l.len()) <= MAX_KEYS, "the bound holds");
    run.step(|| l.set_key_limit(&run.keys[4], 5).unwrap());
    for e in 0..4u64 {
        for k in 0..KEYS as usize {
            run.add(k, 1, || l.try_acquire_at(&run.keys[k], e * SLICE, 1));
            bound(&l);
        }
        let k = e as usize;
        run.step(|| l.peek_at(&run.keys[k], e * SLICE, 1));
        run.step(|| l.available_at(&run.keys[k], e * SLICE));
    }
    // Never over a limit within one window: 3, or key 4's 5 if its
    // override was set (counting the grants that returned).
    for k in 0..KEYS as usize {
        let limit = if k == 4 { 5 } else { LIMIT };
        let granted = *run.added(k).start();
        assert!(granted <= limit, "key {k}: {granted} granted");
    }
    run.step(|| l.clear_key_limits(&run.keys[4]));
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| l.try_acquire_at(&run.keys[k], e * SLICE, 1));
        bound(&l);
    }
    run.step(|| l.evict_idle_at(40 * SLICE));
    // Still exact, with every place under the bound.
    paused(|| {
        l.clear_key_limits(&run.keys[4]);
        l.evict_idle_at(50 * SLICE);
        assert_eq!(l.len(), 0);
        for (k, key) in run.keys.iter().enumerate().take(MAX_KEYS) {
            let now = 60 * SLICE;
            assert_eq!(l.available_at(key, now), LIMIT, "key {k}");
            assert!(l.try_acquire_at(key, now, LIMIT));
            assert!(!l.try_acquire_at(key, now, 1));
        }
        assert_eq!(l.len(), MAX_KEYS);
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(l));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

#[test]
fn a_limiter_survives_a_panic_at_every_call_into_the_key() {
    sweep("limiter", &SITES, limiter_scenario);
}

type Detector = HotKeyDetector<Faulty, ManualClock, Fixed>;

/// The detector: threshold 6 over 4 slices (a slice at 2 is heavy).
fn detector_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    let d: Detector = HotKeyDetector::over(
        KeyedWindows::with_hasher(
            Duration::from_secs(4),
            4,
            ManualClock::new(),
            Fixed::default(),
        )
        .unwrap(),
        6,
    )
    .unwrap()
    .with_max_keys(8);
    let run = Run::new(fault);
    let mut reports = [0u32; KEYS as usize];
    for e in 0..4u64 {
        for (k, r) in reports.iter_mut().enumerate() {
            let n = k as u64;
            let hot = run.step(|| d.became_hot_at(&run.keys[k], e * SLICE, n));
            match hot {
                Some(h) => run.counted.borrow_mut()[k] += n * u64::from(h.is_some() || n > 0),
                None => run.unsure.borrow_mut()[k] += n,
            }
            *r += u32::from(matches!(hot, Some(Some(_))));
        }
        let k = e as usize;
        run.step(|| d.is_hot_at(&run.keys[k], e * SLICE));
        run.step(|| drop(d.hot_keys_at(e * SLICE)));
    }
    // Within one window nothing cools: each key crossed at most once, and
    // exactly once with no fault.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let sum = d.windows().sum_at(key, 3 * SLICE);
            assert!(
                run.added(k).contains(&sum),
                "key {k}: {sum} of {:?}",
                run.added(k)
            );
            assert!(reports[k] <= 1, "key {k}: {reports:?}");
            if fault.is_none() {
                assert_eq!(reports[k], u32::from(sum >= 6), "key {k}");
            }
        }
    });
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| d.add_at(&run.keys[k], e * SLICE, 3));
    }
    run.step(|| d.evict_idle_at(40 * SLICE));
    // Still exact: each key crosses 6 on its second add of 3.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let now = 50 * SLICE;
            assert!(!d.add_at(key, now, 3), "key {k}");
            assert!(d.add_at(key, now, 3), "key {k}");
            assert!(d.is_hot_at(key, now));
        }
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(d));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

/// `Eq` is swept apart (`a_detector_survives_or_aborts_on_a_panicking_eq`):
/// a panic while the detector marks a new home's entries aborts.
#[test]
fn a_detector_survives_a_panic_at_every_hash_clone_and_drop() {
    sweep(
        "detector",
        &[Site::Hash, Site::Clone, Site::Drop],
        detector_scenario,
    );
}

/// The detector's check for a home, made by a key's first add in a slice
/// under the slice's shard lock, runs the key's `Eq`: a panic there leaves
/// no key behind and gives back its place under the bound.
#[test]
fn a_panicking_eq_in_a_new_entrys_home_check_leaks_nothing() {
    quiet_expected_panics();
    const MAX_KEYS: usize = 2;
    let d: Detector = HotKeyDetector::over(
        KeyedWindows::with_hasher(
            Duration::from_secs(4),
            4,
            ManualClock::new(),
            Fixed::default(),
        )
        .unwrap(),
        6,
    )
    .unwrap()
    .with_max_keys(MAX_KEYS);
    let run = Run::new(None);
    // Key 0 is heavy in slice 0 (2 of 6 over 4 slices): it has a home.
    assert!(!d.add_at(&run.keys[0], 0, 3));
    assert_eq!(d.heavy_keys(), 1);
    // The keys alive: the run's, and slice 0's and the home's clones.
    let live = LIVE.get();
    for round in 0..3 {
        // Its first add in slice 1 checks for the home: the next `Eq`.
        FAULT.set(Some((Site::Eq, CALLS.get()[Site::Eq as usize])));
        assert!(
            run.step(|| d.add_at(&run.keys[0], SLICE, 1)).is_none(),
            "round {round}"
        );
        assert_eq!(LIVE.get(), live, "round {round}: no key left in the slot");
    }
    // Slice 1 still has both its places (the detector's add says whether
    // the key became hot; 4 of 6 is not).
    assert!(!d.add_at(&run.keys[0], SLICE, 1));
    assert!(!d.add_at(&run.keys[1], SLICE, 1));
    assert!(!d.add_at(&run.keys[2], SLICE, 1));
    assert_eq!(d.windows().untracked_adds(), 1, "the bound holds");
    assert_eq!(d.windows().len(), 1 + MAX_KEYS);
    assert_eq!(d.windows().sum_at(&run.keys[0], SLICE), 4);
    drop(d);
    run.finish();
}

/// In a child process (`keyed_user_code` run again with this variable set
/// to `n`): the detector scenario with its `n`-th `Eq` panicking.
const EQ_CHILD: &str = "STRIPECOUNT_USER_CODE_EQ_CHILD";

/// The detector's `Eq` calls, each made to panic in a child process: the
/// child survives with every check passing, or aborts saying the detector
/// was marking a new home's entries or clearing a late add's bounds (the
/// two places a panic cannot be undone). Miri cannot start processes.
#[cfg(not(miri))]
#[test]
fn a_detector_survives_or_aborts_on_a_panicking_eq() {
    use std::process::Command;
    if let Some(n) = std::env::var_os(EQ_CHILD) {
        quiet_expected_panics();
        let n: u32 = n.to_str().unwrap().parse().unwrap();
        detector_scenario(Some((Site::Eq, n)));
        return;
    }
    quiet_expected_panics();
    let calls = detector_scenario(None)[Site::Eq as usize];
    assert!(calls > 20, "{calls} Eq calls");
    let (mut survived, mut aborted) = (0, 0);
    for n in 0..calls {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_detector_survives_or_aborts_on_a_panicking_eq",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(EQ_CHILD, n.to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            survived += 1;
            continue;
        }
        assert!(
            stderr.contains("while the hot-key detector marked its entries: aborting")
                || stderr.contains("while a late add cleared the detector's bounds: aborting"),
            "Eq call {n}: the child failed: {stderr}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(6), "Eq call {n}: SIGABRT");
        }
        aborted += 1;
    }
    assert!(
        survived > 0 && aborted > 0,
        "{survived} survived, {aborted} aborted"
    );
}

/// A callback given to `take_all` or `take` runs under no lock: it may
/// read, add (to new keys too) and take again; every count is delivered
/// once or still held.
#[test]
fn take_callbacks_may_call_back_into_the_windows() {
    let w: KeyedWindows<u64, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(4), 4, ManualClock::new()).unwrap();
    const N: u64 = if cfg!(miri) { 40 } else { 400 };
    for k in 0..N {
        assert!(w.add_at(&k, 0, k + 1));
    }
    let mut added: u64 = (1..=N).sum();
    let mut delivered = 0;
    let mut inner = 0;
    w.take_all(|&k, e, c| {
        // Keys added by this callback may be met later, with 1.
        assert_eq!((e, c), (0, if k < N { k + 1 } else { 1 }));
        if k >= N {
            delivered += c;
            return;
        }
        delivered += c;
        assert!(!w.is_empty());
        assert_eq!(w.sum_at(&k, 0), 0, "taken before the callback");
        // A new key, and more on a key already taken.
        assert!(w.add_at(&(N + k), 0, 1));
        assert!(w.add_at(&k, 0, 1));
        added += 2;
        if k % 50 == 0 {
            w.take(&(N + k), |_, c| inner += c);
        }
    });
    w.take_all(|_, _, c| delivered += c);
    assert_eq!(delivered + inner, added);
    assert_eq!(w.sum_at(&0, 0), 0);
}

/// A callback that panics: the panic goes on, and the counts it did not
/// get are added back.
#[test]
fn a_panicking_take_callback_gives_back_what_it_did_not_get() {
    let w: KeyedWindows<u64, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(4), 4, ManualClock::new()).unwrap();
    const N: u64 = if cfg!(miri) { 30 } else { 300 };
    for e in 0..2 {
        for k in 0..N {
            assert!(w.add_at(&k, e * SLICE, k + 1));
        }
    }
    let total = 2 * (1..=N).sum::<u64>();
    for fail_at in [0, 1, 7, N / 2] {
        let mut delivered = 0;
        let mut calls = 0;
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            w.take_all(|_, _, c| {
                if calls == fail_at {
                    panic!("the callback failed");
                }
                calls += 1;
                delivered += c;
            })
        }));
        assert!(r.is_err());
        let held: u64 = (0..N).map(|k| w.sum_at(&k, SLICE)).sum();
        assert_eq!(delivered + held, total, "failing at call {fail_at}");
        // Put the delivered counts back for the next round.
        let mut left = delivered;
        for k in 0..N {
            let n = left.min(1_000);
            if n > 0 {
                assert!(w.add_at(&k, SLICE, n));
                left -= n;
            }
        }
    }
    // One key's take: the failing slice's count goes back.
    let before = w.sum_at(&3, SLICE);
    let r = panic::catch_unwind(AssertUnwindSafe(|| w.take(&3, |_, _| panic!("no"))));
    assert!(r.is_err());
    assert_eq!(w.sum_at(&3, SLICE), before);
}

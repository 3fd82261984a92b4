//! A key whose every `Hash`, `Eq`, `Clone` and `Drop` call is counted and
//! may be told to panic on its N-th call, and the harness that runs a
//! scripted workload once per such call (`keyed_user_code.rs`).
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use stripecount::Timestamp;

/// The payload of an injected panic.
pub const BOOM: &str = "a Faulty key was told to panic";
pub const SLICE: u64 = 1_000_000_000;

/// The time `ns` nanoseconds after the origin.
pub const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}
/// Few keys: no shard grows to a bigger table (a move that panics aborts,
/// which `keyed_panics.rs` tests on its own).
pub const KEYS: u64 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    Hash = 0,
    Eq = 1,
    Clone = 2,
    Drop = 3,
}

pub const SITES: [Site; 4] = [Site::Hash, Site::Eq, Site::Clone, Site::Drop];

thread_local! {
    /// Calls made so far, per site.
    pub static CALLS: Cell<[u32; 4]> = const { Cell::new([0; 4]) };
    /// The call that panics: `(site, n)` panics on that site's `n`-th call
    /// (from 0), once.
    pub static FAULT: Cell<Option<(Site, u32)>> = const { Cell::new(None) };
    /// `Faulty` values alive.
    pub static LIVE: Cell<i64> = const { Cell::new(0) };
    /// Faults that fired.
    static FIRED: Cell<u32> = const { Cell::new(0) };
}

pub fn tick(site: Site) {
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
pub struct Live;

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
pub struct Faulty {
    pub id: u64,
    _live: Live,
}

impl Faulty {
    pub fn new(id: u64) -> Faulty {
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
pub type Fixed = BuildHasherDefault<DefaultHasher>;

pub fn quiet_expected_panics() {
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
pub fn paused<R>(f: impl FnOnce() -> R) -> R {
    let (fault, calls) = (FAULT.replace(None), CALLS.get());
    let r = f();
    FAULT.set(fault);
    CALLS.set(calls);
    r
}

/// One run of a workload: the keys, and what its steps did.
pub struct Run {
    pub keys: Vec<Faulty>,
    /// Per key: the sum of adds that returned counted, and of adds that
    /// panicked (which may or may not have counted).
    pub counted: RefCell<Vec<u64>>,
    pub unsure: RefCell<Vec<u64>>,
    /// Per key: what takes delivered.
    pub taken: RefCell<Vec<u64>>,
    pub panics: Cell<u32>,
}

impl Run {
    /// A run whose calls are counted from now, and `fault` armed.
    pub fn new(fault: Option<(Site, u32)>) -> Run {
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
    pub fn step<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
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
    pub fn add(&self, k: usize, n: u64, f: impl FnOnce() -> bool) {
        match self.step(f) {
            Some(true) => self.counted.borrow_mut()[k] += n,
            Some(false) => {}
            None => self.unsure.borrow_mut()[k] += n,
        }
    }

    /// What added to key `k` may have counted.
    pub fn added(&self, k: usize) -> std::ops::RangeInclusive<u64> {
        let lo = self.counted.borrow()[k];
        lo..=lo + self.unsure.borrow()[k]
    }

    /// A callback for takes: credits what it is given.
    pub fn credit(&self, key: &Faulty, c: u64) {
        self.taken.borrow_mut()[key.id as usize] += c;
    }

    /// Ends the armed part: the calls it made. Checks the fault fired at
    /// most once. It may not fire at all: the process's collector is
    /// shared by every test thread, whose guards decide when a retired
    /// table is freed, and so which tables a later slice reuses (their
    /// sizes decide which probes compare keys) and which keys are dropped
    /// during the run rather than at its end; the calls a run makes vary a
    /// little. `sweep` checks that most faults fire.
    pub fn disarm(&self, fault: Option<(Site, u32)>) -> [u32; 4] {
        let calls = CALLS.get();
        FAULT.set(None);
        let fired = self.panics.get();
        assert!(
            fired <= u32::from(fault.is_some()),
            "{fault:?} fired {fired} times"
        );
        FIRED.set(FIRED.get() + fired);
        calls
    }

    /// Checks, once the structure is dropped, that no key is alive but the
    /// run's own.
    pub fn finish(self) {
        assert_eq!(LIVE.get(), KEYS as i64, "keys leaked or dropped twice");
        drop(self);
        assert_eq!(LIVE.get(), 0);
    }
}

/// Runs `scenario` once clean, then once per call it made at each of
/// `sites`, with that call panicking. `scenario` checks its own results
/// and returns the calls it made while armed.
pub fn sweep(name: &str, sites: &[Site], scenario: impl Fn(Option<(Site, u32)>) -> [u32; 4]) {
    quiet_expected_panics();
    let calls = scenario(None);
    for &site in sites {
        FIRED.set(0);
        let n = calls[site as usize];
        assert!(n > 0, "{name}: no {site:?} call to break");
        // Under Miri, two calls (the first and one halfway: each run takes
        // seconds there); natively, and under the sanitizers, every call.
        let step = if cfg!(miri) { n.div_ceil(2) } else { 1 };
        let mut runs = 0;
        for i in (0..n).step_by(step as usize) {
            scenario(Some((site, i)));
            runs += 1;
        }
        let fired = FIRED.get() as usize;
        assert!(
            2 * fired >= runs,
            "{name}: {site:?}: {fired} of {runs} faults fired"
        );
    }
}

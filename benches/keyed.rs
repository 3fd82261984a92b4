//! Per-key adds: `KeyedWindows` and `HotKeyDetector` against a
//! `DashMap<u64, AtomicU64>` (no window: the floor of a keyed count) and
//! governor's keyed limiter, at 1, 2, 4 and 8 threads sharing one instance.
//!
//! Hashers: ours hash with their default, foldhash under a seed drawn from
//! the operating system (`stripecount::hash::RandomState`); each peer runs
//! twice, on its own default (std's `RandomState`, SipHash-1-3, for both
//! DashMap and governor) and on ours (rows ending `/foldhash`), so that
//! every ratio can be read with the same hasher on both sides.
//! `KeyedWindows::add_at/siphash` is ours on std's hasher.
//!
//! Batches (`keyed_zipf_preinserted` only): `add_many_at(32)` adds the
//! stream 32 keys a call (`add_many_at`, the call's time that of its first
//! key); its peers add one key at a time (none takes more).
//!
//! Every row walks the one Zipf stream of `stripecount_baselines::zipf`
//! (Zipf(1.0) over 1M `u64` keys, the stream the contention report walks),
//! each thread from its own offset, with time advancing 1 ms every 4096
//! adds (10 s windows of 10 slices, so a slice sees about 4M adds and the
//! warm keys have counts in several slices, as in a running service).
//!
//! Groups:
//! - `keyed_zipf_preinserted`: every key inserted beforehand by one untimed
//!   pass (the steady state).
//! - `keyed_zipf_cold`: each measurement starts from an empty structure and
//!   walks the stream from its start (first sightings insert).
//! - `keyed_one_hot_key`: every thread adds to one key, with every add
//!   method, and one instance per thread as the machine's ceiling.
//!
//! Before the timed runs it prints heap bytes per key for 1M keys each
//! added once (counted by a global allocator wrapper, map included) and
//! what a key with adds in all 10 slices costs.

mod common;
mod counting_alloc;

use common::{bench_threads, config, next_index, THREADS};
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::hash::RandomState as Fold;
use stripecount::{HotKeyDetector, KeyedWindows, Timestamp};
use stripecount_baselines::harness::Pool;
use stripecount_baselines::keyed::DashCounter;
use stripecount_baselines::zipf::ZipfStream;

/// Time starts 1 s into the clock's timeline (nanoseconds).
const START_NS: u64 = 1_000_000_000;
/// [`START_NS`] as a time.
const START: Timestamp = Timestamp::from_nanos(START_NS);
/// Adds per millisecond of time.
const ADDS_PER_MS: u64 = 4096;
/// The hot-key detector's threshold (adds in a window): the ~2,800 most
/// frequent keys of the stream reach it.
const THRESHOLD: u64 = 1000;
/// A threshold no key of the stream comes near: the detector's cost on
/// keys far from it.
const FAR: u64 = 1 << 40;
/// Keys a batch call adds.
const BATCH: usize = 32;
/// The key of the one-hot-key rows.
const HOT_KEY: u64 = 7;

fn window() -> Duration {
    Duration::from_secs(10)
}

/// The time of op `i`: 1 ms more every [`ADDS_PER_MS`] ops.
#[inline(always)]
fn now_of(i: u64) -> Timestamp {
    Timestamp::from_nanos(START_NS + (i / ADDS_PER_MS) * 1_000_000)
}

fn windows() -> KeyedWindows<u64, ManualClock> {
    KeyedWindows::builder(window(), 10)
        .clock(ManualClock::new())
        .build()
        .expect("a valid window")
}

fn detector() -> HotKeyDetector<u64, ManualClock> {
    detector_of(THRESHOLD)
}

fn detector_of(threshold: u64) -> HotKeyDetector<u64, ManualClock> {
    HotKeyDetector::builder(window(), 10, threshold)
        .clock(ManualClock::new())
        .build()
        .expect("a valid detector")
}

type Governor = governor::DefaultKeyedRateLimiter<u64>;

fn governor() -> Governor {
    governor::RateLimiter::keyed(governor::Quota::per_second(NonZeroU32::MAX))
}

type GovernorFold = governor::RateLimiter<
    u64,
    governor::state::keyed::DashMapStateStore<u64, Fold>,
    governor::clock::DefaultClock,
    governor::middleware::NoOpMiddleware,
>;

fn governor_fold() -> GovernorFold {
    governor::RateLimiter::dashmap_with_hasher(
        governor::Quota::per_second(NonZeroU32::MAX),
        Fold::new(),
    )
}

/// The structures of the Zipf rows, each with its add.
trait Subject: Send + Sync + 'static {
    fn make() -> Self;
    fn add(&self, key: u64, now: Timestamp);
}

struct Kw(KeyedWindows<u64, ManualClock>);
impl Subject for Kw {
    fn make() -> Self {
        Kw(windows())
    }
    #[inline(always)]
    fn add(&self, key: u64, now: Timestamp) {
        black_box(self.0.add_at(&key, now, 1));
    }
}

struct KwSum(KeyedWindows<u64, ManualClock>);
impl Subject for KwSum {
    fn make() -> Self {
        KwSum(windows())
    }
    #[inline(always)]
    fn add(&self, key: u64, now: Timestamp) {
        black_box(self.0.add_and_sum_at(&key, now, 1));
    }
}

struct Hk(HotKeyDetector<u64, ManualClock>);
impl Subject for Hk {
    fn make() -> Self {
        Hk(detector())
    }
    #[inline(always)]
    fn add(&self, key: u64, now: Timestamp) {
        black_box(self.0.add_at(&key, now, 1));
    }
}

struct KwSip(KeyedWindows<u64, ManualClock, std::collections::hash_map::RandomState>);
impl Subject for KwSip {
    fn make() -> Self {
        KwSip(
            KeyedWindows::builder(window(), 10)
                .clock(ManualClock::new())
                .hasher(std::collections::hash_map::RandomState::new())
                .build()
                .expect("a valid window"),
        )
    }
    #[inline(always)]
    fn add(&self, key: u64, now: Timestamp) {
        black_box(self.0.add_at(&key, now, 1));
    }
}

struct HkFar(HotKeyDetector<u64, ManualClock>);
impl Subject for HkFar {
    fn make() -> Self {
        HkFar(detector_of(FAR))
    }
    #[inline(always)]
    fn add(&self, key: u64, now: Timestamp) {
        black_box(self.0.add_at(&key, now, 1));
    }
}

struct DmFold(DashCounter<u64, Fold>);
impl Subject for DmFold {
    fn make() -> Self {
        DmFold(DashCounter::with_hasher(Fold::new()))
    }
    #[inline(always)]
    fn add(&self, key: u64, _: Timestamp) {
        black_box(self.0.add(&key, 1));
    }
}

struct GvFold(GovernorFold);
impl Subject for GvFold {
    fn make() -> Self {
        GvFold(governor_fold())
    }
    #[inline(always)]
    fn add(&self, key: u64, _: Timestamp) {
        let _ = black_box(self.0.check_key(&key));
    }
}

struct Dm(DashCounter<u64>);
impl Subject for Dm {
    fn make() -> Self {
        Dm(DashCounter::new())
    }
    #[inline(always)]
    fn add(&self, key: u64, _: Timestamp) {
        black_box(self.0.add(&key, 1));
    }
}

struct Gv(Governor);
impl Subject for Gv {
    fn make() -> Self {
        Gv(governor())
    }
    #[inline(always)]
    fn add(&self, key: u64, _: Timestamp) {
        let _ = black_box(self.0.check_key(&key));
    }
}

/// Heap bytes per key for every key of the distribution added once, and
/// the same structure's count with one of them holding adds in every slice.
fn per_key_bytes<S: Subject>(z: &ZipfStream) -> f64 {
    let before = counting_alloc::live_bytes();
    let s = S::make();
    let mut n = 0u64;
    for k in z.all_keys() {
        s.add(k, START);
        n += 1;
    }
    let after = counting_alloc::live_bytes();
    drop(s);
    (after - before) as f64 / n as f64
}

fn memory_report(z: &ZipfStream) {
    let kw = per_key_bytes::<Kw>(z);
    let hk = per_key_bytes::<Hk>(z);
    let dm = per_key_bytes::<Dm>(z);
    let gv = per_key_bytes::<Gv>(z);
    let w = windows();
    for s in 0..10u64 {
        w.add_at(&HOT_KEY, START + Duration::from_secs(s), 1);
    }
    let ten = w.key_memory_bytes(&HOT_KEY);
    println!("heap bytes per key, 1M u64 keys each added once (map included):");
    println!(
        "  KeyedWindows (10 slices): {kw:.1} B/key; a key with adds in all 10 slices holds one \
         inline slot in each slice's map, + {ten} B outside the slots"
    );
    println!("  HotKeyDetector (10 slices): {hk:.1} B/key");
    println!("  DashMap<u64, AtomicU64>: {dm:.1} B/key");
    println!("  governor keyed limiter: {gv:.1} B/key");
}

/// One Zipf row: `S` walks the stream from thread `t`'s offset.
fn zipf_row<S: Subject>(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pool: &Pool,
    z: &Arc<ZipfStream>,
    name: &str,
    preinsert: bool,
) {
    let threads = pool.threads();
    // Thread `t` starts at `stride * t` (`ZipfStream::offset`), computed
    // once here: `offset` divides, and a 64-bit division in every timed
    // op cost ~10 ns a request in a criterion-shaped loop of `KeyedLimiter`
    // (BENCHMARKS.md).
    let stride = z.offset(1, threads);
    if preinsert {
        // Filled at the time of the row's first op (`next_index`): filled
        // at `START`, every key would be many windows old by then (the
        // earlier rows' ops advance the time), and the row would time the
        // fill's expiry instead of the steady state.
        let s = S::make();
        let at = now_of(next_index());
        for k in z.all_keys() {
            s.add(k, at);
        }
        bench_threads(g, pool, name, Arc::new((s, z.clone())), move |s, t, i| {
            let z = &s.1;
            s.0.add(z.key(stride * t + i as usize), now_of(i));
        });
        return;
    }
    // Cold: a fresh structure for every measurement, time from START.
    g.throughput(Throughput::Elements(1));
    g.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, _| {
        b.iter_custom(|iters| {
            let s = Arc::new((S::make(), z.clone()));
            let run = s.clone();
            let elapsed = pool.run_ops(iters, move |t, i| {
                let z = &run.1;
                run.0.add(z.key(stride * t + i as usize), now_of(i));
            });
            // Dropped outside the timed region.
            drop(s);
            elapsed / threads as u32
        })
    });
}

fn zipf(c: &mut Criterion, z: &Arc<ZipfStream>) {
    for (group, preinsert) in [("keyed_zipf_preinserted", true), ("keyed_zipf_cold", false)] {
        let mut g = c.benchmark_group(group);
        for threads in THREADS {
            let pool = Pool::new(threads);
            zipf_row::<Kw>(&mut g, &pool, z, "KeyedWindows::add_at", preinsert);
            zipf_row::<Hk>(&mut g, &pool, z, "HotKeyDetector::add_at", preinsert);
            zipf_row::<KwSum>(&mut g, &pool, z, "KeyedWindows::add_and_sum_at", preinsert);
            zipf_row::<Dm>(&mut g, &pool, z, "DashMap<u64,AtomicU64>", preinsert);
            zipf_row::<Gv>(&mut g, &pool, z, "governor::keyed", preinsert);
            if preinsert {
                zipf_row::<KwSip>(&mut g, &pool, z, "KeyedWindows::add_at/siphash", true);
                zipf_row::<HkFar>(&mut g, &pool, z, "HotKeyDetector::add_at/far", true);
                zipf_row::<DmFold>(&mut g, &pool, z, "DashMap<u64,AtomicU64>/foldhash", true);
                zipf_row::<GvFold>(&mut g, &pool, z, "governor::keyed/foldhash", true);
                batch_rows(&mut g, &pool, z);
            }
        }
        g.finish();
    }
}

/// The batch rows: op `i` of a thread adds the stream's keys `i..i + BATCH`
/// (from the thread's offset) in one call when `i` is a multiple of
/// `BATCH`, and does nothing otherwise, so that the row's operations a
/// second are adds a second (the empty ops' loop is counted against it).
fn batch_rows(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pool: &Pool,
    z: &Arc<ZipfStream>,
) {
    let stride = z.offset(1, pool.threads());
    let at = now_of(next_index());
    let w = windows();
    let d = detector();
    for k in z.all_keys() {
        w.add_at(&k, at, 1);
        d.add_at(&k, at, 1);
    }
    let keys = move |z: &ZipfStream, t: usize, i: u64| -> [u64; BATCH] {
        let from = stride * t + i as usize;
        std::array::from_fn(|j| z.key(from + j))
    };
    let name = format!("KeyedWindows::add_many_at({BATCH})");
    bench_threads(g, pool, &name, Arc::new((w, z.clone())), move |s, t, i| {
        if i % BATCH as u64 == 0 {
            let ks = keys(&s.1, t, i);
            black_box(s.0.add_many_at(ks.iter().map(|k| (k, 1)), now_of(i)));
        }
    });
    let name = format!("HotKeyDetector::add_many_at({BATCH})");
    bench_threads(g, pool, &name, Arc::new((d, z.clone())), move |s, t, i| {
        if i % BATCH as u64 == 0 {
            let ks = keys(&s.1, t, i);
            s.0.add_many_at(ks.iter().map(|k| (k, 1)), now_of(i), |k, _| {
                black_box(k);
            });
        }
    });
}

fn one_hot_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_one_hot_key");
    for threads in THREADS {
        let pool = Pool::new(threads);
        let s = Arc::new(windows());
        bench_threads(&mut g, &pool, "KeyedWindows::add_at", s, |w, _, i| {
            black_box(w.add_at(&HOT_KEY, now_of(i), 1));
        });
        let s = Arc::new(windows());
        bench_threads(
            &mut g,
            &pool,
            "KeyedWindows::add_and_sum_at",
            s,
            |w, _, i| {
                black_box(w.add_and_sum_at(&HOT_KEY, now_of(i), 1));
            },
        );
        let s = Arc::new(detector());
        bench_threads(&mut g, &pool, "HotKeyDetector::add_at", s, |d, _, i| {
            black_box(d.add_at(&HOT_KEY, now_of(i), 1));
        });
        // The ceiling: every thread its own instance (nothing shared).
        let own = Arc::new((0..threads).map(|_| windows()).collect::<Vec<_>>());
        bench_threads(
            &mut g,
            &pool,
            "KeyedWindows-per-thread(ideal)",
            own,
            |o, t, i| {
                black_box(o[t].add_at(&HOT_KEY, now_of(i), 1));
            },
        );
        let s = Arc::new(Dm::make());
        bench_threads(&mut g, &pool, "DashMap<u64,AtomicU64>", s, |m, _, i| {
            m.add(HOT_KEY, now_of(i));
        });
        let s = Arc::new(Gv::make());
        bench_threads(&mut g, &pool, "governor::keyed", s, |l, _, i| {
            l.add(HOT_KEY, now_of(i));
        });
    }
    g.finish();
}

fn main() {
    let z = Arc::new(ZipfStream::new());
    memory_report(&z);
    let mut c = config();
    zipf(&mut c, &z);
    one_hot_key(&mut c);
    c.final_summary();
}

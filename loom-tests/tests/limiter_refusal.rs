#![cfg(loom)]
//! Loom models of a refusal's times (`src/limiter/decide.rs`,
//! `src/limiter/times.rs`): a single-limit refusal is decided on the state
//! word of epoch `E`, then reads the window that word belongs to (the
//! inline history word, or a block's `frozen` and ring) to keep or compute
//! when the request would fit and when the window empties. Rolls racing it
//! replace that window; a refusal that finds it replaced (an inline word of
//! another epoch, a `frozen` of another epoch, or the state no longer at
//! `E` after the ring walk) is decided again. Every refusal must report the
//! times true at the epoch it was refused at.
//!
//! The naive design, which reads the window after the verdict and trusts
//! it, is the counter-example: a roll that overwrote the slot of the slice
//! the refusal waits for makes it report a later retry time.
//!
//! Slices of 1 ns, two of them: the time in nanoseconds is the epoch. Under
//! loom a count field of the inline history is 1 bit wide, so a slice that
//! counted 2 spills into a block.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount::clock::ManualClock;
use stripecount::{Decision, RateLimiter};
use stripecount_loom_tests::{sliding, t};

/// A refusal of 1 permit at time 1 (slice 0 holds the window's `limit`
/// permits), racing grants of 1 at times 2 and 3 (rolls into slices 2 and
/// 3: the second writes slice 2's count over slice 0's slot, or moves the
/// inline word twice). Returns the refused-or-granted decision of time 1.
fn refusal_racing_rolls(limit: u64) -> (Decision, Vec<bool>) {
    let lim: Arc<RateLimiter<ManualClock>> = sliding(limit, 2);
    assert!(lim.decide_at(t(0), limit).is_granted());
    let refused = {
        let lim = lim.clone();
        thread::spawn(move || lim.decide_at(t(1), 1))
    };
    let rolls = {
        let lim = lim.clone();
        thread::spawn(move || {
            vec![
                lim.decide_at(t(2), 1).is_granted(),
                lim.decide_at(t(3), 1).is_granted(),
            ]
        })
    };
    (refused.join().unwrap(), rolls.join().unwrap())
}

/// `d`'s retry and reset times in nanoseconds.
fn times(d: &Decision) -> (u64, u64) {
    let retry = d
        .retry_after()
        .expect("an exhausted window has a retry time");
    (retry.as_nanos() as u64, d.reset_after().as_nanos() as u64)
}

/// With a block (2 permits in slice 0, a count the 1-bit inline field
/// cannot hold): refused at epoch 1, the request fits and the window
/// empties when slice 0 leaves, at 2 (1 ns after time 1); decided at
/// epoch 2 it is granted (slice 2 holds 1); at epoch 3 (slices 2 and 3
/// hold 1 each) it is refused until slice 2 leaves, at 4, and the window
/// empties at 5.
#[test]
fn a_refusal_reads_the_block_of_its_own_epoch() {
    stripecount_loom_tests::model(|| {
        let (d, _) = refusal_racing_rolls(2);
        if !d.is_granted() {
            let at = times(&d);
            assert!(at == (1, 1) || at == (3, 4), "{d:?}");
            assert_eq!(d.remaining(), 0);
        }
    });
}

/// With the counts inline (1 permit in slice 0): refused at epoch 1 the
/// request fits at 2; at epoch 2 (slice 2 holds 1) or 3 (slice 2 holds 1,
/// slice 3 none) it fits when slice 2 leaves, at 4, which is also when the
/// window empties.
#[test]
fn a_refusal_reads_the_inline_word_of_its_own_epoch() {
    stripecount_loom_tests::model(|| {
        let (d, _) = refusal_racing_rolls(1);
        if !d.is_granted() {
            let at = times(&d);
            assert!(at == (1, 1) || at == (3, 3), "{d:?}");
        }
    });
}

/// The naive refusal: decide at an epoch, then read the slot of the slice
/// the request waits for, trusting it. A two-slot ring: slice `k`'s count
/// in slot `k % 2`, as `k << 32 | count`. Refused at epoch 1, the request
/// waits for slice 0 (count 2) to leave, at 2; a roller closing slices 1
/// and 2 writes slice 2's count over slot 0 meanwhile, and the naive
/// refusal, finding no count for slice 0, says the request fits only when
/// the whole window has gone, at 3.
fn naive_refusal_trusts_the_ring() {
    let epoch = Arc::new(AtomicU64::new(1));
    let ring = Arc::new([AtomicU64::new(2), AtomicU64::new(u64::MAX << 32)]);
    let refuser = {
        let (epoch, ring) = (epoch.clone(), ring.clone());
        thread::spawn(move || {
            let e = epoch.load(Ordering::Acquire);
            // Refused at `e` (the window holds the limit): when does slice
            // `e - 1` leave, if it has a count?
            let w = ring[((e - 1) % 2) as usize].load(Ordering::Acquire);
            let at = if w >> 32 == e - 1 && w & 0xffff_ffff > 0 {
                e + 1
            } else {
                e + 2
            };
            (e, at)
        })
    };
    let roller = thread::spawn(move || {
        for k in 1..3u64 {
            ring[(k % 2) as usize].store(k << 32 | 1, Ordering::Release);
            epoch.store(k + 1, Ordering::Release);
        }
    });
    roller.join().unwrap();
    let (e, at) = refuser.join().unwrap();
    if e == 1 {
        assert_eq!(at, 2, "refused at epoch 1, slice 0 leaves at 2");
    }
}

#[test]
fn loom_catches_a_refusal_that_trusts_the_ring() {
    stripecount_loom_tests::expect_failure("trust the ring", naive_refusal_trusts_the_ring);
}

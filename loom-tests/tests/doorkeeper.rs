//! The fixed-memory detector's doorkeeper (`src/keyed/doorkeeper.rs`): the
//! adds of one key at one epoch that it keeps back (does not admit to
//! exact counting) total at most `level - 1`, whatever the interleaving,
//! also while another slice moves the word and late adds arrive. The
//! naive gate (load the count, store it raised) is the counter-example:
//! two racing adds both see the old count and both are kept back.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_keyed::ModelDoorkeeper;
use stripecount_loom_tests::{expect_failure, model};

/// Runs `adds[t]` (each `(hash, epoch, n)`) on thread `t` through `admit`
/// and returns every kept-back add.
fn race<F>(admit: F, adds: Vec<Vec<(u64, u64, u64)>>) -> Vec<(u64, u64, u64)>
where
    F: Fn(u64, u64, u64) -> bool + Clone + Send + 'static,
{
    let handles: Vec<_> = adds
        .into_iter()
        .map(|mine| {
            let admit = admit.clone();
            thread::spawn(move || {
                mine.into_iter()
                    .filter(|&(h, e, n)| !admit(h, e, n))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// The kept-back total of `hash` at `epoch`.
fn kept(all: &[(u64, u64, u64)], hash: u64, epoch: u64) -> u64 {
    all.iter()
        .filter(|a| a.0 == hash && a.1 == epoch)
        .map(|a| a.2)
        .sum()
}

/// One key, three threads at one epoch: at most `level - 1` kept back, and
/// the adds past it are admitted.
#[test]
fn racing_adds_keep_back_at_most_the_level_less_one() {
    model(|| {
        let d = Arc::new(ModelDoorkeeper::new(2));
        let all = race(
            move |h, e, n| d.admit(h, e, n),
            vec![vec![(7, 1, 1), (7, 1, 1)], vec![(7, 1, 1)], vec![(7, 1, 1)]],
        );
        assert!(kept(&all, 7, 1) <= 1, "{all:?}");
        // Four adds of 1 at level 2: exactly one is kept back.
        assert_eq!(all.len(), 1, "{all:?}");
    });
}

/// Adds at the next epoch move the word while adds at the older one race:
/// the bound holds at both epochs (late adds are admitted, carry-over only
/// admits sooner).
#[test]
fn a_slice_moving_the_word_keeps_the_bound_at_both_epochs() {
    model(|| {
        let d = Arc::new(ModelDoorkeeper::new(3));
        let all = race(
            move |h, e, n| d.admit(h, e, n),
            vec![
                vec![(7, 1, 2), (7, 1, 1)],
                vec![(7, 2, 1), (7, 2, 2)],
                vec![(9, 2, 1), (7, 1, 1)],
            ],
        );
        for e in [1, 2] {
            assert!(kept(&all, 7, e) <= 2, "epoch {e}: {all:?}");
        }
        assert!(kept(&all, 9, 2) <= 2, "{all:?}");
    });
}

/// Counter-example: the naive gate (load, then store the raised count)
/// keeps back two racing adds at level 2.
#[test]
fn naive_gate_is_caught() {
    expect_failure("load-then-store gate", || {
        let word = Arc::new(AtomicU64::new(0));
        let level = 2;
        let all = race(
            move |_, _, n| {
                let c = word.load(Ordering::Relaxed);
                let raised = (c + n).min(level);
                word.store(raised, Ordering::Relaxed);
                raised >= level
            },
            vec![vec![(7, 1, 1)], vec![(7, 1, 1)]],
        );
        assert!(kept(&all, 7, 1) < level, "kept back {all:?}");
    });
}

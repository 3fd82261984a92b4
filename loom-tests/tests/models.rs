//! Every loom model, one module a protocol (each file of this folder), in
//! one test binary: the models share the library and loom's runtime, which
//! one build compiles and links once. Built and run only with
//! `RUSTFLAGS="--cfg loom"`; `scripts/test.sh` runs the binary twice side
//! by side, split by module, one model at a time in each (a model uses the
//! library's statics, which loom allows in one model at a time).
#![cfg(loom)]

mod clock;
mod counter;
mod doorkeeper;
mod keyed;
mod keyed_batch;
mod keyed_bound;
mod keyed_entry;
mod keyed_home;
mod keyed_limiter;
mod keyed_naive;
mod keyed_refusals;
mod keyed_sweep_due;
mod lease_lane;
mod lease_word;
mod limiter;
mod limiter_inline;
mod limiter_limits;
mod limiter_refusal;
mod limiter_state;
mod map_reclaim;
mod map_walk;
mod multi;
mod reclaim;
mod reclaim_repin;
mod window;

//! What stripecount is measured against, and how: the designs it replaces
//! (some deliberately racy, see each type; [`clocks`] has the obvious
//! clock clamp), the crates' shared measuring
//! [`harness`] (N parked threads sharing one instance, timed after a
//! barrier), the one skewed key stream ([`zipf`]) and the op time stamps
//! ([`stamp`]) used by both the criterion benches and the report.
#![warn(missing_docs)]

pub mod clocks;
pub mod counters;
pub mod harness;
pub mod keyed;
pub mod limiters;
pub mod rings;
pub mod stamp;
pub mod zipf;

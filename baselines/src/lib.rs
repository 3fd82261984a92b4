//! Baselines for stripecount's benchmarks and report: the designs it
//! replaces (some deliberately racy, see each type), and [`harness`], which
//! runs one operation on N threads sharing one instance with the timer
//! started after a barrier and the threads created outside the timed region.
#![warn(missing_docs)]

pub mod counters;
pub mod harness;
pub mod keyed;
pub mod limiters;
pub mod rings;

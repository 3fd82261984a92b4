//! Loom models of stripecount's atomic protocols live in `tests/`. They only
//! compile under `RUSTFLAGS="--cfg loom"`; see the repository README.

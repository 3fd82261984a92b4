//! Limiter baselines (filled in by the limiter work).

//! Per-key baselines (filled in by the keyed work).

//! Placeholder: filled in by the limiter work.

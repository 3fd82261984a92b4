//! Placeholder: filled in by the multi work.

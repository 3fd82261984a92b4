//! Placeholder: filled in by the keyed work.

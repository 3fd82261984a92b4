//! A guide to stripecount (documentation only).

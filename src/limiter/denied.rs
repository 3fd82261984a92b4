//! [`Denied`]: why a limiter refused a request. The reason travels on its
//! own (a `Result`'s error, a wait's answer) and inside a
//! [`Decision`](super::Decision).

use std::fmt;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denied {
    /// The request asks for more permits than the limit: it can never be
    /// granted (`n > limit`).
    ExceedsLimit,
    /// The window has no room for the request now; it may fit later (see
    /// `retry_after_at`).
    Exhausted,
    /// A per-key limiter holds its maximum number of keys, none of them
    /// idle, and refuses keys it cannot track (see the builder's
    /// [`max_keys`](crate::limiter::KeyedLimiterBuilder::max_keys)): an
    /// overload of the limiter, not of the key's quota.
    TooManyKeys,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::ExceedsLimit => write!(f, "the request asks for more permits than the limit"),
            Denied::Exhausted => write!(f, "the window has no room for the request now"),
            Denied::TooManyKeys => write!(f, "the limiter cannot track more keys now"),
        }
    }
}

impl std::error::Error for Denied {}

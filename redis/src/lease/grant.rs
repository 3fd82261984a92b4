//! [`Grant`]: how a [`ClusterLimiter`](crate::ClusterLimiter) decided a
//! request.

use std::time::Duration;
use stripecount::Timestamp;

/// How one request was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// Granted from this node's lease of one server slice (a held lease,
    /// or one this request fetched): counted in Redis in that slice, and
    /// granted while that slice was current on the server's clock.
    Granted {
        /// The start of the server slice the permits are counted in, on the
        /// server's timeline (Unix time, as
        /// [`ClusterLimiter::time`](crate::ClusterLimiter::time) estimates
        /// it); a whole multiple of the slice length. The permits count
        /// against the key's window until `slice_start + window` (plus a
        /// slice for a [`strict`](stripecount::Quota::strict) quota): from
        /// then on they no longer take room from anyone. An audit can
        /// also check the limit from these: the permits granted with slice
        /// starts in any `slices` consecutive slices (`slices + 1` when
        /// strict) are at most the limit.
        slice_start: Timestamp,
    },
    /// Refused: the key's cluster window had no room for the request (or
    /// it asks for more than the limit).
    Refused {
        /// When enough of the window's oldest slices leave it for the
        /// request to fit, as Redis saw the window (`None`: never, the
        /// request exceeds the limit; or unknown). Permits other nodes
        /// return may free room sooner.
        retry_after: Option<Duration>,
    },
    /// Redis unreachable: admitted by the outage policy.
    OutageAdmitted,
    /// Redis unreachable: refused by the outage policy. (Also the answer
    /// of a request still waiting for Redis when its limiter is dropped.)
    OutageRefused,
    /// Not decided: the requests of the key's group waiting for Redis on
    /// this node already fill its queue
    /// ([`max_queue`](crate::ClusterLimiterBuilder::max_queue)), so the
    /// request was shed at once, before any round trip (a flood of new
    /// keys faster than Redis answers them). Nothing was counted; asking
    /// again after `retry_after` (the time this node expects to need to
    /// drain the queue) may fit. With
    /// [`Shed::Outage`](crate::Shed::Outage) the outage policy decides
    /// such requests instead.
    Overloaded {
        /// When the queue should have room again: its batches, each a
        /// round trip as long as the group's last one.
        retry_after: Duration,
    },
}

impl Grant {
    /// Whether the request was granted (by a lease or the outage policy).
    pub fn is_granted(&self) -> bool {
        matches!(self, Grant::Granted { .. } | Grant::OutageAdmitted)
    }
}

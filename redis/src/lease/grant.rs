//! [`Grant`]: how a [`ClusterLimiter`](crate::ClusterLimiter) decided a
//! request.

use std::time::Duration;

/// How one request was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// Granted from this node's lease of server slice `slice` (a held lease,
    /// or one this request fetched): counted in Redis in that slice, and
    /// granted while that slice is current on the server's clock.
    Granted {
        /// The server slice (epoch) of the lease.
        slice: u64,
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
    /// Redis unreachable: refused by the outage policy.
    OutageRefused,
}

impl Grant {
    /// Whether the request was granted (by a lease or the outage policy).
    pub fn is_granted(&self) -> bool {
        matches!(self, Grant::Granted { .. } | Grant::OutageAdmitted)
    }
}

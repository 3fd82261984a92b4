//! `TIME` samples over a [`Link`]: a request sent at node time `t0` and
//! its reply read at `t1`, filed into the node's [`ServerTime`] (see
//! `timeline.rs` for the bound a sample gives). A newly opened connection
//! may reach another server, so its first samples start the bound afresh.

use crate::error::ClusterError;
use crate::link::Link;
use crate::script::{time_us, Request};
use crate::timeline::ServerTime;
use redis::Value;
use stripecount::{Clock, Timestamp};

impl Link {
    /// Opens a connection if none is open, and on a new one samples the
    /// server's time three times into `time` (forgetting older samples:
    /// it may be another server). Returns whether it opened one and how
    /// many samples were accepted.
    pub(crate) fn ensure_sampled<C: Clock>(
        &mut self,
        time: &ServerTime<C>,
    ) -> Result<(bool, u64), ClusterError> {
        if !self.ensure()? {
            return Ok((false, 0));
        }
        time.reset_bound();
        let mut t = Request::new(1);
        t.arg(b"TIME");
        let mut n = 0;
        for _ in 0..3 {
            let t0 = time.node_clock().now();
            let v = self.request(&t.bytes)?;
            n += u64::from(sample_time(time, t0, &v)?);
        }
        Ok((true, n))
    }
}

/// Files a `TIME` reply received now for a request sent at node time
/// `t0`; returns whether the sample was accepted.
pub(crate) fn sample_time<C: Clock>(
    time: &ServerTime<C>,
    t0: Timestamp,
    v: &Value,
) -> Result<bool, ClusterError> {
    let t1 = time.node_clock().now();
    let Value::Array(a) = v else {
        return Err(ClusterError::Protocol("TIME is not an array".into()));
    };
    if a.len() != 2 {
        return Err(ClusterError::Protocol("TIME has the wrong length".into()));
    }
    let us = time_us(&a[0], &a[1])?;
    Ok(time.sample(t0, t1, Timestamp::from_nanos(us.saturating_mul(1_000))))
}

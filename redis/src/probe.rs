//! The round trips besides batches: the probe that opens a flush (a
//! connection, a `TIME` sample, the hot version), the read of the hot
//! set's changes that closes it, and the exact read of one key's ring
//! (`fresh_sum`).
//!
//! None of them changes what Redis holds: each may be repeated after any
//! failure. The exact read resolves the group's batch in flight first, so
//! the ring it reads holds the counts that batch carried, or the batch is
//! still counted as pending: never both, never neither.

use crate::bucket::{ring_read_request, write_field};
use crate::error::ClusterError;
use crate::health::bump;
use crate::key::RedisKey;
use crate::link::sample_time;
use crate::node::{Inner, Sender};
use crate::results::FlushReport;
use crate::ring::Ring;
use crate::script::{hot_read_request, int, HotReply, Request};
use crate::sync::{read, write};
use redis::Value;
use stripecount::Clock;

impl<K: RedisKey, C: Clock> Inner<K, C> {
    /// Connects if needed, then one round trip: the hot version of the
    /// sender's group and, for the first group, `TIME` (a sample; on a new
    /// connection three more first). The node's timeline is the first
    /// group's server: on a cluster every master files a count by its own
    /// clock (`flush.lua`), so a master whose clock is off by `d` moves
    /// counts only within `d` of a slice edge.
    pub(crate) fn probe(&self, s: &mut Sender<K>) -> Result<u64, ClusterError> {
        let names = &self.names[s.group];
        let mut get = Request::new(2);
        get.arg(b"GET").arg(&names.hotver);
        let v = if s.group == 0 {
            let (opened, samples) = s.link.ensure_sampled(self.time())?;
            if opened {
                bump(&self.counters.connects, 1);
            }
            bump(&self.counters.time_samples, samples);
            let mut req = Request::new(1);
            req.arg(b"TIME");
            req.then(&get);
            let t0 = self.time().node_clock().now();
            let vs = s.link.pipeline(&req.bytes, 2)?;
            if sample_time(self.time(), t0, &vs[0])? {
                bump(&self.counters.time_samples, 1);
            }
            vs.into_iter().nth(1).expect("two replies")
        } else {
            if s.link.ensure()? {
                bump(&self.counters.connects, 1);
            }
            s.link.request(&get.bytes)?
        };
        match v {
            Value::Nil => Ok(0),
            v => int(&v),
        }
    }

    /// Reads the hot set's changes of the sender's group if Redis's
    /// version differs from ours.
    pub(crate) fn read_hot_if(&self, s: &mut Sender<K>, version: u64) -> Result<(), ClusterError> {
        if self.shape.threshold == 0 {
            return Ok(());
        }
        let since = read(&self.hot).version(s.group);
        if version == since {
            return Ok(());
        }
        let req = hot_read_request(&self.hot_lua.sha, &self.names[s.group], since);
        let v = s.link.eval(&self.hot_lua, &req.bytes)?;
        let r = HotReply::decode(&v)?;
        write(&self.hot).apply(s.group, &r);
        Ok(())
    }

    /// Reads `key`'s ring from Redis into the cache (after resolving the
    /// batch in flight, whose counts the ring may already hold).
    pub(crate) fn fresh_ring(&self, s: &mut Sender<K>, k: &K) -> Result<(), ClusterError> {
        self.probe(s)?;
        if s.outbox.is_some() {
            let mut report = FlushReport::new();
            self.send_outbox(s, &mut report)?;
            s.stash.append(&mut report.crossings);
        }
        let mut field = Vec::new();
        write_field(k, &mut field);
        let req = ring_read_request(&self.ring_lua.sha, &self.names[s.group], &field);
        let v = s.link.eval(&self.ring_lua, &req.bytes)?;
        let Value::Array(vs) = v else {
            return Err(ClusterError::Protocol(
                "the ring read is not an array".into(),
            ));
        };
        let (cfg, ring) = match vs.as_slice() {
            [c, r] => (c, r),
            _ => {
                return Err(ClusterError::Protocol(
                    "the ring read has the wrong length".into(),
                ))
            }
        };
        // A ring filed by nodes of another shape would be misread.
        if let Value::BulkString(cfg) = cfg {
            let ours = self.shape.config_string();
            if cfg != ours.as_bytes() {
                return Err(ClusterError::ShapeMismatch(format!(
                    "the namespace is configured as {}, this node as {ours}",
                    String::from_utf8_lossy(cfg)
                )));
            }
        }
        let ring = match ring {
            Value::Nil => Ring::default(),
            Value::BulkString(b) => Ring::decode(b)
                .ok_or_else(|| ClusterError::Protocol("a key's value is not a ring".into()))?,
            _ => {
                return Err(ClusterError::Protocol(
                    "a key's value is not a string".into(),
                ))
            }
        };
        write(&self.state).cache.insert(k.clone(), ring);
        Ok(())
    }
}

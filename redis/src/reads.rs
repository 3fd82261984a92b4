//! The reads of a [`ClusterWindows`]: a key's window sum (whole, in its
//! parts, or fresh from Redis) and the cluster hot set.
//!
//! # Reads
//! `sum_at(key, now)` = the key's cached cluster ring (as Redis last returned it,
//! counting this node's acknowledged counts) + its pending counts + its
//! local counts. The take and the acknowledgement (which moves a batch from
//! pending into the cache) hold the state lock for writing, and a read holds
//! it for reading, so a read sees each count exactly once. Counts other
//! nodes flushed after this node's last flush of the key are not included
//! until its next flush of the key, or a [`fresh_sum`](ClusterWindows::fresh_sum).

use crate::bucket::write_field;
use crate::error::ClusterError;
use crate::key::RedisKey;
use crate::node::ClusterWindows;
use crate::results::SumParts;
use crate::sync::{lock, read};
use std::borrow::Borrow;
use std::hash::Hash;
use stripecount::keyed::KeyRef;
use stripecount::{Clock, Timestamp};

impl<K: RedisKey, C: Clock> ClusterWindows<K, C> {
    /// The key's cluster window sum now (see [`sum_parts_at`](Self::sum_parts_at)).
    pub fn sum<Q>(&self, key: &Q) -> u64
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.sum_at(key, self.now())
    }

    /// The key's cluster window sum at `now` (server timeline).
    pub fn sum_at<Q>(&self, key: &Q, now: Timestamp) -> u64
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.sum_parts_at(key, now).total()
    }

    /// The key's window sum now in its three parts (see
    /// [`sum_parts_at`](Self::sum_parts_at)).
    pub fn sum_parts<Q>(&self, key: &Q) -> SumParts
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.sum_parts_at(key, self.now())
    }

    /// The key's window sum at `now` in its three parts: the cluster ring
    /// Redis last returned to this node (every node's flushed counts as of
    /// then, this node's acknowledged ones included), this node's pending
    /// counts, and its local unflushed counts. Each of this node's counts is
    /// in exactly one part. Needs no round trip.
    pub fn sum_parts_at<Q>(&self, key: &Q, now: Timestamp) -> SumParts
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        let e = now.as_nanos() / i.slice_nanos;
        let floor = e.saturating_sub(i.slices as u64);
        let st = read(&i.state);
        // The pending buffer knows keys by name (`pending.rs`): the key is
        // written only when something is pending at all (during a flush,
        // or while Redis is unreachable).
        let pending = if st.pending.iter().all(|p| p.is_empty()) {
            0
        } else {
            let mut name = Vec::new();
            write_field(&key.to_key(), &mut name);
            st.pending
                .iter()
                .fold(0u64, |s, p| s.saturating_add(p.sum(&name, floor, e)))
        };
        SumParts {
            cluster: st.cache.get(key).map_or(0, |r| r.sum_at(e, i.slices)),
            pending,
            local: i.windows.sum_at(key, now),
        }
    }

    /// The key's cluster window sum now, read from Redis (one round trip,
    /// after resending the batch in flight if there is one): every count
    /// any node had flushed by then, plus this node's unflushed counts.
    pub fn fresh_sum<Q>(&self, key: &Q) -> Result<u64, ClusterError>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.fresh_ring(key)?;
        Ok(self.sum(key))
    }

    /// [`fresh_sum`](Self::fresh_sum) with the window read at `now`
    /// (server timeline) once Redis answered.
    pub fn fresh_sum_at<Q>(&self, key: &Q, now: Timestamp) -> Result<u64, ClusterError>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.fresh_ring(key)?;
        Ok(self.sum_at(key, now))
    }

    /// Reads the key's ring from Redis into the cache.
    fn fresh_ring<Q>(&self, key: &Q) -> Result<(), ClusterError>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        let k = key.to_key();
        let mut s = lock(&i.senders[i.groups.of_key(&k, &mut Vec::new())]);
        let r = i.redirecting(&mut s, |i, s| i.fresh_ring(s, &k));
        i.settle(&mut s, &r);
        r
    }

    /// Whether `key` is hot in the cluster now, as of this node's last
    /// flush (see the crate docs on cluster hot keys).
    pub fn is_cluster_hot<Q>(&self, key: &Q) -> bool
    where
        Q: Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.is_cluster_hot_at(key, self.now())
    }

    /// Whether `key` is hot in the cluster at `now` (server timeline), as
    /// of this node's last flush: a key cools when its window would fall
    /// below the threshold with nothing more added.
    pub fn is_cluster_hot_at<Q>(&self, key: &Q, now: Timestamp) -> bool
    where
        Q: Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let e = now.as_nanos() / self.inner.slice_nanos;
        read(&self.inner.hot).is_hot(key, e)
    }

    /// The keys hot in the cluster now, as of this node's last flush (in
    /// unspecified order).
    pub fn cluster_hot_keys(&self) -> Vec<K> {
        self.cluster_hot_keys_at(self.now())
    }

    /// The keys hot in the cluster at `now` (server timeline), as of this
    /// node's last flush (in unspecified order).
    pub fn cluster_hot_keys_at(&self, now: Timestamp) -> Vec<K> {
        let e = now.as_nanos() / self.inner.slice_nanos;
        read(&self.inner.hot).keys_at(e)
    }

    /// Reads the cluster hot set's changes from Redis now (one or two
    /// round trips) instead of waiting for the next flush.
    pub fn refresh_hot(&self) -> Result<(), ClusterError> {
        let i = &*self.inner;
        let mut first = Ok(());
        for sender in &i.senders {
            let mut s = lock(sender);
            let r = i.redirecting(&mut s, |i, s| {
                let v = i.probe(s)?;
                i.read_hot_if(s, v)
            });
            i.settle(&mut s, &r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

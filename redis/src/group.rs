//! [`Groups`]: how a namespace's keys are spread over a Redis Cluster.
//!
//! Redis Cluster runs a script only when all of its keys hash to one slot
//! (else `CROSSSLOT`), and a flush script touches many data keys plus the
//! node's exactly-once record and the hot set. So on a cluster every Redis
//! key of a namespace carries a *hash tag* (`ns:{t}:b:0:0`): the tag of
//! one of `n` groups. A key's group is the CRC16 of its bytes modulo `n`
//! (the same on every node: it depends on the key's written bytes only),
//! and each group has its own record per node (`ns:{t}:n:<node>`), config
//! key, buckets and hot set, all in the group's slot. A batch holds keys of one
//! group, so every script call touches one slot, and the exactly-once
//! record moves with the keys it guards when the slot is resharded.
//!
//! The tags are chosen so that group `g`'s slot lies in the `g`-th of `n`
//! equal ranges of the 16,384 slots: a cluster whose masters own equal
//! contiguous ranges (what `redis-cli --cluster create` makes) gets the
//! same number of groups on each master, within one.
//!
//! With one group (a single Redis instance) the names carry no tag: the
//! layout is the one a single instance has always had.

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16_384;

/// The CRC16 Redis Cluster hashes keys with (XMODEM: polynomial 0x1021,
/// initial value 0, no reflection).
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a Redis key: of its hash tag (the bytes between the first
/// `{` and the first `}` after it, when not empty), else of the whole key.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS
}

/// The groups of a namespace: how many, and each one's hash tag.
#[derive(Debug, Clone)]
pub(crate) struct Groups {
    /// Empty for one untagged group (a single instance).
    tags: Vec<String>,
}

impl Groups {
    /// One group, no tags: a single Redis instance.
    pub(crate) fn single() -> Groups {
        Groups { tags: Vec::new() }
    }

    /// `n` tagged groups (`1 <= n <= SLOTS`), for a Redis Cluster.
    pub(crate) fn cluster(n: usize) -> Groups {
        assert!(
            (1..=usize::from(SLOTS)).contains(&n),
            "checked by the builder"
        );
        let range = |g: usize| (g * usize::from(SLOTS) / n, (g + 1) * usize::from(SLOTS) / n);
        let tags = (0..n)
            .map(|g| {
                let (lo, hi) = range(g);
                // The first decimal string whose slot is in the range (a
                // range of at least one slot out of 16,384 is hit within a
                // few tens of thousands of candidates).
                (0u64..)
                    .map(|i| i.to_string())
                    .find(|t| (lo..hi).contains(&usize::from(key_slot(t.as_bytes()))))
                    .expect("every slot range holds some tag")
            })
            .collect();
        Groups { tags }
    }

    /// How many groups.
    pub(crate) fn len(&self) -> usize {
        self.tags.len().max(1)
    }

    /// Whether the names carry tags (the namespace is on a cluster).
    #[cfg(test)]
    pub(crate) fn is_cluster(&self) -> bool {
        !self.tags.is_empty()
    }

    /// Group `g`'s slot, `None` on a single instance.
    pub(crate) fn slot(&self, g: usize) -> Option<u16> {
        self.tag(g).map(|t| key_slot(t.as_bytes()))
    }

    /// Group `g`'s tag, `None` on a single instance.
    pub(crate) fn tag(&self, g: usize) -> Option<&str> {
        self.tags.get(g).map(String::as_str)
    }

    /// The group of `key` (its written bytes' group); `buf` is scratch
    /// space, reused by callers that place many keys.
    pub(crate) fn of_key<K: crate::key::RedisKey>(&self, key: &K, buf: &mut Vec<u8>) -> usize {
        if self.tags.len() <= 1 {
            return 0;
        }
        buf.clear();
        key.write_key(buf);
        self.of(buf)
    }

    /// The group of a key written as `bytes`.
    pub(crate) fn of(&self, bytes: &[u8]) -> usize {
        match self.tags.len() {
            0 | 1 => 0,
            n => usize::from(crc16(bytes)) % n,
        }
    }
}

/// What both builders (`ClusterWindows`'s and `ClusterLimiter`'s) set for
/// a Redis Cluster: the groups (`None`: a single instance), the seeds, and
/// the replicas a write waits for (`wait_for_replicas`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterOptions {
    pub(crate) groups: Option<usize>,
    pub(crate) seeds: Vec<String>,
    pub(crate) durability: Option<(u32, std::time::Duration)>,
}

impl ClusterOptions {
    /// Sets the seeds, from both builders' `seeds(urls)`.
    pub(crate) fn set_seeds<I, S>(&mut self, urls: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.seeds = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
    }

    /// A builder's check: `groups` (if set) in `1..=SLOTS`, no brace in the
    /// namespace (it would change the names' hash tags), seeds only with
    /// groups, and a replica count of at least one with a timeout below
    /// the I/O timeout.
    pub(crate) fn validate(
        &self,
        namespace: &str,
        io_timeout: std::time::Duration,
    ) -> Result<(), String> {
        match self.groups {
            Some(g) if g == 0 || g > usize::from(SLOTS) => {
                return Err(format!("{g} groups: a cluster namespace has 1 to 16384"))
            }
            Some(_) if namespace.contains(['{', '}']) => {
                return Err(format!(
                    "the namespace {namespace:?} has a brace: on a cluster the key names' hash tags would be wrong"
                ))
            }
            None if !self.seeds.is_empty() => {
                return Err("seeds are for a Redis Cluster: call redis_cluster too".into())
            }
            _ => {}
        }
        match self.durability {
            Some((n, timeout)) if n == 0 || timeout.is_zero() || timeout >= io_timeout => Err(format!(
                "waiting for {n} replicas for {timeout:?}: needs at least one replica and 0 < timeout < the I/O timeout ({io_timeout:?})"
            )),
            _ => Ok(()),
        }
    }

    /// The groups these options ask for.
    pub(crate) fn groups(&self) -> Groups {
        self.groups.map_or_else(Groups::single, Groups::cluster)
    }

    /// The groups as the config string records them (0: a single instance).
    pub(crate) fn config_groups(&self) -> usize {
        self.groups.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    #[test]
    fn group_tags_spread_evenly_over_the_slots() {
        for n in [1, 3, 16, 64] {
            let g = Groups::cluster(n);
            assert_eq!(g.len(), n);
            for i in 0..n {
                let s = usize::from(key_slot(g.tag(i).unwrap().as_bytes()));
                let (lo, hi) = (i * 16_384 / n, (i + 1) * 16_384 / n);
                assert!((lo..hi).contains(&s), "group {i} of {n}: slot {s}");
                let name = format!("ns:{{{}}}:b:0:{{key}}", g.tag(i).unwrap());
                assert_eq!(usize::from(key_slot(name.as_bytes())), s);
            }
        }
        let single = Groups::single();
        assert_eq!(
            (single.len(), single.is_cluster(), single.tag(0)),
            (1, false, None)
        );
        assert_eq!(single.of(b"anything"), 0);
        let g = Groups::cluster(16);
        let mut seen = [0u32; 16];
        for k in 0..16_000 {
            seen[g.of(format!("k{k}").as_bytes())] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }
}

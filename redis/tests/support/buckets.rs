//! Where Redis keeps a namespace's rings, as `src/bucket.rs` describes it,
//! written again here from that description: the tests read what Redis
//! holds through this, so a layout the script and this disagree on fails.

/// Bucket slots (generations rotate through them).
pub const SLOTS: usize = 4;
/// Sub-buckets a slot.
pub const SUB_BUCKETS: usize = 16;
/// The field every bucket holds besides the keys'.
pub const MARKER: &[u8] = b"\xff";

/// The sub-bucket of a key's field: FNV-1a (32 bits) modulo 16.
pub fn sub_bucket(field: &[u8]) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in field {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h % SUB_BUCKETS as u32) as usize
}

/// Slices a generation: half the window's, rounded up.
pub fn generation_len(slices: u64) -> u64 {
    slices.div_ceil(2)
}

/// A bucket's name: slot `r`, sub-bucket `m`, after `prefix` (`ns`, or
/// `ns:{tag}` for one group on a cluster).
pub fn bucket(prefix: &str, r: usize, m: usize) -> String {
    format!("{prefix}:b:{r}:{m}")
}

/// The generation each slot holds (-1: none).
pub fn generations(conn: &mut redis::Connection, prefix: &str) -> [i64; SLOTS] {
    let v: Option<Vec<u8>> = redis::cmd("GET")
        .arg(format!("{prefix}:bg"))
        .query(conn)
        .unwrap();
    let mut g = [-1; SLOTS];
    if let Some(v) = v {
        assert_eq!(v.len(), 8 * SLOTS, "the slots' generations");
        for (r, w) in v.chunks_exact(8).enumerate() {
            g[r] = f64::from_le_bytes(w.try_into().unwrap()) as i64;
        }
    }
    g
}

/// A key's ring as Redis holds it.
#[derive(Debug)]
pub struct Stored {
    /// The bucket holding it.
    pub bucket: String,
    /// The generation of its slot.
    pub generation: i64,
    /// The stored value.
    pub ring: Vec<u8>,
}

/// The ring of the key written `key` (no escaping: test keys do not start
/// with byte `0xff`) in the slot of the latest generation holding one.
pub fn stored_ring(conn: &mut redis::Connection, prefix: &str, key: &str) -> Option<Stored> {
    let gens = generations(conn, prefix);
    let m = sub_bucket(key.as_bytes());
    let mut best: Option<Stored> = None;
    for (r, &g) in gens.iter().enumerate() {
        let b = bucket(prefix, r, m);
        let v: Option<Vec<u8>> = redis::cmd("HGET").arg(&b).arg(key).query(conn).unwrap();
        if let Some(ring) = v {
            assert!(g >= 0, "{key} in {b}, a slot of no generation");
            if best.as_ref().is_none_or(|s| s.generation < g) {
                best = Some(Stored {
                    bucket: b,
                    generation: g,
                    ring,
                });
            }
        }
    }
    best
}

/// The keys' fields in the buckets on the server of `conn` whose names
/// match `pattern` (each bucket's marker not counted).
pub fn fields(conn: &mut redis::Connection, pattern: &str) -> u64 {
    let names: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn).unwrap();
    names
        .iter()
        .map(|b| {
            let n: u64 = redis::cmd("HLEN").arg(b).query(conn).unwrap();
            let marked: bool = redis::cmd("HEXISTS")
                .arg(b)
                .arg(MARKER)
                .query(conn)
                .unwrap();
            assert!(marked, "{b} has no marker");
            n - 1
        })
        .sum()
}

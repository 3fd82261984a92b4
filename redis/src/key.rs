//! [`RedisKey`]: how a key is named in Redis and read back.

use stripecount::keyed::Key;

/// A key type the cluster layer can store in Redis: written as bytes after
/// the namespace's prefix, and read back from them (hot keys announced by
/// other nodes arrive as bytes).
///
/// Implemented for strings and byte vectors (their bytes), for the
/// integer types (their decimal text, so that `redis-cli` shows them as
/// written) and for `IpAddr` (its text: `192.0.2.1`, `2001:db8::1`).
/// `read_key(write_key(k)) == Some(k)` for every key.
///
/// A flush calls `write_key` once a key, when it takes the key's counts
/// from the local windows (from there on the key is known by that name).
/// If it panics (or the key's `Clone` does there), that key's counts are
/// dropped and counted
/// ([`Stats::dropped_panicked`](crate::Stats::dropped_panicked)); the
/// other keys are flushed (see [`Stats::key_panics`](crate::Stats::key_panics)).
///
/// ```
/// use stripecount_redis::RedisKey;
///
/// let mut out = Vec::new();
/// 42u64.write_key(&mut out);
/// assert_eq!(out, b"42");
/// assert_eq!(u64::read_key(b"42"), Some(42));
/// assert_eq!(String::read_key(b"alice"), Some("alice".to_string()));
/// let ip: std::net::IpAddr = "2001:db8::1".parse().unwrap();
/// out.clear();
/// ip.write_key(&mut out);
/// assert_eq!(std::net::IpAddr::read_key(&out), Some(ip));
/// ```
pub trait RedisKey: Key {
    /// Appends the key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);
    /// The key written as `bytes`, or `None` if they are not one.
    fn read_key(bytes: &[u8]) -> Option<Self>;
}

impl RedisKey for String {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn read_key(bytes: &[u8]) -> Option<Self> {
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }
}

impl RedisKey for Vec<u8> {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn read_key(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

macro_rules! decimal_keys {
    ($($t:ty),*) => {$(
        impl RedisKey for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                use std::io::Write;
                // Writing to a Vec cannot fail.
                let _ = write!(out, "{self}");
            }
            fn read_key(bytes: &[u8]) -> Option<Self> {
                std::str::from_utf8(bytes).ok()?.parse().ok()
            }
        }
    )*};
}
decimal_keys!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    std::net::IpAddr
);

#[cfg(test)]
mod tests {
    use super::RedisKey;

    fn round<K: RedisKey + std::fmt::Debug>(k: K) {
        let mut out = Vec::new();
        k.write_key(&mut out);
        assert_eq!(K::read_key(&out), Some(k));
    }

    #[test]
    fn keys_round_trip() {
        round(String::from("a:b{c}"));
        round(String::new());
        round(vec![0u8, 255, b':']);
        round(u64::MAX);
        round(i64::MIN);
        round(0usize);
        for ip in ["192.0.2.1", "::", "2001:db8::1:0:0:1", "::ffff:192.0.2.1"] {
            round(ip.parse::<std::net::IpAddr>().unwrap());
        }
        assert_eq!(String::read_key(&[0xff]), None);
        assert_eq!(u32::read_key(b"x"), None);
    }
}

//! The bounds every per-key method shares, in one place.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// What a per-key structure's key type must be: hashable, comparable,
/// cloneable (a key is cloned when its slot moves to a bigger table), and
/// shareable across threads. Implemented for every such type.
pub trait Key: Hash + Eq + Clone + Send + Sync + 'static {}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Key for K {}

/// A borrowed form of the key type `K` that per-key methods take, as
/// `HashMap::get` does: a `KeyedWindows<String>` takes `&str`, a
/// `KeyedWindows<Vec<u8>>` takes `&[u8]`, a `KeyedWindows<u64>` takes
/// `&u64`. Implemented for every `Q` with `K: Borrow<Q>` whose owned form
/// is `K` (so an add of a new key can store it).
///
/// ```
/// use stripecount::KeyedWindows;
/// use std::time::Duration;
///
/// let w: KeyedWindows<String> = KeyedWindows::new(Duration::from_secs(60), 60)?;
/// assert!(w.add("alice", 2)); // &str for a String key
/// assert_eq!(w.sum("alice"), 2);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub trait KeyRef<K>: Hash {
    /// The owned key, stored when the key is first added.
    fn to_key(&self) -> K;
    /// Whether `key` is this key.
    fn is(&self, key: &K) -> bool;
}

impl<K, Q> KeyRef<K> for Q
where
    K: Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    #[inline]
    fn to_key(&self) -> K {
        self.to_owned()
    }

    #[inline]
    fn is(&self, key: &K) -> bool {
        key.borrow() == self
    }
}

/// What a per-key structure's hasher must be: a `BuildHasher` that every
/// slice's map clones (so one hash serves every slice's lookup), shareable
/// across threads. Implemented for every such type (`RandomState`, the
/// `BuildHasherDefault`s, ...).
pub trait KeyHasher: BuildHasher + Clone + Send + Sync + 'static {}

impl<S: BuildHasher + Clone + Send + Sync + 'static> KeyHasher for S {}

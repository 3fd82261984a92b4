//! The key `hotkeys` counts: the bytes of a line, short ones inline.

use std::hash::{Hash, Hasher};

/// Bytes of a key stored inline (no heap allocation, no pointer to chase
/// on lookup): covers typical short keys.
const INLINE: usize = 22;

/// A key as the map stores it: short keys inline in the map's entry (a
/// `Vec<u8>` key costs one more cache miss per lookup, measured at ~18% of
/// the command's time), long keys on the heap.
#[derive(Clone)]
pub(super) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..*len as usize],
            Key::Heap(b) => b,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        KeyRef::new(self.bytes()).hash(state)
    }
}

/// The borrowed form of [`Key`]: lookups by `&KeyRef` need no allocation.
#[derive(PartialEq, Eq, Hash)]
#[repr(transparent)]
pub(super) struct KeyRef([u8]);

impl KeyRef {
    #[inline]
    pub(super) fn new(b: &[u8]) -> &KeyRef {
        // SAFETY: `KeyRef` is `repr(transparent)` over `[u8]`, so the two
        // references have the same layout and metadata.
        unsafe { &*(b as *const [u8] as *const KeyRef) }
    }

    /// The key's bytes.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::borrow::Borrow<KeyRef> for Key {
    fn borrow(&self) -> &KeyRef {
        KeyRef::new(self.bytes())
    }
}

impl ToOwned for KeyRef {
    type Owned = Key;
    fn to_owned(&self) -> Key {
        let b = &self.0;
        if b.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Key::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(b.into())
        }
    }
}

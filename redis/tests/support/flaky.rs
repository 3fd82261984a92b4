//! A key type whose own code panics on demand: named by its id, like a
//! `u64`; its `write_key` panics for one chosen id, and while armed its
//! `Clone` counts calls and panics at a chosen one. For the tests of what
//! the Redis layer does when the user's key code panics.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use stripecount_redis::RedisKey;

/// What a test makes its keys do.
#[derive(Default)]
pub struct Ctl {
    /// The id whose `write_key` panics (`u64::MAX`: none).
    pub bad_name: AtomicU64,
    /// While set, clones are counted and the `panic_at`-th panics.
    pub armed: AtomicBool,
    pub clones: AtomicU64,
    pub panic_at: AtomicU64,
}

impl Ctl {
    pub fn new() -> Arc<Ctl> {
        let c = Ctl::default();
        c.bad_name.store(u64::MAX, Ordering::SeqCst);
        Arc::new(c)
    }
}

/// A key named by its id, like a `u64`, whose code panics on demand.
pub struct Flaky {
    pub id: u64,
    pub ctl: Arc<Ctl>,
}

impl Flaky {
    pub fn new(id: u64, ctl: &Arc<Ctl>) -> Flaky {
        Flaky {
            id,
            ctl: Arc::clone(ctl),
        }
    }
}

impl Clone for Flaky {
    fn clone(&self) -> Self {
        let c = &self.ctl;
        if c.armed.load(Ordering::SeqCst) {
            let n = c.clones.fetch_add(1, Ordering::SeqCst) + 1;
            assert_ne!(n, c.panic_at.load(Ordering::SeqCst), "Clone panics");
        }
        Flaky::new(self.id, &self.ctl)
    }
}

impl PartialEq for Flaky {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
    }
}
impl Eq for Flaky {}
impl Hash for Flaky {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.id.hash(h)
    }
}

impl RedisKey for Flaky {
    fn write_key(&self, out: &mut Vec<u8>) {
        assert_ne!(
            self.id,
            self.ctl.bad_name.load(Ordering::SeqCst),
            "write_key panics"
        );
        self.id.write_key(out);
    }
    fn read_key(bytes: &[u8]) -> Option<Self> {
        u64::read_key(bytes).map(|id| Flaky::new(id, &Ctl::new()))
    }
}

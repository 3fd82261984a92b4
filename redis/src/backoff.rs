//! [`Backoff`]: exponential backoff with jitter between a link's failed
//! attempts (the flusher's reconnects, the limiter's round trips).

use rand::Rng;
use std::time::{Duration, Instant};

/// Exponential backoff with jitter between failed attempts.
#[derive(Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
    until: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            next: min,
            until: None,
        }
    }

    /// Whether an attempt may be made at `now`.
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.until.is_none_or(|u| now >= u)
    }

    /// An attempt failed at `now`: wait `next` (±25%), then double it.
    pub(crate) fn failed(&mut self, now: Instant) {
        let jitter = rand::rng().random_range(0.75..1.25);
        self.until = Some(now + self.next.mul_f64(jitter));
        self.next = (self.next * 2).min(self.max);
    }

    /// An attempt succeeded.
    pub(crate) fn succeeded(&mut self) {
        self.next = self.min;
        self.until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(300));
        let t = Instant::now();
        assert!(b.ready(t));
        b.failed(t);
        assert!(!b.ready(t));
        assert!(!b.ready(t + Duration::from_millis(74)));
        assert!(b.ready(t + Duration::from_millis(125)));
        b.failed(t);
        assert!(!b.ready(t + Duration::from_millis(149)));
        b.failed(t);
        b.failed(t);
        assert!(b.ready(t + Duration::from_millis(375)));
        b.succeeded();
        assert!(b.ready(t));
    }
}

//! The reference model of the admission state's unit tests: every grant
//! kept, every answer computed from the list.

use super::super::Denied;
use std::time::Duration;

/// The reference: every grant as `(finest epoch, permits)`, each request
/// judged at the newest epoch, against the limits passed with it.
pub(super) struct Model {
    /// `(ratio, slices)` per level.
    pub(super) levels: Vec<(u64, u64)>,
    pub(super) slice: u64,
    pub(super) newest: u64,
    pub(super) grants: Vec<(u64, u64)>,
}

impl Model {
    /// Level `i`'s window total at finest epoch `j` (at or after every
    /// grant so far).
    pub(super) fn used(&self, i: usize, j: u64) -> u64 {
        let (r, s) = self.levels[i];
        let ji = j / r;
        self.grants
            .iter()
            .filter(|(g, _)| g / r <= ji && ji - g / r < s)
            .map(|(_, n)| n)
            .sum()
    }

    pub(super) fn judge_at(&self, now: u64) -> u64 {
        (now / self.slice).max(self.newest)
    }

    pub(super) fn acquire(
        &mut self,
        now: u64,
        n: u64,
        limits: &[u64],
    ) -> Result<u64, Vec<(Denied, usize)>> {
        let j = self.judge_at(now);
        if n == 0 {
            return Ok(j);
        }
        let over: Vec<_> = (0..limits.len()).filter(|&i| n > limits[i]).collect();
        if !over.is_empty() {
            return Err(over
                .into_iter()
                .map(|i| (Denied::ExceedsLimit, i))
                .collect());
        }
        self.newest = j;
        let full: Vec<_> = (0..limits.len())
            .filter(|&i| self.used(i, j) + n > limits[i])
            .map(|i| (Denied::Exhausted, i))
            .collect();
        if !full.is_empty() {
            return Err(full);
        }
        self.grants.push((j, n));
        Ok(j)
    }

    pub(super) fn available(&self, now: u64, limits: &[u64]) -> u64 {
        let j = self.judge_at(now);
        let left = |i: usize| limits[i].saturating_sub(self.used(i, j));
        (0..limits.len()).map(left).min().unwrap()
    }

    /// The first finest epoch at which level `i` has room for `n`.
    pub(super) fn fits_from(&self, i: usize, j: u64, n: u64, limit: u64) -> Option<u64> {
        if n > limit {
            return None;
        }
        let (r, s) = self.levels[i];
        if self.used(i, j) + n <= limit {
            return Some(j);
        }
        (j / r + 1..=j / r + s)
            .find(|&m| {
                let kept: u64 = self
                    .grants
                    .iter()
                    .filter(|(g, _)| g / r + s > m)
                    .map(|(_, n)| n)
                    .sum();
                kept + n <= limit
            })
            .map(|m| m * r)
    }

    pub(super) fn retry_after(&self, now: u64, n: u64, limits: &[u64]) -> Option<Duration> {
        let j = self.judge_at(now);
        let mut at = j;
        for (i, &l) in limits.iter().enumerate() {
            at = at.max(if n == 0 {
                j
            } else {
                self.fits_from(i, j, n, l)?
            });
        }
        Some(self.after(at, j, now))
    }

    pub(super) fn after(&self, at: u64, j: u64, now: u64) -> Duration {
        if at > j {
            Duration::from_nanos(at * self.slice - now)
        } else {
            Duration::ZERO
        }
    }

    /// When level `i`'s window seen from `j` is empty.
    pub(super) fn reset(&self, i: usize, j: u64, now: u64) -> Duration {
        let (r, s) = self.levels[i];
        let last = self
            .grants
            .iter()
            .filter(|(g, _)| g / r <= j / r && j / r - g / r < s)
            .map(|(g, _)| g / r)
            .max();
        last.map_or(Duration::ZERO, |k| self.after((k + s) * r, j, now))
    }

    pub(super) fn idle(&self, now: u64) -> bool {
        let j = self.judge_at(now);
        (0..self.levels.len()).all(|i| self.used(i, j) == 0)
    }
}

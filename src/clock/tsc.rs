//! The CPU's time-stamp counter as a source of nanoseconds: when to trust
//! it, its calibration against `Instant`, and the conversion.
//!
//! `rdtsc` costs ~9 ns on the development machine against ~24 ns for
//! `Instant::now()` (a vDSO `clock_gettime` that itself reads the TSC, then
//! scales it and checks a sequence counter).
//!
//! # Trust
//! The counter is used only where it is one clock for the whole machine:
//! - Linux: only if the kernel's current clocksource is `tsc`. The kernel
//!   picks it only after checking that every core's counter is in step and
//!   runs at a constant rate, and its watchdog switches away from it (to
//!   `hpet`, `acpi_pm`, a hypervisor clock) when it misbehaves; a counter
//!   that the kernel does not trust, we do not read.
//! - Other x86_64 systems: if CPUID reports an invariant TSC (constant rate
//!   in every power state), as `quanta` checks.
//! - Everywhere else (other architectures, `--cfg loom`, Miri: its isolated
//!   program cannot read the kernel's clocksource, and its time is
//!   `Instant`'s), never.
//!
//! Even a trusted counter can step back (a core whose counter is offset
//! from the others', as in quanta issue #111; a counter reset by a
//! suspend): the conversion saturates instead of wrapping and the reader's
//! clamp (`super::clamp`) keeps the time monotonic.
//!
//! # Calibration
//! Once per process, at the first read: two `(ticks, nanos)` pairs
//! [`CALIBRATION`] apart, each taken as `rdtsc, Instant, rdtsc` (best of
//! five, the narrowest bracket, its midpoint), give nanoseconds per tick as
//! a 32.32 fixed-point factor. Measured on the development machine against
//! a 300 ms reference: within 3 ppm of `Instant`'s rate (1 ms: 5 ppm;
//! 10 ms: 0.5 ppm). A calibration that finds a rate outside 50 MHz..50 GHz
//! (a counter that did not move, or jumped) is refused.

use std::time::{Duration, Instant};

/// How long the calibration measures (busy, once per process).
pub(crate) const CALIBRATION: Duration = Duration::from_millis(2);

/// Bits after the point of the nanoseconds-per-tick factor.
const SHIFT: u32 = 32;

/// Counter rates accepted by the calibration, in ticks per second.
const MIN_HZ: u128 = 50_000_000;
const MAX_HZ: u128 = 50_000_000_000;

/// A calibrated counter: `nanos(ticks) = nanos0 + (ticks - ticks0) * mult
/// / 2^32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tsc {
    /// The counter at the calibration's anchor.
    ticks0: u64,
    /// Nanoseconds since the timeline's origin at the anchor.
    nanos0: u64,
    /// Nanoseconds per tick, 32.32 fixed point.
    mult: u64,
}

impl Tsc {
    /// The conversion through `(ticks0, nanos0)` at `mult / 2^32`
    /// nanoseconds per tick.
    pub(crate) const fn from_parts(ticks0: u64, nanos0: u64, mult: u64) -> Tsc {
        Tsc {
            ticks0,
            nanos0,
            mult,
        }
    }

    /// Nanoseconds since the origin at counter value `ticks`. A counter
    /// below the anchor (it stepped back) reads as the anchor's time; the
    /// result saturates at `u64::MAX`.
    #[inline]
    pub(crate) fn nanos(&self, ticks: u64) -> u64 {
        let delta = ticks.saturating_sub(self.ticks0);
        let scaled = (u128::from(delta) * u128::from(self.mult)) >> SHIFT;
        let scaled = u64::try_from(scaled).unwrap_or(u64::MAX);
        self.nanos0.saturating_add(scaled)
    }

    /// Calibrates the counter against `Instant` (measured from `origin`):
    /// `None` if it is not trusted here (see the module docs) or the
    /// calibration refuses it.
    pub(crate) fn calibrate(origin: Instant) -> Option<Tsc> {
        if !trusted() {
            return None;
        }
        let (ticks0, nanos0) = pair(origin)?;
        let end = nanos0.saturating_add(super::duration_nanos(CALIBRATION));
        while nanos_since(origin) < end {
            std::hint::spin_loop();
        }
        let (ticks1, nanos1) = pair(origin)?;
        Self::fit(ticks0, nanos0, ticks1, nanos1)
    }

    /// The conversion through two `(ticks, nanos)` pairs, anchored at the
    /// second; `None` for a rate outside `MIN_HZ..=MAX_HZ`.
    pub(crate) fn fit(ticks0: u64, nanos0: u64, ticks1: u64, nanos1: u64) -> Option<Tsc> {
        let ticks = u128::from(ticks1.checked_sub(ticks0)?);
        let nanos = u128::from(nanos1.checked_sub(nanos0)?);
        if nanos == 0 {
            return None;
        }
        let hz = ticks * 1_000_000_000 / nanos;
        if !(MIN_HZ..=MAX_HZ).contains(&hz) {
            return None;
        }
        let mult = u64::try_from((nanos << SHIFT) / ticks).ok()?;
        Some(Tsc::from_parts(ticks1, nanos1, mult))
    }
}

fn nanos_since(origin: Instant) -> u64 {
    super::duration_nanos(Instant::now().saturating_duration_since(origin))
}

/// One `(ticks, nanos)` pair: the narrowest of five `rdtsc, Instant, rdtsc`
/// brackets, the counter at its midpoint. `None` if the counter never
/// moved forward across a bracket.
fn pair(origin: Instant) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..5 {
        let before = read();
        let nanos = nanos_since(origin);
        let after = read();
        let Some(width) = after.checked_sub(before) else {
            continue;
        };
        if best.map_or(true, |(_, _, w)| width < w) {
            best = Some((before + width / 2, nanos, width));
        }
    }
    best.map(|(ticks, nanos, _)| (ticks, nanos))
}

/// The counter now (`rdtsc`: not ordered against earlier loads, which is
/// what keeps it cheap; see "Across threads" in `super::monotonic`).
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline]
pub(crate) fn read() -> u64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory
    // effects; it is only reached after `trusted()` (a process that made
    // it fault with `PR_SET_TSC` would also break the vDSO clock).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// No counter here: never trusted, so never read.
#[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
#[inline]
pub(crate) fn read() -> u64 {
    0
}

/// Whether the counter is one machine-wide clock here (module docs).
fn trusted() -> bool {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri), target_os = "linux"))]
    {
        const SOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
        std::fs::read_to_string(SOURCE).is_ok_and(|s| s.trim() == "tsc")
    }
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri), not(target_os = "linux")))]
    {
        invariant()
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    {
        false
    }
}

/// CPUID's "invariant TSC" bit (leaf 0x8000_0007, EDX bit 8).
#[cfg(all(target_arch = "x86_64", not(loom), not(miri), not(target_os = "linux")))]
fn invariant() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: `cpuid` exists on every x86_64 CPU; leaf 0x8000_0000 gives
    // the highest extended leaf, checked before 0x8000_0007 is asked.
    unsafe { __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_affine_and_saturates() {
        // 2.5 GHz: 0.4 ns a tick.
        let mult = (4u64 << SHIFT) / 10;
        let t = Tsc::from_parts(1_000, 500, mult);
        assert_eq!(t.nanos(1_000), 500);
        assert_eq!(t.nanos(1_010), 503); // 10 ticks = 4 ns, less the factor's rounding
        assert_eq!(t.nanos(1_000 + 2_500_000_000), 500 + 999_999_999);
        // A counter below the anchor reads as the anchor, never wraps.
        assert_eq!(t.nanos(0), 500);
        // Far in the future: saturates.
        let slow = Tsc::from_parts(0, u64::MAX - 10, 20 << SHIFT);
        assert_eq!(slow.nanos(u64::MAX), u64::MAX);
    }

    #[test]
    fn fit_recovers_the_rate_and_refuses_nonsense() {
        // 3 GHz over 2 ms, anchored at the second pair.
        let t = Tsc::fit(10, 100, 10 + 6_000_000, 100 + 2_000_000).unwrap();
        assert_eq!(t.nanos(10 + 6_000_000), 2_000_100);
        let second = t.nanos(10 + 6_000_000 + 3_000_000_000);
        assert!((second as i64 - 1_002_000_100).abs() <= 1, "{second}");
        assert_eq!(Tsc::fit(10, 100, 5, 200), None, "counter went back");
        assert_eq!(
            Tsc::fit(10, 100, 10, 2_000_100),
            None,
            "counter stood still"
        );
        assert_eq!(Tsc::fit(10, 100, 20, 100), None, "no time passed");
        // 10 MHz and 100 GHz are outside the accepted rates.
        assert_eq!(Tsc::fit(0, 0, 20_000, 2_000_000), None);
        assert_eq!(Tsc::fit(0, 0, 200_000_000, 2_000_000), None);
    }

    #[test]
    fn a_trusted_counter_calibrates_to_instants_rate() {
        let origin = Instant::now();
        let Some(t) = Tsc::calibrate(origin) else {
            // Not trusted on this machine: nothing to calibrate.
            assert!(!trusted());
            return;
        };
        // Over a further 20 ms (a bounded busy loop, not a sleep), the
        // counter's nanoseconds and Instant's agree within 0.1% plus the
        // brackets' widths.
        let (t0, n0) = pair(origin).unwrap();
        let end = n0 + 20_000_000;
        while nanos_since(origin) < end {
            std::hint::spin_loop();
        }
        let (t1, n1) = pair(origin).unwrap();
        let ours = t.nanos(t1) - t.nanos(t0);
        let theirs = n1 - n0;
        assert!(
            ours.abs_diff(theirs) <= theirs / 1000 + 50_000,
            "{ours} vs {theirs}"
        );
    }
}

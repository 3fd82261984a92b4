//! The response fields: `Retry-After` (RFC 9110) and the IETF `RateLimit`
//! and `RateLimit-Policy` fields of
//! [draft-ietf-httpapi-ratelimit-headers-10](https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/10/)
//! (September 2025), in its Structured Field syntax (RFC 9651).
//!
//! # What is written
//! - `RateLimit-Policy`: one Item per limit of the key, in the limiter's
//!   order: `"<name>";q=<limit>;w=<window seconds>`. The quota unit is the
//!   default (`requests`: one permit per request), so `qu` is not written;
//!   `w` only for a window of whole seconds (the draft has no sub-second
//!   windows). The limits are the key's own (per-key overrides included).
//! - `RateLimit`: one Item, for the limit the decision describes
//!   ([`Verdict::limit_index`]: the one that refused, or after a grant the
//!   one with the fewest permits left): `"<name>";r=<remaining>;t=<secs>`.
//!   `t` is when more quota is available: on a grant, when the key's window
//!   for that limit is empty again ([`Verdict::reset_after`]); on a
//!   refusal, when the refused request would fit
//!   ([`Verdict::retry_after`]), so that `Retry-After` never names a time
//!   before `t` (the draft's rule).
//! - `Retry-After` (refusals only): the same seconds as `t`; absent when no
//!   retry can succeed (a request above the key's limit).
//!
//! Times are whole seconds rounded up (a request retried after them fits,
//! if nothing else took the room). Every number in the two Structured
//! Fields (`q`, `w`, `r`, `t`) is an sf-integer, which has at most 15
//! digits: a larger one is written as the largest, 999999999999999 (about
//! 31.7 million years as seconds), so that a client's parser never
//! rejects the field. `Retry-After` (RFC 9110's delay-seconds) has no such
//! limit and is written as is. No partition key (`pk`) is written: keys
//! are client data (API keys, addresses) the draft warns against echoing.

use crate::limit::Verdict;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use std::fmt::Write as _;
use std::time::Duration;
use stripecount::ConfigError;

/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-10).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The policies a limiter advertises: each limit's name (an sf-string,
/// quoted and escaped) and window.
#[derive(Debug, Clone)]
pub(crate) struct Policies {
    /// `"<name>"`, escaped, per limit.
    names: Vec<String>,
    /// `;w=<seconds>`, or empty for a window that is not whole seconds.
    windows: Vec<String>,
}

impl Policies {
    /// Policies named after their windows (`"1s"`, `"1m"`, `"1d"`; a window
    /// named twice gets its limit's index appended: `"1m-2"`).
    pub(crate) fn new(windows: &[Duration]) -> Policies {
        let labels: Vec<String> = windows.iter().map(|&w| window_label(w)).collect();
        let names = (labels.iter().enumerate())
            .map(|(i, l)| match labels.iter().filter(|m| *m == l).count() {
                1 => l.clone(),
                _ => format!("{l}-{i}"),
            })
            .collect::<Vec<String>>();
        Policies {
            names: names.iter().map(|n| quote(n)).collect(),
            windows: windows.iter().map(|&w| window_param(w)).collect(),
        }
    }

    /// Renames the policies, one name per limit. Errors: another number of
    /// names than of limits, an empty name, or a character an sf-string
    /// cannot hold (only printable ASCII, space included).
    pub(crate) fn set_names(&mut self, names: &[&str]) -> Result<(), ConfigError> {
        if names.len() != self.windows.len() {
            return Err(ConfigError::Invalid(
                "one policy name per limit of the limiter",
            ));
        }
        let mut quoted = Vec::with_capacity(names.len());
        for name in names {
            if name.is_empty() || !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                return Err(ConfigError::Invalid(
                    "a policy name must be non-empty printable ASCII",
                ));
            }
            quoted.push(quote(name));
        }
        self.names = quoted;
        Ok(())
    }

    /// `RateLimit-Policy` for a key whose limits are `limits`.
    pub(crate) fn policy(&self, limits: &[u64]) -> HeaderValue {
        let mut s = String::with_capacity(24 * limits.len());
        for (i, (name, window)) in self.names.iter().zip(&self.windows).enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let q = sf_int(limits.get(i).copied().unwrap_or(0));
            let _ = write!(s, "{name};q={q}{window}");
        }
        value(s)
    }

    /// `RateLimit` for the decision (see the module docs for `t`).
    /// `None` when the limiter does not know the permits left (a
    /// fleet-wide grant): the field would have no `r` to report.
    pub(crate) fn ratelimit(&self, d: &Verdict) -> Option<HeaderValue> {
        let name = self.names.get(d.limit_index()).map_or("\"\"", |n| n);
        let r = sf_int(d.remaining()?);
        Some(value(match reset_secs(d) {
            Some(t) => format!("{name};r={r};t={}", sf_int(ceil_secs(t))),
            None => format!("{name};r={r}"),
        }))
    }
}

/// `name` as an sf-string: quoted, `"` and `\` escaped (the caller has
/// checked it is printable ASCII).
fn quote(name: &str) -> String {
    let mut q = String::with_capacity(name.len() + 2);
    q.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

/// The `t` of a decision, before rounding: see the module docs.
fn reset_secs(d: &Verdict) -> Option<Duration> {
    match (d.is_granted(), d.retry_after()) {
        (false, Some(retry)) => Some(retry),
        _ => d.reset_after(),
    }
}

/// `Retry-After` for a refusal that a retry can succeed.
pub(crate) fn retry_after(d: &Verdict) -> Option<(HeaderName, HeaderValue)> {
    let retry = d.retry_after().filter(|_| !d.is_granted())?;
    Some((RETRY_AFTER, HeaderValue::from(ceil_secs(retry))))
}

/// Whole seconds, rounded up (saturating: `Duration::MAX` is `u64::MAX`).
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The largest sf-integer (RFC 9651: at most 15 digits).
const SF_INT_MAX: u64 = 999_999_999_999_999;

/// `n` as an sf-integer: at most [`SF_INT_MAX`].
fn sf_int(n: u64) -> u64 {
    n.min(SF_INT_MAX)
}

/// `;w=<seconds>` for a window of whole seconds, else nothing.
fn window_param(w: Duration) -> String {
    match (w.subsec_nanos(), w.as_secs()) {
        (0, s) if s > 0 => format!(";w={}", sf_int(s)),
        _ => String::new(),
    }
}

/// A window's length in the largest unit that divides it: `"1d"`, `"1h"`,
/// `"90s"`, `"250ms"`.
fn window_label(d: Duration) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = d.as_nanos();
    let (unit, suffix) = (UNITS.into_iter())
        .find(|&(unit, _)| nanos % unit == 0 && nanos > 0)
        .unwrap_or((1, "ns"));
    format!("{}{suffix}", nanos / unit)
}

/// A header value from text built of printable ASCII only.
fn value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripecount::clock::ManualClock;
    use stripecount::{KeyedLimiter, Quota, Timestamp};

    const S: Duration = Duration::from_secs(1);

    fn lim(limits: &[(u64, Duration, usize)]) -> KeyedLimiter<u32, ManualClock> {
        let quotas: Vec<Quota> = (limits.iter())
            .map(|&(limit, window, slices)| Quota::per(limit, window).slices(slices))
            .collect();
        KeyedLimiter::builder(quotas)
            .clock(ManualClock::new())
            .build()
            .unwrap()
    }

    fn v(d: stripecount::Decision) -> Verdict {
        Verdict::from(&d)
    }

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn names_follow_windows_and_are_escaped() {
        let p = Policies::new(&[S, 60 * S, 60 * S, Duration::from_millis(250)]);
        assert_eq!(
            p.policy(&[1, 2, 3, 4]),
            "\"1s\";q=1;w=1, \"1m-1\";q=2;w=60, \"1m-2\";q=3;w=60, \"250ms\";q=4"
        );
        let mut p = Policies::new(&[S, 86_400 * S]);
        p.set_names(&["burst", "say \"hi\" \\o/"]).unwrap();
        assert_eq!(
            p.policy(&[10, 1000]),
            "\"burst\";q=10;w=1, \"say \\\"hi\\\" \\\\o/\";q=1000;w=86400"
        );
        for bad in [&["x"][..], &["a", ""], &["a", "é"], &["a", "tab\t"]] {
            assert!(p.set_names(bad).is_err(), "{bad:?}");
        }
        assert_eq!(window_label(Duration::from_secs(90)), "90s");
        assert_eq!(window_label(Duration::from_nanos(1500)), "1500ns");
    }

    #[test]
    fn fields_of_grants_and_refusals() {
        // 3 per 3 s in 3 slices: a grant at 0 and one at 1.5 s.
        let l = lim(&[(3, 3 * S, 3)]);
        let p = Policies::new(&[3 * S]);
        let sec = 1_000_000_000;
        let d = v(l.decide_at(&1, t(0), 2));
        assert_eq!(p.ratelimit(&d).unwrap(), "\"3s\";r=1;t=3");
        assert_eq!(retry_after(&d), None);
        let d = v(l.decide_at(&1, t(3 * sec / 2), 1));
        // The window empties when the 1 s slice leaves it: at 4 s, 2.5 s on.
        assert_eq!(p.ratelimit(&d).unwrap(), "\"3s\";r=0;t=3");
        let d = v(l.decide_at(&1, t(3 * sec / 2), 1));
        assert!(!d.is_granted());
        // The first 2 leave at 3 s: 1.5 s on, rounded up.
        assert_eq!(d.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(p.ratelimit(&d).unwrap(), "\"3s\";r=0;t=2");
        assert_eq!(retry_after(&d), Some((RETRY_AFTER, HeaderValue::from(2))));
        // Never: no Retry-After; t says when the window is empty.
        let d = v(l.decide_at(&1, t(3 * sec / 2), 4));
        assert_eq!((d.retry_after(), retry_after(&d)), (None, None));
        assert_eq!(p.ratelimit(&d).unwrap(), "\"3s\";r=0;t=3");
    }

    #[test]
    fn several_limits_name_the_binding_one() {
        let l = lim(&[(2, S, 1), (3, 60 * S, 60)]);
        let p = Policies::new(&[S, 60 * S]);
        let sec = 1_000_000_000;
        assert!(l.decide_at(&1, t(0), 2).is_granted());
        let d = v(l.decide_at(&1, t(sec), 1));
        assert_eq!(p.ratelimit(&d).unwrap(), "\"1m\";r=0;t=60");
        let d = v(l.decide_at(&1, t(sec), 1));
        // Refused by the minute; it fits when the 2 of second 0 leave it.
        assert_eq!(p.ratelimit(&d).unwrap(), "\"1m\";r=0;t=59");
        assert_eq!(retry_after(&d), Some((RETRY_AFTER, HeaderValue::from(59))));
        assert_eq!(p.policy(&[2, 3]), "\"1s\";q=2;w=1, \"1m\";q=3;w=60");
    }

    /// Numbers past an sf-integer's 15 digits are written as the largest
    /// one (a client's Structured Fields parser refuses a longer one);
    /// `Retry-After` keeps the whole number.
    #[test]
    fn numbers_past_15_digits_are_the_largest_sf_integer() {
        let max = "999999999999999";
        let p = Policies::new(&[Duration::from_secs(u64::MAX), S]);
        assert_eq!(
            p.policy(&[u64::MAX, SF_INT_MAX + 1]),
            format!("\"18446744073709551615s\";q={max};w={max}, \"1s\";q={max};w=1")
        );
        let d = Verdict::granted(0, u64::MAX, Some(u64::MAX), Some(Duration::MAX));
        let name = "\"18446744073709551615s\"";
        assert_eq!(
            p.ratelimit(&d).unwrap(),
            format!("{name};r={max};t={max}").as_str()
        );
        let retry = Duration::from_secs(SF_INT_MAX) + Duration::from_nanos(1);
        let d = Verdict::refused(1, 5, stripecount::Denied::Exhausted, Some(retry));
        assert_eq!(
            p.ratelimit(&d).unwrap(),
            format!("\"1s\";r=0;t={max}").as_str()
        );
        let whole = HeaderValue::from(SF_INT_MAX + 1);
        assert_eq!(retry_after(&d), Some((RETRY_AFTER, whole)));
        let d = Verdict::refused(1, 5, stripecount::Denied::Exhausted, Some(Duration::MAX));
        assert_eq!(
            retry_after(&d),
            Some((RETRY_AFTER, HeaderValue::from(u64::MAX)))
        );
    }
}

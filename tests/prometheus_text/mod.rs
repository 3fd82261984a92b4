//! What the Prometheus tests share: a time, a registry's text, the lines
//! expected.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use stripecount::Timestamp;

pub fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

pub fn text(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).unwrap();
    out
}

pub fn lines(expected: &[&str]) -> String {
    expected.iter().map(|l| format!("{l}\n")).collect()
}

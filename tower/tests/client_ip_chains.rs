//! `ClientIp` on random chains and on a real server: whatever a client
//! forges left of its address, and however many trusted proxies append
//! theirs, the key is the client; behind a trusted proxy each client gets
//! exactly its own limit.

#[path = "support/forwarding.rs"]
mod forwarding;
mod support;

use axum::routing::get;
use axum::Router;
use forwarding::{fwd, ip, key, xff};
use http::StatusCode;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{ClientIp, KeyedRateLimitLayer};
use support::{Stack, SEC};

/// splitmix64: a seeded generator, enough for test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    fn addr(&mut self) -> IpAddr {
        match self.below(3) {
            0 => IpAddr::from((self.next() as u32).to_be_bytes()),
            1 => IpAddr::V6((u128::from(self.next()) << 64 | u128::from(self.next())).into()),
            _ => IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, self.next() as u16, 1]),
        }
    }
    fn trusted(&mut self) -> IpAddr {
        match self.below(3) {
            0 => IpAddr::from([10, self.next() as u8, self.next() as u8, self.next() as u8]),
            1 => IpAddr::V6((0xfd00_u128 << 112 | u128::from(self.next())).into()),
            _ => ip("192.0.2.1"),
        }
    }
    /// `a` as one entry: with or without a port, brackets, or mapped.
    fn entry(&mut self, a: IpAddr, forwarded: bool) -> String {
        let s = match (a, self.below(4)) {
            (IpAddr::V4(v4), 0) => format!("{v4}:{}", self.below(65536)),
            (IpAddr::V4(v4), 1) => format!("::ffff:{v4}"),
            (IpAddr::V4(v4), _) => v4.to_string(),
            (IpAddr::V6(v6), 0) => format!("[{v6}]:{}", self.below(65536)),
            (IpAddr::V6(v6), 1) => format!("[{v6}]"),
            (IpAddr::V6(v6), _) => v6.to_string(),
        };
        match (forwarded, self.below(3)) {
            (false, _) => s,
            (true, 0) => format!("for=\"{s}\""),
            (true, 1) => format!("proto=https;For=\"{s}\";by=_lb"),
            (true, _) => format!("for=\"{s}\";host=\"a,b\""),
        }
    }
    /// Anything a client might send as entries.
    fn forged(&mut self, forwarded: bool) -> String {
        let n = self.below(8);
        let mut parts = Vec::new();
        for _ in 0..n {
            let junk = [
                "garbage",
                "unknown",
                "_hidden",
                "\"",
                "\\",
                ";",
                "=",
                "for=",
                " ",
                "",
                "[::1",
                "1.2.3.4:99999",
            ];
            let p = match self.below(5) {
                0 => self.pick(&junk).to_string(),
                1 => "7".repeat(self.below(5000) as usize),
                2 => {
                    let a = self.trusted();
                    self.entry(a, forwarded)
                }
                _ => {
                    let a = self.addr();
                    self.entry(a, forwarded)
                }
            };
            parts.push(p);
        }
        parts.join(*self.pick(&[",", ", ", " ,\t"]))
    }
}

#[test]
fn randomized_forged_prefixes_and_trusted_hops_always_key_the_client() {
    let trusted = ["10.0.0.0/8", "fd00::/8", "192.0.2.1"];
    let (x, f) = (xff(&trusted), fwd(&trusted));
    let mut rng = Rng(0x5eed_c11e_4701);
    for case in 0..4000 {
        let client = loop {
            let a = rng.addr();
            if !x.is_trusted(a) {
                break a;
            }
        };
        let forwarded = rng.below(2) == 0;
        let forged = rng.forged(forwarded);
        let client_entry = rng.entry(client, forwarded);
        let hops: Vec<String> = (0..rng.below(5))
            .map(|_| {
                let a = rng.trusted();
                rng.entry(a, forwarded)
            })
            .collect();
        // The client's line: its forged entries, then what its proxy
        // appended; each later proxy appends to the line or adds one.
        let mut lines = vec![if forged.is_empty() {
            client_entry.clone()
        } else {
            format!("{forged}, {client_entry}")
        }];
        if rng.below(4) == 0 && !forged.is_empty() {
            lines = vec![forged.clone(), client_entry.clone()];
        }
        for h in &hops {
            if rng.below(2) == 0 {
                lines.push(h.clone());
            } else {
                let last = lines.last_mut().unwrap();
                *last = format!("{last},{h}");
            }
        }
        let peer = SocketAddr::new(rng.trusted(), 443).to_string();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let got = key(if forwarded { &f } else { &x }, forwarded, &peer, &lines);
        assert_eq!(
            got,
            client.to_canonical(),
            "case {case}: {peer} {lines:.200?}"
        );
    }
}

/// A real server behind a (simulated) proxy on 127.0.0.1: each client,
/// named by the address the proxy appends, gets exactly its limit whatever
/// it forges to the left, including another client's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_client_gets_exactly_its_limit() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<IpAddr>::builder(Quota::per(3, 60 * SEC).slices(6))
        .clock(clock.clone())
        .build()
        .unwrap();
    let layer =
        KeyedRateLimitLayer::new(Arc::new(limiter), ClientIp::new(["127.0.0.1/32"]).unwrap());
    let app = Router::new().route("/", get(|| async { "ok\n" }).layer(layer.clone()));
    let stack = Stack::start(app).await;
    let clients = ["203.0.113.1", "203.0.113.2", "2001:db8::7", "198.51.100.9"];
    for (i, client) in clients.iter().enumerate() {
        let next = clients[(i + 1) % clients.len()];
        let forged = [
            String::new(),
            "198.51.100.200".to_owned(),
            next.to_owned(), // the next client's address, before it sends
            format!("127.0.0.1, {next}"),
            "garbage, unknown".to_owned(),
            "1".repeat(4000),
        ];
        let mut ok = 0;
        for f in &forged {
            let value = if f.is_empty() {
                client.to_string()
            } else {
                format!("{f}, {client}")
            };
            let status = stack.status_with("/", &[("x-forwarded-for", &value)]).await;
            assert!(matches!(
                status,
                StatusCode::OK | StatusCode::TOO_MANY_REQUESTS
            ));
            ok += usize::from(status == StatusCode::OK);
        }
        assert_eq!(ok, 3, "{client}");
    }
    // The proxy's own requests (no header) have their own budget.
    let mut ok = 0;
    for _ in 0..5 {
        ok += usize::from(stack.status_with("/", &[]).await == StatusCode::OK);
    }
    assert_eq!(ok, 3);
    let limiter = layer.limiter();
    assert_eq!(limiter.len(), clients.len() + 1);
    for c in clients.iter().chain(["127.0.0.1"].iter()) {
        assert_eq!(limiter.available(&ip(c)), 0, "{c}");
    }
}

//! `ClientIp`: the key is the first untrusted address walking the
//! forwarding header from the peer, whatever a client forges to its left.
//! Most tests call `KeyExtractor::extract` on a request head built here;
//! the last one runs the layer on a real server and client.

mod support;

use axum::routing::get;
use axum::Router;
use http::request::Parts;
use http::{HeaderValue, StatusCode};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{CidrError, ClientIp, KeyExtractor, KeyedRateLimitLayer, ProxyHeader};
use support::{Stack, SEC};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A request head from `peer` (`a.b.c.d:port`, `[v6]:port`, or a bare
/// address inserted as an `IpAddr`) with one `name` header line per entry
/// of `lines`.
fn head(peer: &str, name: &str, lines: &[&[u8]]) -> Parts {
    let mut req = http::Request::new(());
    match peer.parse::<SocketAddr>() {
        Ok(sa) => drop(req.extensions_mut().insert(sa)),
        Err(_) => drop(req.extensions_mut().insert(ip(peer))),
    }
    for line in lines {
        let v = HeaderValue::from_bytes(line).unwrap();
        req.headers_mut()
            .append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), v);
    }
    req.into_parts().0
}

/// The key `x` gives a request from `peer` with `X-Forwarded-For` (or
/// `Forwarded` if `x` reads it) lines `lines`.
fn key(x: &ClientIp, forwarded: bool, peer: &str, lines: &[&str]) -> IpAddr {
    let name = if forwarded {
        "forwarded"
    } else {
        "x-forwarded-for"
    };
    let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    *x.extract(&head(peer, name, &lines)).unwrap()
}

fn xff(trusted: &[&str]) -> ClientIp {
    ClientIp::new(trusted).unwrap()
}

fn fwd(trusted: &[&str]) -> ClientIp {
    ClientIp::new(trusted)
        .unwrap()
        .header(ProxyHeader::Forwarded)
}

const CLIENT: &str = "203.0.113.7";

#[test]
fn forged_entries_left_of_the_client_never_change_the_key() {
    let x = xff(&["10.0.0.0/8"]);
    let f = fwd(&["10.0.0.0/8"]);
    let long = "9".repeat(100_000);
    let many = vec!["10.0.0.9"; 5_000].join(", ");
    let forged: Vec<String> = vec![
        "198.51.100.1".into(),
        "10.0.0.5".into(), // a trusted address, forged
        "garbage".into(),
        "unknown".into(),
        "_hidden".into(),
        "\"unclosed".into(),
        "a\\".into(),
        "1.2.3.4:99999".into(),
        "".into(),
        ",,,".into(),
        long.clone(),
        many.clone(),
        format!("{long}, {many}"),
    ];
    for f_ in &forged {
        for peer in ["10.0.0.1:4000", "10.200.0.1"] {
            let line = format!("{f_}, {CLIENT}");
            assert_eq!(key(&x, false, peer, &[&line]), ip(CLIENT), "{f_:.40}");
            assert_eq!(key(&x, false, peer, &[f_, CLIENT]), ip(CLIENT), "{f_:.40}");
            let line = format!("{f_}, for={CLIENT};proto=https");
            assert_eq!(key(&f, true, peer, &[&line]), ip(CLIENT), "{f_:.40}");
            let line = format!("for={f_}, for=\"{CLIENT}:443\", for=10.0.0.3");
            assert_eq!(key(&f, true, peer, &[&line]), ip(CLIENT), "{f_:.40}");
        }
    }
    // Bytes that are not visible ASCII in the client's part.
    let x_line: &[u8] = b"caf\xc3\xa9 \x80\xff, 203.0.113.7";
    let parts = head("10.0.0.1:1", "x-forwarded-for", &[x_line]);
    assert_eq!(*x.extract(&parts).unwrap(), ip(CLIENT));
}

#[test]
fn a_chain_of_trusted_proxies_is_walked_to_the_first_untrusted_address() {
    let x = xff(&["10.0.0.0/8", "fd00::/8", "192.168.1.1"]);
    let k = |peer: &str, line: &str| key(&x, false, peer, &[line]);
    let chain = "198.51.100.1, 203.0.113.7, 192.168.1.1, fd00::5, 10.2.3.4";
    assert_eq!(k("10.0.0.1:80", chain), ip(CLIENT));
    assert_eq!(k("[fd00::1]:80", chain), ip(CLIENT));
    assert_eq!(k("192.168.1.1:80", chain), ip(CLIENT));
    // A single address trusts only itself.
    assert_eq!(
        k("10.0.0.1:80", "203.0.113.7, 192.168.1.2"),
        ip("192.168.1.2")
    );
    // Every entry trusted: the leftmost.
    assert_eq!(
        k("10.0.0.1:80", "10.0.0.9, fd00::2, 10.0.0.8"),
        ip("10.0.0.9")
    );
    // No header, or one without entries: the peer.
    assert_eq!(key(&x, false, "10.0.0.1:80", &[]), ip("10.0.0.1"));
    assert_eq!(k("10.0.0.1:80", ""), ip("10.0.0.1"));
    assert_eq!(k("10.0.0.1:80", " , ,"), ip("10.0.0.1"));
    // Empty elements are skipped; whitespace and tabs around commas.
    assert_eq!(
        k("10.0.0.1:80", "203.0.113.7 ,, \t10.0.0.3\t, "),
        ip(CLIENT)
    );
    // Another header is not read.
    let parts = head("10.0.0.1:80", "x-real-ip", &[b"203.0.113.7"]);
    assert_eq!(*x.extract(&parts).unwrap(), ip("10.0.0.1"));
    // No peer address: no key, whatever the header says.
    let mut req = http::Request::new(());
    req.headers_mut()
        .insert("x-forwarded-for", HeaderValue::from_static(CLIENT));
    assert_eq!(x.extract(&req.into_parts().0), None);
}

#[test]
fn an_untrusted_peer_is_the_key_whatever_its_header() {
    let x = xff(&["10.0.0.0/8"]);
    let f = fwd(&["10.0.0.0/8"]);
    for peer in [
        "203.0.113.9:5000",
        "11.0.0.1:80",
        "9.255.255.255:80",
        "[fd00::1]:80",
    ] {
        let want = peer.parse::<SocketAddr>().unwrap().ip();
        assert_eq!(key(&x, false, peer, &["198.51.100.1"]), want);
        assert_eq!(key(&x, false, peer, &["198.51.100.1, 10.0.0.2"]), want);
        assert_eq!(key(&f, true, peer, &["for=198.51.100.1"]), want);
    }
    // Nothing trusted: always the peer.
    let none = ClientIp::new(Vec::<String>::new()).unwrap();
    assert_eq!(key(&none, false, "10.0.0.1:1", &[CLIENT]), ip("10.0.0.1"));
}

#[test]
fn a_malformed_entry_reached_in_the_walk_gives_the_peer() {
    let x = xff(&["10.0.0.0/8"]);
    for bad in [
        "garbage",
        "unknown",
        "_hidden",
        "1.2.3.4:99999",
        "1.2.3.4:",
        "1.2.3.4:+80",
        "1.2.3.4:80:80",
        "01.2.3.4",
        "1.2.3",
        "[::1",
        "[::1]80",
        "[1.2.3.4]",
        "fe80::1%eth0",
        "\"203.0.113.7\"",
        "203.0.113.7 198.51.100.1",
    ] {
        // The client's own entry, or a hop between it and the peer.
        let line = format!("198.51.100.1, {bad}");
        assert_eq!(
            key(&x, false, "10.0.0.1:1", &[&line]),
            ip("10.0.0.1"),
            "{bad}"
        );
        let line = format!("{CLIENT}, {bad}, 10.0.0.2");
        assert_eq!(
            key(&x, false, "10.0.0.1:1", &[&line]),
            ip("10.0.0.1"),
            "{bad}"
        );
    }
    // An unclosed quote reached in the walk.
    assert_eq!(
        key(&x, false, "10.0.0.1:1", &["\"1.2.3.4, 10.0.0.2"]),
        ip("10.0.0.1")
    );
    // Every accepted form of an address.
    for (entry, want) in [
        ("203.0.113.7:8080", CLIENT),
        ("[2001:db8::17]:4711", "2001:db8::17"),
        ("[2001:db8::17]", "2001:db8::17"),
        ("2001:db8::17", "2001:db8::17"),
        ("203.0.113.7:_obf", CLIENT),
    ] {
        assert_eq!(key(&x, false, "10.0.0.1:1", &[entry]), ip(want), "{entry}");
    }
}

#[test]
fn ipv4_ipv6_and_mapped_addresses_are_compared_and_keyed_canonically() {
    let x = xff(&["10.0.0.0/8", "fd00::/8"]);
    // A mapped peer is trusted as its IPv4 address; a mapped entry is
    // keyed as its IPv4 address, and a mapped trusted hop is skipped.
    let line = "::ffff:203.0.113.7, [::ffff:10.0.0.4]:80, fd00::9";
    assert_eq!(key(&x, false, "[::ffff:10.0.0.1]:443", &[line]), ip(CLIENT));
    assert_eq!(key(&x, false, "10.0.0.1", &[line]), ip(CLIENT));
    // A mapped untrusted peer is its IPv4 address.
    assert_eq!(
        key(&x, false, "[::ffff:203.0.113.9]:443", &[line]),
        ip("203.0.113.9")
    );
    // IPv6 clients behind IPv4 proxies and the reverse.
    assert_eq!(
        key(&x, false, "10.0.0.1:1", &["2001:db8::1, fd00::2"]),
        ip("2001:db8::1")
    );
    assert_eq!(
        key(&x, false, "[fd00::1]:1", &["203.0.113.7, 10.9.9.9"]),
        ip(CLIENT)
    );
    // A mapped range is its IPv4 range.
    let m = xff(&["::ffff:10.0.0.0/104"]);
    assert!(m.is_trusted(ip("10.1.2.3")) && m.is_trusted(ip("::ffff:10.1.2.3")));
    assert!(!m.is_trusted(ip("11.0.0.1")));
    assert_eq!(key(&m, false, "10.0.0.1:1", &[CLIENT]), ip(CLIENT));
    // 0.0.0.0/0 is every IPv4 address and no IPv6 one.
    let all4 = xff(&["0.0.0.0/0"]);
    assert!(all4.is_trusted(ip("203.0.113.1")) && !all4.is_trusted(ip("2001:db8::1")));
    // The prefix applies to the chosen address only; trust is judged on
    // whole addresses.
    let p = xff(&["2001:db8:1::/48"]).ipv6_prefix(64);
    let line = "2001:db8:2:3:4:5:6:7, 2001:db8:1::99";
    assert_eq!(
        key(&p, false, "[2001:db8:1::1]:1", &[line]),
        ip("2001:db8:2:3::")
    );
    assert_eq!(
        key(&p, false, "[2001:db8:2::1]:1", &[line]),
        ip("2001:db8:2::")
    );
    assert_eq!(key(&p, false, "[2001:db8:1::1]:1", &[CLIENT]), ip(CLIENT));
}

#[test]
fn the_limits_bound_the_part_walked_and_give_the_peer_past_them() {
    let x = xff(&["10.0.0.0/8"]);
    let hops = |n: usize| -> String {
        let mut v = vec![CLIENT.to_owned()];
        v.extend((0..n).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)));
        v.join(",")
    };
    // 15 trusted hops and the client: 16 entries, the default.
    assert_eq!(ClientIp::DEFAULT_MAX_HOPS, 16);
    assert_eq!(key(&x, false, "10.0.0.1:1", &[&hops(15)]), ip(CLIENT));
    assert_eq!(key(&x, false, "10.0.0.1:1", &[&hops(16)]), ip("10.0.0.1"));
    let x3 = x.clone().max_hops(3);
    assert_eq!(key(&x3, false, "10.0.0.1:1", &[&hops(2)]), ip(CLIENT));
    assert_eq!(key(&x3, false, "10.0.0.1:1", &[&hops(3)]), ip("10.0.0.1"));
    // Hops counted across lines, empty elements not counted.
    assert_eq!(
        key(
            &x3,
            false,
            "10.0.0.1:1",
            &[CLIENT, "10.0.0.2,,", " ,10.0.0.3"]
        ),
        ip(CLIENT)
    );
    assert_eq!(
        key(
            &x3,
            false,
            "10.0.0.1:1",
            &[CLIENT, "10.0.0.2", "10.0.0.3, 10.0.0.4"]
        ),
        ip("10.0.0.1")
    );
    // Bytes: the walked part, from the end, separators included.
    // "10.0.0.2" and "203.0.113.7" with the comma before each: 21 bytes.
    let line = "198.51.100.1,203.0.113.7,10.0.0.2";
    assert_eq!(
        key(&x.clone().max_bytes(21), false, "10.0.0.1:1", &[line]),
        ip(CLIENT)
    );
    assert_eq!(
        key(&x.clone().max_bytes(20), false, "10.0.0.1:1", &[line]),
        ip("10.0.0.1")
    );
    // The whole line is read when the client is its first entry.
    let b = x.clone().max_bytes(20);
    assert_eq!(
        key(&b, false, "10.0.0.1:1", &["203.0.113.7,10.0.0.2"]),
        ip(CLIENT)
    );
    assert_eq!(
        key(&b, false, "10.0.0.1:1", &[" 203.0.113.7,10.0.0.2"]),
        ip("10.0.0.1")
    );
    // Across lines.
    assert_eq!(
        key(&b, false, "10.0.0.1:1", &[CLIENT, "10.0.0.2"]),
        ip(CLIENT)
    );
    assert_eq!(
        key(&b, false, "10.0.0.1:1", &[CLIENT, "10.0.0.222"]),
        ip("10.0.0.1")
    );
    // An entry longer than the budget, written by a trusted hop.
    let long = format!("{CLIENT}, 10.0.0.2:{}", "1".repeat(3000));
    assert_eq!(key(&x, false, "10.0.0.1:1", &[&long]), ip("10.0.0.1"));
}

#[test]
fn several_header_lines_form_one_list_in_order() {
    let x = xff(&["10.0.0.0/8"]);
    let f = fwd(&["10.0.0.0/8"]);
    let k = |lines: &[&str]| key(&x, false, "10.0.0.1:1", lines);
    assert_eq!(k(&["198.51.100.1, 203.0.113.7", "10.0.0.2"]), ip(CLIENT));
    assert_eq!(
        k(&["198.51.100.1", "203.0.113.7", "10.0.0.2, 10.0.0.3"]),
        ip(CLIENT)
    );
    assert_eq!(k(&["203.0.113.7", "", "10.0.0.2"]), ip(CLIENT));
    // The last line is the nearest proxy's.
    assert_eq!(k(&["10.0.0.2", "203.0.113.7"]), ip(CLIENT));
    assert_eq!(k(&["10.0.0.2", "10.0.0.3"]), ip("10.0.0.2"));
    // A quote a client left open in its own line stays in that line.
    let lines = ["for=\"198.51.100.1", "for=203.0.113.7, for=10.0.0.2"];
    assert_eq!(key(&f, true, "10.0.0.1:1", &lines), ip(CLIENT));
}

#[test]
fn forwarded_syntax() {
    let f = fwd(&["10.0.0.0/8", "fd00::/8"]);
    let k = |line: &str| key(&f, true, "10.0.0.1:1", &[line]);
    let peer = ip("10.0.0.1");
    for (line, want) in [
        ("for=192.0.2.60", ip("192.0.2.60")),
        ("for=\"[2001:db8:cafe::17]:4711\"", ip("2001:db8:cafe::17")),
        ("for=\"[2001:db8:cafe::17]\"", ip("2001:db8:cafe::17")),
        ("for=\"192.0.2.60:8080\"", ip("192.0.2.60")),
        ("for=\"192.0.2.60:_port\"", ip("192.0.2.60")),
        ("for=\"[2001:db8::1]:_p-1.x\"", ip("2001:db8::1")),
        (
            "for=192.0.2.60;proto=http;by=203.0.113.43",
            ip("192.0.2.60"),
        ),
        (
            "proto=https;host=example.com;for=192.0.2.60",
            ip("192.0.2.60"),
        ),
        ("For=192.0.2.60", ip("192.0.2.60")),
        ("FOR=\"192.0.2.60\";PROTO=https", ip("192.0.2.60")),
        ("for=192.0.2.60;", ip("192.0.2.60")),
        (";;for=192.0.2.60;;proto=http", ip("192.0.2.60")),
        ("for=192.0.2.60 ; proto=http", ip("192.0.2.60")),
        // A quoted value with a comma, a semicolon and an escaped quote.
        ("by=\"a,b;c\";for=192.0.2.60", ip("192.0.2.60")),
        ("ext=\"x\\\",y\";for=192.0.2.60", ip("192.0.2.60")),
        (
            "for=192.0.2.60, for=10.0.0.2;by=\"[fd00::1]\"",
            ip("192.0.2.60"),
        ),
        ("for=192.0.2.60, for=\"[fd00::2]:80\"", ip("192.0.2.60")),
        // Identifiers that are not addresses, and malformed elements.
        ("for=unknown", peer),
        ("for=_hidden", peer),
        ("for=\"_hidden:_port\"", peer),
        ("for=192.0.2.60, for=unknown", peer),
        ("proto=https", peer),
        ("for=192.0.2.60;for=192.0.2.61", peer),
        ("for=\"192.0.2.60", peer),
        ("for=\"192.0.2.60\"x", peer),
        ("for=\"192.0.2\\.60\"", peer),
        ("192.0.2.60", peer),
        ("=192.0.2.60", peer),
        ("f(r=192.0.2.60", peer),
        ("for=192.0.2.60 proto=http", peer),
        ("for=", peer),
        ("", peer),
    ] {
        assert_eq!(k(line), want, "{line}");
    }
    // The X-Forwarded-For extractor does not read Forwarded, nor the reverse.
    let x = xff(&["10.0.0.0/8"]);
    assert_eq!(key(&x, true, "10.0.0.1:1", &["for=192.0.2.60"]), peer);
    assert_eq!(key(&f, false, "10.0.0.1:1", &["192.0.2.60"]), peer);
}

#[test]
fn malformed_trusted_ranges_are_typed_errors() {
    let err = |r: &str| ClientIp::new([r]).unwrap_err();
    let s = |r: &str| r.to_owned();
    for r in [
        "10.0.0.0/33",
        "fd00::/129",
        "10.0.0.0/99999999999",
        "::ffff:0.0.0.0/200",
    ] {
        assert_eq!(err(r), CidrError::PrefixTooLong(s(r)), "{r}");
    }
    for r in [
        "garbage",
        "",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0.0/x",
        "/8",
        "10.0.0/8",
        "10.0.0.0/8/8",
        "10.0.0.0 /8",
        "[::1]/128",
    ] {
        assert_eq!(err(r), CidrError::Malformed(s(r)), "{r}");
    }
    for r in ["10.0.0.1/8", "fd00::1/8", "::ffff:10.0.0.1/104"] {
        assert_eq!(err(r), CidrError::HostBitsSet(s(r)), "{r}");
    }
    // The first bad range is reported; the message names it.
    let e = ClientIp::new(["10.0.0.0/8", "fd00::/300", "x"]).unwrap_err();
    assert_eq!(e, CidrError::PrefixTooLong(s("fd00::/300")));
    assert!(e.to_string().contains("\"fd00::/300\""), "{e}");
    let e: Box<dyn std::error::Error> = Box::new(err("x"));
    assert!(e.to_string().contains("\"x\""));
    // Bare addresses are /32 and /128; surrounding spaces are ignored.
    let x = ClientIp::new([" 10.0.0.1 ", "fd00::1"]).unwrap();
    let all6 = ClientIp::new(["::/0"]).unwrap();
    assert!(all6.is_trusted(ip("2001:db8::1")) && !all6.is_trusted(ip("10.0.0.1")));
    let mapped_all = ClientIp::new(["::ffff:0.0.0.0/96"]).unwrap();
    assert!(mapped_all.is_trusted(ip("10.0.0.1")) && !mapped_all.is_trusted(ip("fd00::1")));
    assert!(x.is_trusted(ip("10.0.0.1")) && !x.is_trusted(ip("10.0.0.2")));
    assert!(x.is_trusted(ip("fd00::1")) && !x.is_trusted(ip("fd00::2")));
}

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

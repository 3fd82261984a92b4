//! `ClientIp`: the key is the first untrusted address walking the
//! forwarding header from the peer, whatever a client forges to its left.
//! The tests call `KeyExtractor::extract` on a request head built here;
//! random chains and a real server are in `client_ip_chains.rs`.

#[path = "support/forwarding.rs"]
mod forwarding;

use forwarding::{fwd, head, ip, key, xff};
use http::HeaderValue;
use std::net::SocketAddr;
use stripecount_tower::{CidrError, ClientIp, KeyExtractor};
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

//! `ClientIp` over arbitrary forwarding headers and trusted ranges.
//!
//! Input (text, lines ending in `\n`): the trusted ranges (whitespace
//! separated), the peer's address, options (`fwd` for `Forwarded` instead
//! of `X-Forwarded-For`, `hops=N`, `bytes=N`, `prefix=N`), then one header
//! line per line.
//!
//! Checked: `ClientIp::new` gives a value or a `CidrError`, never a panic;
//! trust agrees with a model of the ranges; the key is the peer's (an
//! untrusted peer's always) or an address written in the header; and for a
//! header of well-formed entries within the limits, it is exactly the
//! documented walk's: the first untrusted entry from the right, else the
//! leftmost, the peer past `max_hops`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use stripecount_tower::{ClientIp, KeyExtractor, ProxyHeader};

/// A range of the model: network and prefix length, on canonical
/// addresses (a mapped range of 96 bits or more is an IPv4 range).
#[derive(Debug, Clone, Copy)]
struct Range {
    net: IpAddr,
    bits: u32,
}

impl Range {
    fn parse(text: &str) -> Option<Range> {
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (text, None),
        };
        let net: IpAddr = addr.parse().ok()?;
        let width = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            Some(b) if !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()) => {
                b.parse().ok().filter(|&b| b <= width)?
            }
            Some(_) => return None,
            None => width,
        };
        Some(match net {
            IpAddr::V6(v6) if bits >= 96 && v6.to_ipv4_mapped().is_some() => Range {
                net: IpAddr::V4(v6.to_ipv4_mapped()?),
                bits: bits - 96,
            },
            _ => Range { net, bits },
        })
    }

    fn contains(self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - self.bits).unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - self.bits).unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        }
    }
}

fn key(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) if prefix < 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        ip => ip,
    }
}

/// An entry of the strict grammar: `a.b.c.d`, `a.b.c.d:port`, a bare IPv6
/// address, `[v6]`, `[v6]:port` (decimal port up to 65535).
fn node(s: &str) -> Option<IpAddr> {
    let port_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok()
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip = IpAddr::V6(v6.parse().ok()?);
        return match after.strip_prefix(':') {
            None if after.is_empty() => Some(ip),
            Some(p) if port_ok(p) => Some(ip),
            _ => None,
        };
    }
    if s.matches(':').count() >= 2 {
        return Some(IpAddr::V6(s.parse().ok()?));
    }
    match s.split_once(':') {
        Some((v4, p)) if port_ok(p) => Some(IpAddr::V4(v4.parse().ok()?)),
        Some(_) => None,
        None => Some(IpAddr::V4(s.parse().ok()?)),
    }
}

/// A `Forwarded` element of the strict grammar: `name=value` pairs split
/// by `;`, names tokens, values tokens or quoted strings without escapes,
/// exactly one `for`, whose value is a [`node`].
fn forwarded_for(elem: &str) -> Option<IpAddr> {
    let mut found = None;
    for pair in elem.split(';') {
        let (name, value) = pair.split_once('=')?;
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(tchar) {
            return None;
        }
        let value = match value.strip_prefix('"') {
            Some(q) => q.strip_suffix('"').filter(|v| !v.contains(['"', '\\']))?,
            None if !value.is_empty() && value.bytes().all(tchar) => value,
            None => return None,
        };
        if name.eq_ignore_ascii_case("for") {
            if found.is_some() {
                return None;
            }
            found = Some(node(value)?);
        }
    }
    found
}

/// The entries of the header, left to right, if every one is of the
/// strict grammar (no spaces inside an entry, no quoted commas).
fn strict_entries(lines: &[&[u8]], forwarded: bool) -> Option<Vec<IpAddr>> {
    let mut out = Vec::new();
    for line in lines {
        let line = std::str::from_utf8(line).ok()?;
        for e in line.split(',') {
            let e = e.trim_matches([' ', '\t']);
            if e.is_empty() {
                continue;
            }
            if e.contains([' ', '\t']) {
                return None;
            }
            out.push(if forwarded {
                forwarded_for(e)?
            } else {
                node(e)?
            });
        }
    }
    Some(out)
}

/// Every address a header's text could name: each token between
/// delimiters, bare, unbracketed, or without a port.
fn named(lines: &[&[u8]]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for line in lines {
        let text = String::from_utf8_lossy(line);
        for tok in text.split([',', ';', '=', '"', ' ', '\t']) {
            let mut forms = vec![tok];
            if let Some(inner) = tok.strip_prefix('[').and_then(|t| t.split(']').next()) {
                forms.push(inner);
            }
            if let Some((host, _)) = tok.rsplit_once(':') {
                forms.push(host);
            }
            out.extend(forms.iter().filter_map(|f| f.parse::<IpAddr>().ok()));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|&b| b == b'\n');
    let (Some(ranges), Some(peer), Some(opts)) = (lines.next(), lines.next(), lines.next()) else {
        return;
    };
    let ranges = String::from_utf8_lossy(ranges);
    let ranges: Vec<&str> = ranges.split_ascii_whitespace().collect();
    let Some(peer) = std::str::from_utf8(peer)
        .ok()
        .and_then(|p| p.trim().parse::<IpAddr>().ok())
    else {
        return;
    };
    let (mut forwarded, mut hops, mut bytes, mut prefix) = (
        false,
        ClientIp::DEFAULT_MAX_HOPS,
        ClientIp::DEFAULT_MAX_BYTES,
        128u8,
    );
    for opt in String::from_utf8_lossy(opts).split_ascii_whitespace() {
        let num = |v: &str| v.parse::<usize>().ok();
        match opt.split_once('=') {
            None if opt == "fwd" => forwarded = true,
            Some(("hops", v)) => hops = num(v).unwrap_or(hops),
            Some(("bytes", v)) => bytes = num(v).unwrap_or(bytes),
            Some(("prefix", v)) => prefix = v.parse().unwrap_or(prefix),
            _ => {}
        }
    }

    // Whatever the texts, a value or a typed error.
    let Ok(client) = ClientIp::new(&ranges) else {
        return;
    };
    let model: Vec<Range> = (ranges.iter())
        .map(|r| Range::parse(r.trim()).expect("a range ClientIp accepted"))
        .collect();
    let trusted = |ip: IpAddr| model.iter().any(|r| r.contains(ip));
    let header = if forwarded {
        ProxyHeader::Forwarded
    } else {
        ProxyHeader::XForwardedFor
    };
    let client = (client.header(header))
        .ipv6_prefix(prefix)
        .max_hops(hops)
        .max_bytes(bytes);

    let name = if forwarded {
        "forwarded"
    } else {
        "x-forwarded-for"
    };
    let mut req = http::Request::get("/");
    let mut sent: Vec<&[u8]> = Vec::new();
    for line in lines {
        if http::HeaderValue::from_bytes(line).is_ok() {
            req = req.header(name, line);
            sent.push(line);
        }
    }
    let mut req = req.body(()).expect("a request of valid header values");
    req.extensions_mut().insert(SocketAddr::new(peer, 443));
    let (parts, ()) = req.into_parts();

    let got = match client.extract(&parts) {
        Some(Cow::Owned(ip)) | Some(Cow::Borrowed(&ip)) => ip,
        None => panic!("a request with a peer has a key"),
    };
    assert_eq!(client.is_trusted(peer), trusted(peer), "trust of {peer}");
    let peer_key = key(peer, prefix.min(128));
    if !trusted(peer) {
        assert_eq!(got, peer_key, "an untrusted peer is its own key");
        return;
    }
    if got != peer_key {
        let ok = named(&sent)
            .into_iter()
            .any(|ip| key(ip, prefix.min(128)) == got);
        assert!(ok, "{got} is neither the peer nor in the header");
    }

    // The documented walk, on a header of well-formed entries read whole.
    // An HTTP header value has no leading or trailing whitespace: the
    // lines sent are as written.
    let total: usize = sent.iter().map(|l| l.len()).sum();
    if let Some(entries) = strict_entries(&sent, forwarded).filter(|_| total <= bytes) {
        for &ip in &entries {
            assert_eq!(client.is_trusted(ip), trusted(ip), "trust of {ip}");
        }
        let mut want = None;
        let mut leftmost = None;
        for (i, &ip) in entries.iter().rev().enumerate() {
            if i + 1 > hops {
                want = Some(peer);
                break;
            }
            if !trusted(ip) {
                want = Some(ip);
                break;
            }
            leftmost = Some(ip);
        }
        let want = want.or(leftmost).unwrap_or(peer);
        assert_eq!(got, key(want, prefix.min(128)), "the walk over {sent:?}");
    }
});

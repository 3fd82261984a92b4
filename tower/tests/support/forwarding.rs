//! Request heads with forwarding headers, and `ClientIp` extractors over
//! them, for the `ClientIp` tests.
#![allow(dead_code)] // each test file uses its own part

use http::request::Parts;
use http::HeaderValue;
use std::net::{IpAddr, SocketAddr};
use stripecount_tower::{ClientIp, KeyExtractor, ProxyHeader};

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A request head from `peer` (`a.b.c.d:port`, `[v6]:port`, or a bare
/// address inserted as an `IpAddr`) with one `name` header line per entry
/// of `lines`.
pub fn head(peer: &str, name: &str, lines: &[&[u8]]) -> Parts {
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
pub fn key(x: &ClientIp, forwarded: bool, peer: &str, lines: &[&str]) -> IpAddr {
    let name = if forwarded {
        "forwarded"
    } else {
        "x-forwarded-for"
    };
    let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    *x.extract(&head(peer, name, &lines)).unwrap()
}

pub fn xff(trusted: &[&str]) -> ClientIp {
    ClientIp::new(trusted).unwrap()
}

pub fn fwd(trusted: &[&str]) -> ClientIp {
    ClientIp::new(trusted)
        .unwrap()
        .header(ProxyHeader::Forwarded)
}

//! What finding the key costs per request: `KeyExtractor::extract` on a
//! request head, for the IP extractors.
//!
//! Rows (group `client_ip`), each one extraction:
//! - `peer_ip`: `PeerIp`, the connection's address: the floor.
//! - `untrusted_peer`: `ClientIp` from a peer it does not trust (the
//!   header is there, and ignored).
//! - `xff_1_hop`: from a trusted proxy, `X-Forwarded-For: client`.
//! - `xff_3_hops`: `X-Forwarded-For: forged, client, proxy, proxy` (three
//!   entries walked).
//! - `forwarded_1_hop`: `Forwarded: for="[client]:port";proto=https`.
//!
//! Run:
//! `cargo bench -p stripecount-tower --bench client_ip -- --warm-up-time 1 --measurement-time 2`

use criterion::{criterion_group, criterion_main, Criterion};
use http::request::Parts;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use stripecount_tower::{ClientIp, KeyExtractor, PeerIp, ProxyHeader};

/// A request head from `peer` with `header: value`, as a server builds it.
fn head(peer: &str, header: &str, value: &str) -> Parts {
    let mut req = http::Request::get("/v1/items")
        .header("accept", "application/json")
        .header("user-agent", "bench/1.0")
        .header(header, value)
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    req.into_parts().0
}

/// A row: its name, the extraction, the request, the key it must give.
type Row<'a> = (&'a str, &'a dyn Fn(&Parts) -> IpAddr, Parts, IpAddr);

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("client_ip");
    let trusted = ["10.0.0.0/8", "172.16.0.0/12", "fd00::/8"];
    let xff = ClientIp::new(trusted).unwrap();
    let fwd = ClientIp::new(trusted)
        .unwrap()
        .header(ProxyHeader::Forwarded);
    let client: IpAddr = "203.0.113.7".parse().unwrap();
    let rows: [Row<'_>; 5] = [
        (
            "peer_ip",
            &|p| *PeerIp::new().extract(p).unwrap(),
            head("203.0.113.7:40000", "x-forwarded-for", "198.51.100.1"),
            client,
        ),
        (
            "untrusted_peer",
            &|p| *xff.extract(p).unwrap(),
            head("203.0.113.7:40000", "x-forwarded-for", "198.51.100.1"),
            client,
        ),
        (
            "xff_1_hop",
            &|p| *xff.extract(p).unwrap(),
            head("10.0.0.2:40000", "x-forwarded-for", "203.0.113.7"),
            client,
        ),
        (
            "xff_3_hops",
            &|p| *xff.extract(p).unwrap(),
            head(
                "10.0.0.2:40000",
                "x-forwarded-for",
                "198.51.100.1, 203.0.113.7, 172.16.4.5, 10.1.2.3",
            ),
            client,
        ),
        (
            "forwarded_1_hop",
            &|p| *fwd.extract(p).unwrap(),
            head(
                "10.0.0.2:40000",
                "forwarded",
                "for=\"[2001:db8:cafe::17]:4711\";proto=https",
            ),
            "2001:db8:cafe::17".parse().unwrap(),
        ),
    ];
    for (name, extract, parts, want) in &rows {
        assert_eq!(extract(parts), *want, "{name}");
        g.bench_function(*name, |b| b.iter(|| black_box(extract(black_box(parts)))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

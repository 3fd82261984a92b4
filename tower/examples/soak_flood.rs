//! A flood of new keys through `KeyedRateLimitLayer` on a local
//! `KeyedLimiter`, for a soak: `scripts/soak.sh` runs the server and the
//! load as two processes and samples the server's memory and open files.
//!
//! ```sh
//! # The server: an axum server on a free loopback port (printed as
//! # `listening <addr>`), `GET /` under the layer, keyed by `x-api-key`,
//! # 10^6 requests per 10 s per key (nothing is refused). Runs until
//! # killed.
//! cargo run --release -p stripecount-tower --example soak_flood -- serve
//! # The load: CONNS keep-alive connections for SECS seconds, every
//! # request a key never sent before, RATE requests a second in all (0: as
//! # fast as they are answered), each connection replaced by a new one
//! # after 1000 requests (so sockets open and close all along). Prints a
//! # line every 10 s; fails on any status but 200.
//! cargo run --release -p stripecount-tower --example soak_flood -- load ADDR SECS CONNS RATE
//! ```

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{Header, KeyedRateLimitLayer};
use tokio::net::{TcpListener, TcpStream};

const KEY_HEADER: &str = "x-api-key";
/// Requests a connection sends before it is replaced.
const PER_CONNECTION: u64 = 1000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let rt = runtime();
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    println!("listening {}", listener.local_addr()?);
    let limiter = KeyedLimiter::<String>::new(Quota::per(1_000_000, Duration::from_secs(10)))?;
    let layer = KeyedRateLimitLayer::new(limiter, Header::new(HeaderName::from_static(KEY_HEADER)));
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    // Until the process is killed.
    rt.block_on(async move { axum::serve(listener, app).await })?;
    Ok(())
}

/// Responses by status, shared by the connections.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    other: AtomicU64,
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(conn);
    send
}

/// Connection `id`'s requests until `end`, each a new key: back to back,
/// or one every `period` (on a schedule, so a late one does not slow the
/// next ones).
async fn flood(
    addr: SocketAddr,
    id: u64,
    end: Instant,
    period: Option<Duration>,
    counts: Arc<Counts>,
) {
    let host = HeaderValue::from_str(&addr.to_string()).unwrap();
    let start = tokio::time::Instant::now();
    let mut n = 0u64;
    while Instant::now() < end {
        let mut send = connect(addr).await;
        for _ in 0..PER_CONNECTION {
            if let Some(p) = period {
                tokio::time::sleep_until(start + p * u32::try_from(n).unwrap_or(u32::MAX)).await;
            }
            n += 1;
            let req = Request::get("/")
                .header(http::header::HOST, host.clone())
                .header(KEY_HEADER, format!("c{id}-{n}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            send.ready().await.expect("connection ready");
            let res = send.send_request(req).await.expect("a response");
            let status = res.status();
            res.into_body().collect().await.expect("the body");
            let c = match status {
                StatusCode::OK => &counts.ok,
                _ => &counts.other,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn load(
    addr: SocketAddr,
    secs: u64,
    conns: u64,
    rate: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = runtime();
    // `rate` requests a second in all (0: as fast as the server answers).
    let period = match rate {
        0 => None,
        r => Some(Duration::from_secs(conns) / u32::try_from(r)?),
    };
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let counts = Arc::new(Counts::default());
    let tasks: Vec<_> = (0..conns)
        .map(|i| rt.spawn(flood(addr, i, end, period, Arc::clone(&counts))))
        .collect();
    let mut last = 0;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(10).min(end - Instant::now()));
        let ok = counts.ok.load(Ordering::Relaxed);
        println!(
            "t={:.0}s ok={ok} other={} rate={}/s",
            start.elapsed().as_secs_f64(),
            counts.other.load(Ordering::Relaxed),
            (ok - last) / 10
        );
        last = ok;
    }
    rt.block_on(async {
        for t in tasks {
            t.await.expect("a load task");
        }
    });
    let (ok, other) = (
        counts.ok.load(Ordering::Relaxed),
        counts.other.load(Ordering::Relaxed),
    );
    println!("done: {ok} requests of new keys answered 200, {other} other");
    if other > 0 || ok == 0 {
        return Err(format!("{other} responses were not 200 (of {})", ok + other).into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve"] => serve(),
        ["load", addr, secs, conns, rate] => {
            load(addr.parse()?, secs.parse()?, conns.parse()?, rate.parse()?)
        }
        _ => Err("usage: soak_flood serve | soak_flood load ADDR SECS CONNS RATE".into()),
    }
}

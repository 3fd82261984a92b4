//! The load generator: keep-alive HTTP/1.1 connections sending requests
//! back to back, and what they got back.

use crate::{Load, KEY_HEADER};
use axum::Router;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::{Builder, Runtime};

/// Responses by status.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub ok: u64,
    pub refused: u64,
    pub other: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.ok + self.refused + self.other
    }

    pub fn add(&mut self, status: StatusCode) {
        match status {
            StatusCode::OK => self.ok += 1,
            StatusCode::TOO_MANY_REQUESTS => self.refused += 1,
            _ => self.other += 1,
        }
    }

    pub fn merge(&mut self, o: Counts) {
        self.ok += o.ok;
        self.refused += o.refused;
        self.other += o.other;
    }
}

/// A runtime with one worker thread (the work of whatever is spawned on
/// it; tokio's blocking pool aside).
pub fn runtime(name: &str) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A client connection: requests go out one at a time, over one socket.
pub type Conn = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// Opens a keep-alive connection (its driver spawned on the current
/// runtime).
pub async fn connect(addr: SocketAddr) -> Conn {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1.1 handshake");
    tokio::spawn(conn);
    send
}

/// Sends `GET /` with `key` and reads the whole response.
pub async fn request(send: &mut Conn, host: &HeaderValue, key: &HeaderValue) -> StatusCode {
    let req = Request::get("/")
        .header(http::header::HOST, host.clone())
        .header(KEY_HEADER, key.clone())
        .body(Empty::<Bytes>::new())
        .unwrap();
    send.ready().await.expect("connection ready");
    let res = send.send_request(req).await.expect("a response");
    let status = res.status();
    res.into_body().collect().await.expect("the body");
    status
}

/// Passes over the keys before the warm-up.
pub const PRIME_PASSES: usize = 3;

/// Connection `i` of `n`: opened, then [`PRIME_PASSES`] passes over the
/// keys `k` with `k % n == i`: every key has had its first request before
/// the warm-up starts, and the cluster limiter's leases (one permit at
/// first, then sized to the key's rate) have grown to the keys' rate.
pub async fn prime(addr: SocketAddr, keys: Arc<[HeaderValue]>, i: usize, n: usize) -> Conn {
    let mut send = connect(addr).await;
    let host = HeaderValue::from_str(&addr.to_string()).unwrap();
    for _ in 0..PRIME_PASSES {
        for key in keys.iter().skip(i).step_by(n) {
            request(&mut send, &host, key).await;
        }
    }
    send
}

/// Requests back to back on `send` until `end`, counting the responses
/// that arrive after `warm_end`; each key drawn by a xorshift seeded with
/// `seed` (the same sequence every run), or with `new_keys` a key never
/// sent before (`n<seed>-<count>`).
pub async fn drive(
    mut send: Conn,
    addr: SocketAddr,
    keys: Arc<[HeaderValue]>,
    new_keys: bool,
    seed: u64,
    warm_end: Instant,
    end: Instant,
) -> Counts {
    let host = HeaderValue::from_str(&addr.to_string()).unwrap();
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut counts = Counts::default();
    let mut n = 0u64;
    loop {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let status = if new_keys {
            n += 1;
            let key = HeaderValue::from_str(&format!("n{seed}-{n}")).unwrap();
            request(&mut send, &host, &key).await
        } else {
            request(&mut send, &host, &keys[(x % keys.len() as u64) as usize]).await
        };
        let now = Instant::now();
        if now >= end {
            return counts;
        }
        if now >= warm_end {
            counts.add(status);
        }
    }
}

/// A client of its own keys (`WARM_KEYS` of them, primed) during a flood:
/// requests back to back, each one's latency (ns) after `warm_end`.
async fn warm_client(addr: SocketAddr, warm_end: Instant, end: Instant) -> Vec<u32> {
    let keys: Vec<HeaderValue> = (0..WARM_KEYS)
        .map(|k| HeaderValue::from_str(&format!("warm-{k}")).unwrap())
        .collect();
    let mut send = connect(addr).await;
    let host = HeaderValue::from_str(&addr.to_string()).unwrap();
    for _ in 0..PRIME_PASSES {
        for k in &keys {
            request(&mut send, &host, k).await;
        }
    }
    let mut lat = Vec::with_capacity(1 << 16);
    for i in 0.. {
        let t0 = Instant::now();
        request(&mut send, &host, &keys[i % keys.len()]).await;
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= warm_end {
            lat.push(u32::try_from((now - t0).as_nanos()).unwrap_or(u32::MAX));
        }
    }
    lat
}

/// The warm client's keys.
const WARM_KEYS: usize = 8;

/// Threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// What one run measured.
pub struct Measured {
    pub counts: Counts,
    /// The warm client's latencies (ns, sorted), with `new_keys`.
    pub warm: Vec<u32>,
    /// Threads of the process half-way through the run.
    pub threads: usize,
}

/// One run: a new server for `app`, the load against it, the counts.
/// With `new_keys`, every request of the load is a key never seen before
/// (no priming), and a warm client runs beside it.
pub fn measure(app: Router, load: &Load, keys: &Arc<[HeaderValue]>, new_keys: bool) -> Measured {
    let server = runtime("server");
    let listener = server
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let addr = listener.local_addr().unwrap();
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    server.spawn(async move { axum::serve(listener, app).await.expect("serve") });

    let client = runtime("load");
    let n = load.connections;
    let primed: Vec<_> = (0..n)
        .map(|i| {
            if new_keys {
                client.spawn(connect(addr))
            } else {
                client.spawn(prime(addr, Arc::clone(keys), i, n))
            }
        })
        .collect();
    let conns = client.block_on(async {
        let mut conns = Vec::with_capacity(n);
        for p in primed {
            conns.push(p.await.expect("a connection"));
        }
        conns
    });
    let warm_end = Instant::now() + Duration::from_secs_f64(load.warmup);
    let end = warm_end + Duration::from_secs_f64(load.secs);
    let warm = new_keys.then(|| client.spawn(warm_client(addr, warm_end, end)));
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, send)| {
            let keys = Arc::clone(keys);
            client.spawn(drive(
                send,
                addr,
                keys,
                new_keys,
                i as u64 + 1,
                warm_end,
                end,
            ))
        })
        .collect();
    let mid = warm_end + (end - warm_end) / 2;
    let threads = client.spawn(async move {
        tokio::time::sleep_until(mid.into()).await;
        threads()
    });
    let (counts, warm, threads) = client.block_on(async {
        let mut total = Counts::default();
        for t in tasks {
            total.merge(t.await.expect("a load task"));
        }
        let mut warm = match warm {
            Some(w) => w.await.expect("the warm client"),
            None => Vec::new(),
        };
        warm.sort_unstable();
        (total, warm, threads.await.expect("the thread count"))
    });
    client.shutdown_background();
    server.shutdown_background();
    Measured {
        counts,
        warm,
        threads,
    }
}

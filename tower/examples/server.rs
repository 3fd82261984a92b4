//! An axum server limited per client address and per API key, with the
//! IETF rate-limit fields, and a background job that waits for its permits
//! instead of being refused.
//!
//! ```sh
//! # Serve on 127.0.0.1:3000 until interrupted:
//! cargo run -p stripecount-tower --all-features --example server
//! curl -i http://127.0.0.1:3000/
//! curl -i -H 'x-api-key: k1' http://127.0.0.1:3000/api
//! # Or start on a free port, send a few requests with hyper's client,
//! # print what came back, and exit:
//! cargo run -p stripecount-tower --all-features --example server -- --demo
//! ```

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderName, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{Header, KeyedRateLimitLayer, MissingKey, PeerIp};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = std::env::args().any(|a| a == "--demo");
    let sec = Duration::from_secs(1);

    // The quotas are strict: a client reading `RateLimit-Policy: ...;q=5;w=10`
    // gets at most 5 in every span of 10 s, whatever span it looks at.

    // Per client address (IPv6 clients per /64): 5 requests per 10 s.
    let by_ip = KeyedLimiter::<IpAddr>::builder(Quota::per(5, 10 * sec).strict())
        .max_keys(100_000)
        .build()?;
    let by_ip = KeyedRateLimitLayer::new(by_ip, PeerIp::new().ipv6_prefix(64));

    // Per API key: 3 a second and 100 an hour, all or nothing; one partner
    // gets more. Granted responses carry the fields too.
    let by_key = Arc::new(KeyedLimiter::<String>::new([
        Quota::per_second(3).strict(),
        Quota::per_hour(100).slices(60).strict(),
    ])?);
    by_key.set_key_limits("partner", &[30, 10_000])?;
    let by_key = KeyedRateLimitLayer::new(
        Arc::clone(&by_key),
        Header::new(HeaderName::from_static("x-api-key")),
    )
    .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
    .policy_names(&["burst", "hourly"])?
    .fields_on_grant(true);

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }).layer(by_ip))
        .route("/api", get(|| async { "{\"ok\":true}\n" }).layer(by_key));

    // A background job that queues on a limit rather than being refused:
    // 2 exports a second, waiting as needed (dropping it takes nothing).
    let exports = Arc::new(KeyedLimiter::<String>::new(Quota::per(2, sec).slices(1))?);
    let job = tokio::spawn({
        let exports = Arc::clone(&exports);
        async move {
            let start = tokio::time::Instant::now();
            for i in 0..5 {
                exports
                    .until_ready("export", 1)
                    .await
                    .expect("1 permit fits the limit");
                println!("job: export {i} at {:.1} s", start.elapsed().as_secs_f64());
            }
        }
    });

    let addr = if demo {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let make = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, make).await });
    println!("listening on http://{addr}");
    if !demo {
        job.await?;
        return Ok(server.await??);
    }

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let send = |path: &str, key: Option<&str>| {
        let mut req = Request::get(format!("http://{addr}{path}"));
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        client.request(req.body(Empty::new()).unwrap())
    };
    let show = |what: &str, res: &http::Response<hyper::body::Incoming>| {
        let fields: Vec<String> = ["ratelimit-policy", "ratelimit", "retry-after"]
            .iter()
            .filter_map(|n| Some(format!("{n}: {}", res.headers().get(*n)?.to_str().ok()?)))
            .collect();
        println!("{what} -> {} {}", res.status(), fields.join(" | "));
    };
    for i in 0..6 {
        show(&format!("GET / #{i}"), &send("/", None).await?);
    }
    for i in 0..4 {
        show(
            &format!("GET /api (k1) #{i}"),
            &send("/api", Some("k1")).await?,
        );
    }
    show("GET /api (partner)", &send("/api", Some("partner")).await?);
    show("GET /api (no key)", &send("/api", None).await?);
    job.await?;
    server.abort();
    Ok(())
}

//! # stripecount-tower
//!
//! Per-key rate limits for tower HTTP services, on stripecount's
//! [`KeyedLimiter`](stripecount::KeyedLimiter): exact under any concurrency
//! (never more than a key's limit, in every span of the window with a
//! [strict](stripecount::Quota::strict) quota: see [what `w`
//! promises](#what-w-promises)), shared by every clone of the service, with
//! bounded memory under a key flood.
//!
//! - [`KeyedRateLimitLayer`]: a [`tower_layer::Layer`] over any
//!   `Service<http::Request<B>>`. A [`KeyExtractor`] finds each request's
//!   key ([`PeerIp`]; [`ClientIp`], the client behind proxies you trust;
//!   a [`Header`] such as an API key; or any closure over the request's
//!   head); a refused request gets `429 Too Many Requests`
//!   with `Retry-After` and the IETF `RateLimit` and `RateLimit-Policy`
//!   fields, and never reaches the inner service.
//! - For callers who would rather wait than be refused, the limiters wait
//!   themselves, cancel-safe:
//!   [`until_ready_with(&key, n, jitter, sleep)`](stripecount::KeyedLimiter::until_ready_with)
//!   on any runtime, and `limiter.until_ready(&key, n).await` on tokio
//!   (stripecount's `tokio` feature, which this crate's turns on).
//!
//! The limiter behind the layer is one line to change
//! ([below](#local-global-or-fleet-wide)): a [`KeyedLimiter`] on this
//! server, one budget for the whole service ([`Global`]), or one limit
//! across a fleet of servers on Redis (feature `redis`). Requests that
//! should not count ([`skip_if`](KeyedRateLimitLayer::skip_if): CORS
//! preflights, health checks) pass unlimited.
//!
//! A separate crate, so that stripecount's users who do not serve HTTP
//! never compile `http` or tower.
//!
//! ```
//! use http::{HeaderName, Request, Response, StatusCode};
//! use std::convert::Infallible;
//! use stripecount::clock::ManualClock;
//! use stripecount::{KeyedLimiter, Quota};
//! use stripecount_tower::{Header, KeyedRateLimitLayer};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! // At most 2 requests per API key in every span of a minute (strict),
//! // judged on slices of 10 s (a manual clock here, for exact numbers; the
//! // default clock in a service).
//! let quota = Quota::per_minute(2).slices(6).strict();
//! let limiter = KeyedLimiter::builder(quota).clock(ManualClock::new()).build()?;
//! let api_key = Header::new(HeaderName::from_static("x-api-key"));
//! let svc = KeyedRateLimitLayer::new(limiter, api_key).layer(service_fn(|_: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("hello\n")))
//! }));
//! let req = || Request::get("/").header("x-api-key", "k1").body(String::new()).unwrap();
//! for _ in 0..2 {
//!     // Clones share the budget: each request here goes through a new one.
//!     assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), StatusCode::OK);
//! }
//! let refused = svc.clone().oneshot(req()).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! // Strict: it fits once every minute ending at the request is clear of
//! // the grants' slice (0-10 s): at 70 s.
//! assert_eq!(refused.headers()["retry-after"], "70");
//! assert_eq!(refused.headers()["ratelimit"], "\"1m\";r=0;t=70");
//! assert_eq!(refused.headers()["ratelimit-policy"], "\"1m\";q=2;w=60");
//! # Ok::<(), stripecount::ConfigError>(())
//! # }).unwrap();
//! ```
//!
//! A server on a real socket, with axum, is in `examples/server.rs`
//! (`cargo run -p stripecount-tower --all-features --example server`).
//!
//! # Local, global or fleet-wide
//! The layer takes any [`LayerLimiter`]:
//!
//! | limiter | key | what the limit covers |
//! |---|---|---|
//! | [`KeyedLimiter`] | any extractor | each key, on this server |
//! | `RateLimiter`, `MultiLimiter` | [`Global`] | every request, on this server |
//! | `stripecount_redis::ClusterLimiter` (feature `redis`) | any extractor | each key, across every server on the same Redis and namespace |
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use http::HeaderName;
//! use stripecount::{KeyedLimiter, Quota};
//! use stripecount_redis::ClusterLimiter;
//! use stripecount_tower::{Header, KeyedRateLimitLayer};
//!
//! let api_key = Header::new(HeaderName::from_static("x-api-key"));
//! // On this server:
//! let local = KeyedLimiter::<String>::new(Quota::per_minute(100))?;
//! let layer = KeyedRateLimitLayer::new(local, api_key.clone());
//! # let _ = layer;
//! // Across the fleet (every server names the same Redis, namespace and quota):
//! let fleet = ClusterLimiter::<String>::new("redis://10.0.0.5/", "api", Quota::per_minute(100))?;
//! let layer = KeyedRateLimitLayer::new(fleet, api_key);
//! # let _ = layer;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "redis"))]
//! # fn main() {}
//! ```
//!
//! A `ClusterLimiter` grants most requests from a lease its server holds,
//! in `call`, without I/O or a lock; a request the lease cannot serve
//! awaits its place in the next batch of requests the limiter sends to
//! Redis (one round trip for every key queued meanwhile), without blocking
//! the executor's thread and without a thread of its own, on any runtime.
//! A fleet-wide grant does not know the key's permits left
//! across the fleet: its responses carry `RateLimit-Policy` but no
//! `RateLimit`; refusals carry both. When Redis is unreachable the
//! limiter's outage policy decides: admitted, or `503` without fields
//! ([`Refusal::Unavailable`]); when more requests wait for Redis than the
//! limiter queues (a flood of new keys), the excess gets `503` with
//! `Retry-After` at once.
//!
//! [`KeyedLimiter`]: stripecount::KeyedLimiter
//!
//! # The fields
//! Written as [draft-ietf-httpapi-ratelimit-headers-10] (September 2025)
//! defines them, in Structured Field syntax (RFC 9651):
//!
//! ```text
//! RateLimit-Policy: "burst";q=10;w=1, "hourly";q=1000;w=3600
//! RateLimit: "burst";r=0;t=1
//! Retry-After: 1
//! ```
//!
//! - `RateLimit-Policy`: each of the key's limits (`q`, its per-key quota
//!   if it has one) and window (`w`, in seconds: the quota's
//!   [`window`](stripecount::Quota::window); left out for a window that is
//!   not whole seconds), named after the window unless
//!   [`policy_names`](KeyedRateLimitLayer::policy_names) says otherwise.
//!   What `w` promises depends on the quota: [below](#what-w-promises).
//! - `RateLimit`: for the limit that refused the request (or, on a grant,
//!   the one with the fewest permits left): the permits left (`r`) and `t`,
//!   the seconds until more are available: on a refusal, until the request
//!   would fit (as `Retry-After`); on a grant, until the key's window for
//!   that limit is empty.
//! - `Retry-After` (refusals): seconds until the request would fit, if
//!   nothing else is granted meanwhile; absent when it never can.
//!
//! Seconds are rounded up. Refusals always carry the fields; granted
//! responses too with [`fields_on_grant`](KeyedRateLimitLayer::fields_on_grant).
//! A refusal because the limiter cannot hold more keys
//! ([`Denied::TooManyKeys`](stripecount::Denied::TooManyKeys)) is a `503`
//! without them: the key has no window to report. Earlier drafts' fields
//! (`RateLimit-Limit`, `-Remaining`, `-Reset`, up to draft 06) are not
//! written.
//!
//! [draft-ietf-httpapi-ratelimit-headers-10]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/10/
//!
//! ## What `w` promises
//! `w` is the quota's window. A limiter judges requests on slices of
//! `L = w / S` (`S`: the quota's
//! [`slice_count`](stripecount::Quota::slice_count)), and how far a client
//! may rely on `q` per `w` depends on the quota (see
//! [`Quota`](stripecount::Quota)):
//!
//! - a [strict](stripecount::Quota::strict) quota
//!   (`Quota::per_minute(100).strict()`): at most `q` permits in **every**
//!   span of `w` seconds, whatever its start. `w` holds literally.
//! - the default: at most `q` in any `S` consecutive slices, so in any span
//!   of `w - L`; a span of `w` that starts inside a slice touches `S + 1`
//!   slices and may hold the permits of all of them: up to `2q` when a
//!   client takes `q` in the last slice of one window and `q` again in the
//!   first slice after it, `L` apart.
//!
//! Build the limiter with a strict quota (`Quota::...strict()`) where
//! clients rely on `w` literally: pacing themselves to `q` per `w`, or
//! checking the server against it. The cost is under-admission: a client
//! sending steadily gets `q` per `w + L` (about 91% of the rate with 10
//! slices), and `Retry-After` and `t` count to when the request fits in
//! every span of `w`.
//!
//! # gRPC
//! A tonic service is a tower service over HTTP/2, so the layer limits it
//! as it is: `Server::builder().layer(layer).add_service(...)` limits
//! every call to every service of the server. gRPC clients read a call's
//! outcome from `grpc-status`, not from a `429`: build the layer with
//! [`.refusal(grpc_response)`](grpc_response) so that a refused call fails
//! with `RESOURCE_EXHAUSTED` and its retry delay (`grpc-retry-pushback-ms`
//! and a `google.rpc.RetryInfo`). Metadata are request headers, so a key
//! sent as metadata is read with [`Header`]:
//!
//! ```text
//! let layer = KeyedRateLimitLayer::new(limiter, Header::new(HeaderName::from_static("x-api-key")))
//!     .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED)) // UNAUTHENTICATED
//!     .refusal(stripecount_tower::grpc_response);
//! Server::builder().layer(layer).add_service(MyServiceServer::new(my_service)).serve(addr).await?;
//! ```
//!
//! A client sets the key with
//! `request.metadata_mut().insert("x-api-key", key.parse()?)`. To key by
//! the client's address: tonic puts the connection's address in the
//! request's extensions as its own `TcpConnectInfo`, which [`PeerIp`] does
//! not read; a closure does
//! (`|p: &Parts| p.extensions.get::<TcpConnectInfo>()?.remote_addr().map(|a| a.ip())`).
//! A whole
//! server in `examples/grpc.rs` (`cargo run -p stripecount-tower
//! --all-features --example grpc`).
//!
//! # Features
//! - `tokio`: turns on stripecount's `tokio` feature: `until_ready` on
//!   every limiter, sleeping on tokio's timer, and
//!   `stripecount::clock::TokioClock`.
//! - `axum`: [`PeerIp`] and [`ClientIp`] also read axum's
//!   `ConnectInfo<SocketAddr>`.
//! - `redis`: the layer on stripecount-redis's `ClusterLimiter` (one limit
//!   across a fleet, on any runtime; needs Rust 1.88 as stripecount-redis
//!   does).
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod client_ip;
#[cfg(feature = "redis")]
mod cluster;
mod future;
mod grpc;
mod headers;
mod key;
mod layer;
mod limit;
mod refusal;
mod service;

pub use body::LimitBody;
pub use client_ip::{CidrError, ClientIp, ProxyHeader};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use cluster::ClusterPending;
pub use future::ResponseFuture;
pub use grpc::grpc_response;
pub use headers::{RATELIMIT, RATELIMIT_POLICY};
pub use key::{Header, KeyExtractor, PeerIp};
pub use layer::KeyedRateLimitLayer;
pub use limit::{Check, Global, LayerLimiter, Verdict};
pub use refusal::{default_response, MissingKey, Refusal};
pub use service::KeyedRateLimit;

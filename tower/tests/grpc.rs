//! The layer on a tonic server, refusing in gRPC form: a real server on a
//! free loopback port and a real tonic client over HTTP/2. The limiter
//! runs on a `ManualClock` the test moves, so every delay is exact.

#[path = "support/echo.rs"]
mod echo;

use echo::{say, EchoClient, EchoServer};
use http::{HeaderName, StatusCode};
use http_body::Body as _;
use prost::Message as _;
use std::net::SocketAddr;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{grpc_response, Header, KeyedRateLimitLayer, MissingKey};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::Code;
use tower::{Layer, ServiceExt};

/// `google.rpc.Status`, decoded on its own terms (field numbers from
/// google/rpc/status.proto, error_details.proto, protobuf/any.proto and
/// duration.proto), independently of the crate's encoder.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<PbDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PbDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The layer of these tests.
type Limited = KeyedRateLimitLayer<Header, KeyedLimiter<String, ManualClock>>;

/// 3 calls per minute per `x-api-key` (in 6 slices of 10 s), on `clock`;
/// a call without a key is unauthenticated.
fn layer(clock: &ManualClock) -> Limited {
    let limiter = KeyedLimiter::builder(Quota::per_minute(3).slices(6))
        .clock(clock.clone())
        .build()
        .unwrap();
    let api_key = Header::new(HeaderName::from_static("x-api-key"));
    KeyedRateLimitLayer::new(limiter, api_key)
        .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
        .refusal(grpc_response)
}

/// A tonic server with `layer` on 127.0.0.1:0.
fn serve(layer: Limited, echo: EchoServer) -> SocketAddr {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let server = Server::builder()
        .layer(layer)
        .add_service(echo)
        .serve_with_incoming(incoming);
    tokio::spawn(async move { server.await.unwrap() });
    addr
}

#[tokio::test]
async fn refused_calls_fail_with_grpc_codes_and_retry_information() {
    let clock = ManualClock::new();
    let echo = EchoServer::default();
    let addr = serve(layer(&clock), echo.clone());
    let mut client = EchoClient::connect(addr).await.unwrap();

    // At 0 s: the key's 3 calls go through.
    for i in 0..3 {
        let reply = client.say(say(&format!("hi {i}"), Some("alice"))).await;
        assert_eq!(reply.unwrap().into_inner().text, format!("hi {i}"));
    }

    // At 12.5 s the 4th is refused until the 0-10 s slice leaves the
    // window, at 60 s: 47.5 s on.
    clock.advance(Duration::from_millis(12_500));
    let status = client.say(say("hi 3", Some("alice"))).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "too many requests");
    let md = status.metadata();
    assert_eq!(md.get("grpc-retry-pushback-ms").unwrap(), "47500");
    // The layer's fields, as metadata.
    assert_eq!(md.get("retry-after").unwrap(), "48");
    assert_eq!(md.get("ratelimit").unwrap(), "\"1m\";r=0;t=48");
    assert_eq!(md.get("ratelimit-policy").unwrap(), "\"1m\";q=3;w=60");
    // The rich error model: tonic has base64-decoded the details.
    let details = RpcStatus::decode(status.details()).unwrap();
    assert_eq!(details.code, Code::ResourceExhausted as i32);
    assert_eq!(details.message, "too many requests");
    assert_eq!(details.details.len(), 1);
    let any = &details.details[0];
    assert_eq!(any.type_url, "type.googleapis.com/google.rpc.RetryInfo");
    let retry = RetryInfo::decode(&any.value[..]).unwrap();
    let delay = retry.retry_delay.unwrap();
    assert_eq!((delay.seconds, delay.nanos), (47, 500_000_000));

    // Another key has its own budget.
    let reply = client.say(say("hi", Some("bob"))).await.unwrap();
    assert_eq!(reply.into_inner().text, "hi");

    // No key: the configured 401, as UNAUTHENTICATED, without retry
    // information.
    let status = client.say(say("hi", None)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(status.message(), "no rate-limit key in the request");
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    assert!(status.details().is_empty());

    // Refused calls never reached the service.
    assert_eq!(echo.calls(), 4);

    // At 60 s the key fits again.
    clock.advance(Duration::from_millis(47_500));
    let reply = client.say(say("again", Some("alice"))).await.unwrap();
    assert_eq!(reply.into_inner().text, "again");
    assert_eq!(echo.calls(), 5);
}

/// A refusal is a Trailers-Only response: its body is empty and says so
/// before it is polled, so hyper's HTTP/2 server sends the headers with
/// END_STREAM (one HEADERS frame) instead of headers, an empty DATA frame
/// and no trailers.
#[tokio::test]
async fn a_refusal_is_trailers_only() {
    let clock = ManualClock::new();
    let svc = layer(&clock).layer(EchoServer::default());
    let req = || {
        http::Request::post("/echo.Echo/Say")
            .header("content-type", "application/grpc")
            .body(tonic::body::Body::empty())
            .unwrap()
    };
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::OK);
    assert_eq!(refused.headers()["content-type"], "application/grpc");
    assert_eq!(refused.headers()["grpc-status"], "16");
    assert!(refused.body().is_refusal());
    assert!(refused.body().is_end_stream());
    assert_eq!(refused.body().size_hint().exact(), Some(0));
}

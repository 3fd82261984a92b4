//! A tonic gRPC server limited per API key (`x-api-key` metadata), whose
//! refused calls fail with gRPC codes and retry information.
//!
//! ```sh
//! # Serve on 127.0.0.1:50051 until interrupted (call it with grpcurl, or
//! # any client of echo.Echo/Say with an x-api-key metadata entry):
//! cargo run -p stripecount-tower --all-features --example grpc
//! # Or start on a free port, make a few calls with a tonic client, print
//! # what came back, and exit:
//! cargo run -p stripecount-tower --all-features --example grpc -- --demo
//! ```
//!
//! The service, `echo.Echo`, is written out by hand in
//! `tests/support/echo.rs` (what tonic-build generates from a .proto); the
//! layer does not depend on it: any tonic service is limited the same way.

#[path = "../tests/support/echo.rs"]
mod echo;

use echo::{say, EchoClient, EchoServer};
use http::{HeaderName, StatusCode};
use std::net::SocketAddr;
use std::time::Duration;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{grpc_response, Header, KeyedRateLimitLayer, MissingKey};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = std::env::args().any(|a| a == "--demo");

    // 3 calls per API key in every span of 10 s, at most 100k keys held.
    let limiter = KeyedLimiter::builder(Quota::per(3, Duration::from_secs(10)).strict())
        .max_keys(100_000)
        .build()?;
    let layer =
        KeyedRateLimitLayer::new(limiter, Header::new(HeaderName::from_static("x-api-key")))
            // A call without a key: UNAUTHENTICATED.
            .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
            // Refusals in gRPC form: RESOURCE_EXHAUSTED with the retry delay.
            .refusal(grpc_response);

    let addr: SocketAddr = if demo {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:50051"
    }
    .parse()?;
    let incoming = TcpIncoming::bind(addr)?;
    let addr = incoming.local_addr()?;
    // The layer wraps every service of the server.
    let server = Server::builder()
        .layer(layer)
        .add_service(EchoServer::default())
        .serve_with_incoming(incoming);
    if !demo {
        println!("serving echo.Echo on {addr}");
        return Ok(server.await?);
    }
    tokio::spawn(server);

    let mut client = EchoClient::connect(addr).await?;
    for (i, key) in [
        Some("k1"),
        Some("k1"),
        Some("k1"),
        Some("k1"),
        Some("k2"),
        None,
    ]
    .into_iter()
    .enumerate()
    {
        let text = format!("call {i}");
        match client.say(say(&text, key)).await {
            Ok(reply) => println!("{key:?}: ok, {:?}", reply.into_inner().text),
            Err(status) => {
                let pushback = (status.metadata().get("grpc-retry-pushback-ms"))
                    .and_then(|v| v.to_str().ok())
                    .map_or("none".to_owned(), |ms| format!("{ms} ms"));
                println!(
                    "{key:?}: {:?} {:?}, retry pushback: {pushback}, \
                     {} bytes of status details",
                    status.code(),
                    status.message(),
                    status.details().len(),
                );
            }
        }
    }
    Ok(())
}

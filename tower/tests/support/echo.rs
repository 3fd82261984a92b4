//! `echo.Echo`, a one-method gRPC service, server and client, written out
//! by hand: what tonic-build would generate from
//!
//! ```proto
//! syntax = "proto3";
//! package echo;
//! message Msg { string text = 1; }
//! service Echo { rpc Say(Msg) returns (Msg); }
//! ```
//!
//! without protoc or a build script. The server answers `Say` with the
//! message it got, and counts the calls it served.
#![allow(dead_code)] // the test and the example each use their own part

use http::uri::PathAndQuery;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// `echo.Msg`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Msg {
    #[prost(string, tag = "1")]
    pub text: String,
}

/// The method's path: `/<package>.<service>/<method>`.
const SAY: &str = "/echo.Echo/Say";

/// The server side of `echo.Echo`: `Server::builder().add_service(EchoServer::default())`.
#[derive(Clone, Default)]
pub struct EchoServer {
    calls: Arc<AtomicU64>,
}

impl EchoServer {
    /// How many calls reached the service.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl NamedService for EchoServer {
    const NAME: &'static str = "echo.Echo";
}

impl tower::Service<http::Request<Body>> for EchoServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let calls = Arc::clone(&self.calls);
        Box::pin(async move {
            if req.uri().path() != SAY {
                return Ok(Status::unimplemented(req.uri().path().to_owned()).into_http());
            }
            let say = tower::service_fn(move |r: Request<Msg>| {
                calls.fetch_add(1, Ordering::Relaxed);
                async move { Ok::<_, Status>(Response::new(r.into_inner())) }
            });
            let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
            Ok(grpc.unary(say, req).await)
        })
    }
}

/// The client side of `echo.Echo`.
#[derive(Clone)]
pub struct EchoClient {
    inner: tonic::client::Grpc<Channel>,
}

impl EchoClient {
    /// A client of the server at `addr` (plain HTTP/2).
    pub async fn connect(addr: SocketAddr) -> Result<EchoClient, tonic::transport::Error> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        Ok(EchoClient {
            inner: tonic::client::Grpc::new(channel),
        })
    }

    /// Calls `Say`.
    pub async fn say(&mut self, req: Request<Msg>) -> Result<Response<Msg>, Status> {
        (self.inner.ready().await).map_err(|e| Status::unavailable(e.to_string()))?;
        let path = PathAndQuery::from_static(SAY);
        self.inner.unary(req, path, ProstCodec::default()).await
    }
}

/// A `Say` request with `text`, and `key` as its `x-api-key` metadata.
pub fn say(text: &str, key: Option<&str>) -> Request<Msg> {
    let mut req = Request::new(Msg {
        text: text.to_owned(),
    });
    if let Some(key) = key {
        req.metadata_mut()
            .insert("x-api-key", key.parse().expect("an ASCII key"));
    }
    req
}

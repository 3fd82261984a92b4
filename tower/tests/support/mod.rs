//! What the end-to-end tests share: an axum server on a free loopback port
//! and hyper's client sending concurrent requests over real connections.
#![allow(dead_code)] // each test file uses its own part

use axum::Router;
use bytes::Bytes;
use http::{HeaderName, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use stripecount::Timestamp;
use stripecount_tower::Header;
use tokio::task::JoinSet;

pub const SEC: Duration = Duration::from_secs(1);

pub fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

pub fn api_key() -> Header {
    Header::new(HeaderName::from_static("x-api-key"))
}

/// One reply, as the client saw it.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub fields: BTreeMap<String, String>,
    pub body: String,
}

impl Reply {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A server on 127.0.0.1:0 serving `app` (with each connection's peer
/// address), and a client for it.
pub struct Stack {
    pub addr: SocketAddr,
    pub client: Client<HttpConnector, Empty<Bytes>>,
}

impl Stack {
    pub async fn start(app: Router) -> Stack {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let make = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, make).await.unwrap() });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Stack { addr, client }
    }

    pub async fn get(&self, path: &str, key: Option<&str>) -> Reply {
        send(
            self.client.clone(),
            self.addr,
            path.to_owned(),
            key.map(str::to_owned),
        )
        .await
    }

    /// Sends every request at once (one task each) and returns the replies
    /// grouped by (path, key).
    pub async fn burst(
        &self,
        reqs: &[(&str, Option<&str>)],
    ) -> BTreeMap<(String, Option<String>), Vec<Reply>> {
        let mut set = JoinSet::new();
        for &(path, key) in reqs {
            let (path, key) = (path.to_owned(), key.map(str::to_owned));
            let (client, addr) = (self.client.clone(), self.addr);
            set.spawn(async move {
                let reply = send(client, addr, path.clone(), key.clone()).await;
                ((path, key), reply)
            });
        }
        let mut out: BTreeMap<_, Vec<Reply>> = BTreeMap::new();
        while let Some(r) = set.join_next().await {
            let (k, reply) = r.unwrap();
            out.entry(k).or_default().push(reply);
        }
        out
    }
}

impl Stack {
    /// A GET to `path` with `headers`; the reply's status.
    pub async fn status_with(&self, path: &str, headers: &[(&str, &str)]) -> StatusCode {
        let mut req = Request::get(format!("http://{}{path}", self.addr));
        for &(name, value) in headers {
            req = req.header(name, value);
        }
        let res = self.client.request(req.body(Empty::new()).unwrap());
        res.await.unwrap().status()
    }
}

pub async fn send(
    client: Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: String,
    key: Option<String>,
) -> Reply {
    let mut req = Request::get(format!("http://{addr}{path}"));
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    let res = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let fields = res
        .headers()
        .iter()
        .filter(|(n, _)| {
            let n = n.as_str();
            n.starts_with("ratelimit") || n == "retry-after" || n == "content-type"
        })
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned()))
        .collect();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        fields,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

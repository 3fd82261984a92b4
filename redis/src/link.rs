//! [`Link`]: the node's connection to Redis, reconnected with backoff.
//!
//! One sync connection per node, used by one caller at a time (the node
//! holds it in a mutex that also serializes flushes). A request either gets
//! its reply, or the connection is dropped: after an I/O error or a timeout
//! the stream may still carry the late reply, so it is never reused. An
//! error *reply* leaves the connection in sync and it is kept.
//!
//! Scripts run by `EVALSHA`; on `NOSCRIPT` (a restarted or flushed server)
//! the script is loaded and the same request sent again. `NOSCRIPT` means
//! the script did not run, so the resend cannot apply a batch twice.

pub(crate) use crate::backoff::Backoff;
use crate::checks::Checks;
use crate::error::{is_reply, ClusterError};
pub(crate) use crate::sample::sample_time;
use crate::script::{Lua, Request};
use crate::seeds::Seeds;
use redis::{ConnectionLike, Value};
use std::sync::Arc;
use std::time::Duration;

/// What both builders (`ClusterWindows`'s and `ClusterLimiter`'s) set of
/// a node's connection: the connect and per-request I/O timeouts, and
/// the backoff between failed attempts (from `min`, doubling up to `max`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkConfig {
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
    pub(crate) backoff: (Duration, Duration),
}

impl Default for LinkConfig {
    /// 500 ms, 1 s, and 50 ms to 5 s.
    fn default() -> Self {
        LinkConfig {
            connect_timeout: Duration::from_millis(500),
            io_timeout: Duration::from_secs(1),
            backoff: (Duration::from_millis(50), Duration::from_secs(5)),
        }
    }
}

impl LinkConfig {
    /// A builder's check of the backoff.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.backoff.0.is_zero() || self.backoff.0 > self.backoff.1 {
            return Err("the backoff needs 0 < min <= max".into());
        }
        Ok(())
    }
}

/// A connection to Redis, opened on demand.
///
/// On a Redis Cluster a link carries the traffic of one slot (a group's,
/// `group.rs`), so it needs no slot map: it is a connection to the master
/// of its slot, learnt from redirections. `MOVED` points the link at the
/// master named (the request failed and is resent by its caller: the
/// exactly-once protocol makes a resend safe wherever it lands); `ASK`
/// sends the next request once to the node named, after `ASKING`; a
/// failed connect moves the link to the next seed, which redirects it to
/// the slot's new master after a failover. The seeds are the node's
/// (`seeds.rs`): the masters any of its links was redirected to join them.
///
/// Every connection the link opens to send its requests is checked first
/// (`checks.rs`): a failed check drops it and fails the request with the
/// check's typed error.
pub(crate) struct Link {
    client: redis::Client,
    conn: Option<redis::Connection>,
    connect_timeout: Duration,
    io_timeout: Duration,
    pub(crate) backoff: Backoff,
    /// The nodes to ask where the slot is (the builder's URL first, then
    /// its seeds and the masters learnt), on a cluster; `None` on a single
    /// instance.
    seeds: Option<Arc<Seeds>>,
    /// What a new connection must pass.
    checks: Checks,
    /// The seed tried last.
    seed_at: usize,
    /// The node an `ASK` named: the next request goes there, once.
    ask: Option<redis::ConnectionInfo>,
    /// The connection of a request sent after `ASKING`, until its reply is
    /// read (with the replies it expects before the request's own).
    asking: Option<(redis::Connection, usize)>,
    /// The connection of the last `ASK`ed reply: a `WAIT` for what it
    /// wrote must go there.
    asked: Option<redis::Connection>,
    /// Encoded `SCRIPT LOAD`s sent before an `ASK`ed request (the node it
    /// names may not have the scripts yet).
    preload: Vec<Vec<u8>>,
}

/// Redirections a caller follows at once before it gives up until its
/// next attempt (a slot that moved, then a migration's `ASK`, then its
/// end).
pub(crate) const MAX_REDIRECTS: usize = 4;

/// `ASKING`, encoded.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

impl Link {
    /// A link to `url`, or on a cluster (`seeds`) to the master of a
    /// slot, found by asking `url` and then the seeds; its new connections
    /// pass `checks` (`seeds.rs` makes a node's links).
    pub(crate) fn new(
        url: &str,
        seeds: Option<Arc<Seeds>>,
        checks: Checks,
        cfg: &LinkConfig,
    ) -> Result<Link, ClusterError> {
        let (connect_timeout, io_timeout) = (cfg.connect_timeout, cfg.io_timeout);
        let backoff = Backoff::new(cfg.backoff.0, cfg.backoff.1);
        let client =
            redis::Client::open(crate::seeds::info(url)?).map_err(ClusterError::Connection)?;
        Ok(Link {
            client,
            conn: None,
            connect_timeout,
            io_timeout,
            backoff,
            seeds,
            checks,
            seed_at: 0,
            ask: None,
            asking: None,
            asked: None,
            preload: Vec::new(),
        })
    }

    /// Sends `lua`'s `SCRIPT LOAD` before any request redirected by `ASK`.
    pub(crate) fn preload(&mut self, lua: &Lua) {
        let mut load = Request::new(3);
        load.arg(b"SCRIPT").arg(b"LOAD").arg(lua.source.as_bytes());
        self.preload.push(load.bytes);
    }

    /// Opens a connection if none is open; `true` if it opened one. On a
    /// cluster a failed connect moves the link to the next seed.
    pub(crate) fn ensure(&mut self) -> Result<bool, ClusterError> {
        if self.conn.is_some() {
            return Ok(false);
        }
        let checked = self.open(&self.client).and_then(|mut c| {
            self.checks.run(&mut c, &self.server())?;
            Ok(c)
        });
        match checked {
            Ok(c) => {
                self.conn = Some(c);
                Ok(true)
            }
            Err(e) => {
                // A node that cannot be reached: ask the next seed. (One
                // that failed a check answered: it is asked again.)
                if let (Some(seeds), ClusterError::Connection(_)) = (&self.seeds, &e) {
                    let (at, next) = seeds.after(self.seed_at);
                    self.seed_at = at;
                    self.client = redis::Client::open(next).map_err(ClusterError::Connection)?;
                }
                Err(e)
            }
        }
    }

    fn open(&self, client: &redis::Client) -> Result<redis::Connection, ClusterError> {
        let c = client
            .get_connection_with_timeout(self.connect_timeout)
            .map_err(ClusterError::Connection)?;
        c.set_read_timeout(Some(self.io_timeout))
            .and_then(|()| c.set_write_timeout(Some(self.io_timeout)))
            .map_err(ClusterError::Connection)?;
        Ok(c)
    }

    /// Whether `e` is a redirection this link now follows (`MOVED`: the
    /// link points at the node named; `ASK`: its next request goes there).
    pub(crate) fn redirected(&self, e: &ClusterError) -> bool {
        self.seeds.is_some() && matches!(e, ClusterError::Server(r) if r.redirect_node().is_some())
    }

    /// Files an error reply: on a cluster, a redirection is followed.
    fn note(&mut self, e: &redis::RedisError) {
        let Some(seeds) = &self.seeds else {
            return;
        };
        let Some((addr, _slot)) = e.redirect_node() else {
            return;
        };
        let Some((host, port)) = addr.rsplit_once(':') else {
            return;
        };
        let Ok(port) = port.parse() else {
            return;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let to = seeds
            .first()
            .set_addr(redis::ConnectionAddr::Tcp(host, port));
        seeds.learn(&to);
        if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask) {
            self.ask = Some(to);
        } else if let Ok(c) = redis::Client::open(to) {
            self.client = c;
            self.conn = None;
        }
    }

    /// Opens a connection to the node an `ASK` named and writes `req`
    /// after the script loads and `ASKING`; returns the connection and
    /// the replies to skip before `req`'s.
    fn ask_send(
        &mut self,
        to: redis::ConnectionInfo,
        req: &[u8],
    ) -> Result<(redis::Connection, usize), ClusterError> {
        let client = redis::Client::open(to).map_err(ClusterError::Connection)?;
        let mut c = self.open(&client)?;
        let mut all = self.preload.concat();
        all.extend_from_slice(ASKING);
        all.extend_from_slice(req);
        c.send_packed_command(&all)
            .map_err(ClusterError::Connection)?;
        Ok((c, self.preload.len() + 1))
    }

    /// Reads the replies of an `ASK`ed request: the preloads' and
    /// `ASKING`'s, then `n` of the request.
    fn ask_receive(
        &mut self,
        mut c: redis::Connection,
        skip: usize,
        n: usize,
    ) -> Result<Vec<Value>, ClusterError> {
        let mut out = Vec::with_capacity(n);
        for i in 0..skip + n {
            let v = c.recv_response();
            let v = v.and_then(Value::extract_error).map_err(|e| {
                self.note(&e);
                ClusterError::from_redis(e)
            })?;
            if i >= skip {
                out.push(v);
            }
        }
        self.asked = Some(c);
        Ok(out)
    }

    /// `WAIT replicas timeout` on the connection the last reply came on
    /// (the `ASK`ed node's, if it was one): how many replicas have
    /// everything written there so far.
    pub(crate) fn wait(&mut self, replicas: u32, timeout: Duration) -> Result<u64, ClusterError> {
        let mut w = Request::new(3);
        w.arg(b"WAIT")
            .num(u64::from(replicas))
            .num(timeout.as_millis().max(1) as u64);
        let v = match self.asked.take() {
            Some(mut c) => c
                .req_packed_command(&w.bytes)
                .and_then(Value::extract_error)
                .map_err(ClusterError::from_redis)?,
            None => self.request(&w.bytes)?,
        };
        crate::script::int(&v)
    }

    /// Sends one encoded request and reads its reply. An error reply is a
    /// `Server` (or `ShapeMismatch`) error and keeps the connection; any
    /// other failure drops it.
    pub(crate) fn request(&mut self, req: &[u8]) -> Result<Value, ClusterError> {
        self.asked = None;
        if let Some(to) = self.ask.take() {
            let (c, skip) = self.ask_send(to, req)?;
            return Ok(self.ask_receive(c, skip, 1)?.remove(0));
        }
        self.ensure()?;
        let conn = self.conn.as_mut().expect("ensured");
        match conn.req_packed_command(req).and_then(Value::extract_error) {
            Ok(v) => Ok(v),
            Err(e) => {
                if !is_reply(&e) {
                    self.conn = None;
                }
                self.note(&e);
                Err(ClusterError::from_redis(e))
            }
        }
    }

    /// Sends `n` encoded requests at once (a pipeline) and reads their
    /// replies.
    pub(crate) fn pipeline(&mut self, req: &[u8], n: usize) -> Result<Vec<Value>, ClusterError> {
        self.asked = None;
        if let Some(to) = self.ask.take() {
            let (c, skip) = self.ask_send(to, req)?;
            return self.ask_receive(c, skip, n);
        }
        self.ensure()?;
        let conn = self.conn.as_mut().expect("ensured");
        let r = conn
            .req_packed_commands(req, 0, n)
            .and_then(|vs| vs.into_iter().map(Value::extract_error).collect());
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                // A pipeline's error may leave later replies unread.
                self.conn = None;
                self.note(&e);
                Err(ClusterError::from_redis(e))
            }
        }
    }

    /// The server the link sends to (on a cluster: the master of its slot
    /// as redirections taught it), as `host:port`.
    pub(crate) fn server(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    /// Whether a connection is open.
    pub(crate) fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Drops the connection (the next request opens another).
    pub(crate) fn reset(&mut self) {
        self.conn = None;
        self.asking = None;
        self.asked = None;
    }

    /// Writes one encoded request without reading its reply (`receive`
    /// reads it): the caller works while Redis runs it. Any failure drops
    /// the connection.
    pub(crate) fn send(&mut self, req: &[u8]) -> Result<(), ClusterError> {
        self.asked = None;
        if let Some(to) = self.ask.take() {
            self.asking = Some(self.ask_send(to, req)?);
            return Ok(());
        }
        self.ensure()?;
        let conn = self.conn.as_mut().expect("ensured");
        conn.send_packed_command(req).map_err(|e| {
            self.conn = None;
            ClusterError::from_redis(e)
        })
    }

    /// Reads the reply to the request `send` wrote, as `request` does.
    fn receive(&mut self) -> Result<Value, ClusterError> {
        if let Some((c, skip)) = self.asking.take() {
            return Ok(self.ask_receive(c, skip, 1)?.remove(0));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(ClusterError::Protocol("no request was sent".into()));
        };
        match conn.recv_response().and_then(Value::extract_error) {
            Ok(v) => Ok(v),
            Err(e) => {
                if !is_reply(&e) {
                    self.conn = None;
                }
                self.note(&e);
                Err(ClusterError::from_redis(e))
            }
        }
    }

    /// Reads the reply to the `EVALSHA` `req` that `send` wrote; if the
    /// server did not have the script, loads it and runs `req` again.
    pub(crate) fn receive_eval(&mut self, lua: &Lua, req: &[u8]) -> Result<Value, ClusterError> {
        let r = self.receive();
        self.unless_noscript(r, lua, req)
    }

    /// Runs a script by `EVALSHA` (`req` is the encoded `EVALSHA`),
    /// loading it first if the server does not have it.
    pub(crate) fn eval(&mut self, lua: &Lua, req: &[u8]) -> Result<Value, ClusterError> {
        let r = self.request(req);
        self.unless_noscript(r, lua, req)
    }

    fn unless_noscript(
        &mut self,
        r: Result<Value, ClusterError>,
        lua: &Lua,
        req: &[u8],
    ) -> Result<Value, ClusterError> {
        match r {
            Err(ClusterError::Server(e))
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                let mut load = crate::script::Request::new(3);
                load.arg(b"SCRIPT").arg(b"LOAD").arg(lua.source.as_bytes());
                self.request(&load.bytes)?;
                self.request(req)
            }
            r => r,
        }
    }
}

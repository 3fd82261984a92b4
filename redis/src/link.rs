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

use crate::error::{is_reply, ClusterError};
use crate::script::{time_us, Lua, Request};
use crate::timeline::ServerTime;
use rand::Rng;
use redis::{ConnectionLike, Value};
use std::time::{Duration, Instant};
use stripecount::{Clock, Timestamp};

/// Exponential backoff with jitter between failed attempts.
#[derive(Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
    until: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            next: min,
            until: None,
        }
    }

    /// Whether an attempt may be made at `now`.
    pub(crate) fn ready(&self, now: Instant) -> bool {
        self.until.is_none_or(|u| now >= u)
    }

    /// An attempt failed at `now`: wait `next` (±25%), then double it.
    pub(crate) fn failed(&mut self, now: Instant) {
        let jitter = rand::rng().random_range(0.75..1.25);
        self.until = Some(now + self.next.mul_f64(jitter));
        self.next = (self.next * 2).min(self.max);
    }

    /// An attempt succeeded.
    pub(crate) fn succeeded(&mut self) {
        self.next = self.min;
        self.until = None;
    }
}

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
pub(crate) struct Link {
    client: redis::Client,
    conn: Option<redis::Connection>,
    connect_timeout: Duration,
    io_timeout: Duration,
    pub(crate) backoff: Backoff,
}

impl Link {
    pub(crate) fn new(url: &str, cfg: &LinkConfig) -> Result<Link, ClusterError> {
        let (connect_timeout, io_timeout) = (cfg.connect_timeout, cfg.io_timeout);
        let backoff = Backoff::new(cfg.backoff.0, cfg.backoff.1);
        let client = redis::Client::open(url)
            .map_err(|e| ClusterError::Config(format!("bad redis url {url:?}: {e}")))?;
        Ok(Link {
            client,
            conn: None,
            connect_timeout,
            io_timeout,
            backoff,
        })
    }

    /// Opens a connection if none is open; `true` if it opened one.
    pub(crate) fn ensure(&mut self) -> Result<bool, ClusterError> {
        if self.conn.is_some() {
            return Ok(false);
        }
        let c = self
            .client
            .get_connection_with_timeout(self.connect_timeout)
            .map_err(ClusterError::Connection)?;
        c.set_read_timeout(Some(self.io_timeout))
            .and_then(|()| c.set_write_timeout(Some(self.io_timeout)))
            .map_err(ClusterError::Connection)?;
        self.conn = Some(c);
        Ok(true)
    }

    /// Opens a connection if none is open, and on a new one samples the
    /// server's time three times into `time` (forgetting older samples:
    /// it may be another server). Returns whether it opened one and how
    /// many samples were accepted.
    pub(crate) fn ensure_sampled<C: Clock>(
        &mut self,
        time: &ServerTime<C>,
    ) -> Result<(bool, u64), ClusterError> {
        if !self.ensure()? {
            return Ok((false, 0));
        }
        time.reset_bound();
        let mut t = Request::new(1);
        t.arg(b"TIME");
        let mut n = 0;
        for _ in 0..3 {
            let t0 = time.node_clock().now();
            let v = self.request(&t.bytes)?;
            n += u64::from(sample_time(time, t0, &v)?);
        }
        Ok((true, n))
    }

    /// Sends one encoded request and reads its reply. An error reply is a
    /// `Server` (or `ShapeMismatch`) error and keeps the connection; any
    /// other failure drops it.
    pub(crate) fn request(&mut self, req: &[u8]) -> Result<Value, ClusterError> {
        self.ensure()?;
        let conn = self.conn.as_mut().expect("ensured");
        match conn.req_packed_command(req).and_then(Value::extract_error) {
            Ok(v) => Ok(v),
            Err(e) => {
                if !is_reply(&e) {
                    self.conn = None;
                }
                Err(ClusterError::from_redis(e))
            }
        }
    }

    /// Sends `n` encoded requests at once (a pipeline) and reads their
    /// replies.
    pub(crate) fn pipeline(&mut self, req: &[u8], n: usize) -> Result<Vec<Value>, ClusterError> {
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
                Err(ClusterError::from_redis(e))
            }
        }
    }

    /// Drops the connection (the next request opens another).
    pub(crate) fn reset(&mut self) {
        self.conn = None;
    }

    /// Writes one encoded request without reading its reply (`receive`
    /// reads it): the caller works while Redis runs it. Any failure drops
    /// the connection.
    pub(crate) fn send(&mut self, req: &[u8]) -> Result<(), ClusterError> {
        self.ensure()?;
        let conn = self.conn.as_mut().expect("ensured");
        conn.send_packed_command(req).map_err(|e| {
            self.conn = None;
            ClusterError::from_redis(e)
        })
    }

    /// Reads the reply to the request `send` wrote, as `request` does.
    fn receive(&mut self) -> Result<Value, ClusterError> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(ClusterError::Protocol("no request was sent".into()));
        };
        match conn.recv_response().and_then(Value::extract_error) {
            Ok(v) => Ok(v),
            Err(e) => {
                if !is_reply(&e) {
                    self.conn = None;
                }
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

/// Files a `TIME` reply received now for a request sent at node time
/// `t0`; returns whether the sample was accepted.
pub(crate) fn sample_time<C: Clock>(
    time: &ServerTime<C>,
    t0: Timestamp,
    v: &Value,
) -> Result<bool, ClusterError> {
    let t1 = time.node_clock().now();
    let Value::Array(a) = v else {
        return Err(ClusterError::Protocol("TIME is not an array".into()));
    };
    if a.len() != 2 {
        return Err(ClusterError::Protocol("TIME has the wrong length".into()));
    }
    let us = time_us(&a[0], &a[1])?;
    Ok(time.sample(t0, t1, Timestamp::from_nanos(us.saturating_mul(1_000))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(300));
        let t = Instant::now();
        assert!(b.ready(t));
        b.failed(t);
        assert!(!b.ready(t));
        assert!(!b.ready(t + Duration::from_millis(74)));
        assert!(b.ready(t + Duration::from_millis(125)));
        b.failed(t);
        assert!(!b.ready(t + Duration::from_millis(149)));
        b.failed(t);
        b.failed(t);
        assert!(b.ready(t + Duration::from_millis(375)));
        b.succeeded();
        assert!(b.ready(t));
    }
}

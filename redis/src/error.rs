//! [`ClusterError`]: why a cluster operation failed, typed.

use std::fmt;

/// Why a node could not be built, or a flush or read failed. A failed
/// flush loses nothing: its counts stay held and are sent again.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClusterError {
    /// The node's configuration is invalid (the message says why).
    Config(String),
    /// Redis could not be reached, or the connection failed or timed out
    /// mid-request (retried by the next flush, after a backoff for the
    /// background flusher).
    Connection(redis::RedisError),
    /// Redis answered with an error (e.g. `LOADING` while it reads its
    /// append-only file, or `BUSY`).
    Server(redis::RedisError),
    /// This node's window shape differs from the one the namespace's other
    /// nodes use (windows: `slices:slice_ms`; limiters: the quota,
    /// `slices:slice_ms:limit`, then `:strict` if strict): counts would be
    /// filed in different slices, or judged differently. Nothing was
    /// applied.
    ShapeMismatch(String),
    /// Redis answered something this crate did not expect.
    Protocol(String),
    /// The node was shut down.
    Closed,
    /// Redis applied a batch but fewer replicas than asked
    /// ([`wait_for_replicas`](crate::ClusterWindowsBuilder::wait_for_replicas))
    /// acknowledged it within the timeout: the batch stays held and is
    /// resent (answered as a replay, or applied again by a promoted replica
    /// that never had it).
    NotReplicated {
        /// Replicas that acknowledged it.
        reached: u64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The server is a Redis Cluster node and the node was built for a
    /// single instance: call `redis_cluster(groups)` on the builder
    /// ([`ClusterWindowsBuilder::redis_cluster`](crate::ClusterWindowsBuilder::redis_cluster),
    /// [`ClusterLimiterBuilder::redis_cluster`](crate::ClusterLimiterBuilder::redis_cluster)),
    /// and `seeds` with the other masters. Found on the first connection
    /// (`INFO cluster`: `cluster_enabled:1`); nothing was sent.
    ClusterNode {
        /// The server, as `host:port`.
        server: String,
    },
    /// A master has fewer replicas connected than
    /// [`wait_for_replicas`](crate::ClusterWindowsBuilder::wait_for_replicas)
    /// asks for, so it could acknowledge nothing: its connection is not
    /// used (checked on every new connection, `INFO replication`) and is
    /// tried again with backoff, until enough replicas are connected. After
    /// a failover the promoted master has no replica until one rejoins it.
    TooFewReplicas {
        /// The master, as `host:port`.
        server: String,
        /// Replicas connected to it.
        connected: u64,
        /// Replicas asked for.
        wanted: u32,
    },
}

impl ClusterError {
    /// Whether retrying later may succeed (connection and server errors).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::Connection(_)
                | ClusterError::Server(_)
                | ClusterError::NotReplicated { .. }
                | ClusterError::TooFewReplicas { .. }
        )
    }

    /// Whether the error says a setting of the builder cannot work with
    /// the server it met ([`ClusterNode`](ClusterError::ClusterNode),
    /// [`TooFewReplicas`](ClusterError::TooFewReplicas)): met while a node
    /// is built, it fails the build.
    pub fn is_setting(&self) -> bool {
        matches!(
            self,
            ClusterError::ClusterNode { .. } | ClusterError::TooFewReplicas { .. }
        )
    }

    /// A short name of the kind of error (for logs and metrics labels).
    pub fn kind(&self) -> &'static str {
        match self {
            ClusterError::Config(_) => "config",
            ClusterError::Connection(_) => "connection",
            ClusterError::Server(_) => "server",
            ClusterError::ShapeMismatch(_) => "shape_mismatch",
            ClusterError::Protocol(_) => "protocol",
            ClusterError::Closed => "closed",
            ClusterError::NotReplicated { .. } => "not_replicated",
            ClusterError::ClusterNode { .. } => "cluster_node",
            ClusterError::TooFewReplicas { .. } => "too_few_replicas",
        }
    }

    /// Sorts a redis-rs error: an error reply from the server keeps the
    /// connection usable; anything else (I/O, timeout, parse) does not.
    pub(crate) fn from_redis(e: redis::RedisError) -> ClusterError {
        if e.code() == Some("SCFG") {
            return ClusterError::ShapeMismatch(e.detail().unwrap_or_default().to_owned());
        }
        if is_reply(&e) {
            ClusterError::Server(e)
        } else {
            ClusterError::Connection(e)
        }
    }
}

/// Whether Redis answered with an error reply (the connection is in sync).
pub(crate) fn is_reply(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Config(m) => write!(f, "invalid configuration: {m}"),
            ClusterError::Connection(e) => write!(f, "redis connection failed: {e}"),
            ClusterError::Server(e) => write!(f, "redis answered an error: {e}"),
            ClusterError::ShapeMismatch(m) => write!(f, "window shape mismatch: {m}"),
            ClusterError::Protocol(m) => write!(f, "unexpected reply from redis: {m}"),
            ClusterError::Closed => write!(f, "the node was shut down"),
            ClusterError::NotReplicated { reached, wanted } => write!(
                f,
                "the batch reached {reached} replicas of the {wanted} asked for in time"
            ),
            ClusterError::ClusterNode { server } => write!(
                f,
                "the Redis server at {server} is a Redis Cluster node (cluster_enabled:1), and \
                 the node was built for a single instance: call redis_cluster(groups) on the \
                 builder, with seeds(..) naming the other masters"
            ),
            ClusterError::TooFewReplicas {
                server,
                connected,
                wanted,
            } => write!(
                f,
                "the master at {server} has {connected} replicas connected and \
                 wait_for_replicas asks for {wanted}: nothing it applies could be acknowledged \
                 (add replicas, or ask for fewer)"
            ),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Connection(e) | ClusterError::Server(e) => Some(e),
            _ => None,
        }
    }
}

impl From<stripecount::ConfigError> for ClusterError {
    fn from(e: stripecount::ConfigError) -> Self {
        ClusterError::Config(e.to_string())
    }
}

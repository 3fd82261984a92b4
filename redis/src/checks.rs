//! [`Checks`]: what a link verifies on each connection it opens, before
//! the connection carries a request, so that a setting that cannot work
//! fails with a typed error that says what to change instead of failing
//! every request with an error that does not.
//!
//! - **A cluster node on a single-instance build.** Built without
//!   `redis_cluster`, the node names its keys without hash tags and runs
//!   scripts over keys of many slots: a Redis Cluster node answers every
//!   flush and lease with `MOVED` or `CROSSSLOT`. `INFO cluster` saying
//!   `cluster_enabled:1` refuses the connection with
//!   [`ClusterError::ClusterNode`], which names the builder method to call.
//! - **Too few replicas for `wait_for_replicas(n)`.** A master with fewer
//!   than `n` replicas connected (`INFO replication`: `connected_slaves`)
//!   can acknowledge no batch and no lease: every one would be held as
//!   `NotReplicated` without end. The connection is refused with
//!   [`ClusterError::TooFewReplicas`] (transient: the link retries with
//!   its backoff, and passes once enough replicas are connected); the
//!   node's health counts the groups it holds back
//!   ([`Health::replicas_short`](crate::Health::replicas_short)). Only the
//!   master of the link's slot is judged: on a cluster a link first
//!   connects to the builder's node or a seed, which may serve other slots
//!   (`CLUSTER NODES`, its `myself` line) and redirects the link to the
//!   slot's master, whose new connection is judged; a replica
//!   (`role:slave`) is not judged either.
//!
//! Both questions go in one round trip (a pipeline of the `INFO` sections
//! needed), on a new connection only: a live connection is not asked
//! again. A server that refuses `INFO` (a renamed or disabled command) is
//! not judged. A node on a cluster without `wait_for_replicas` asks
//! nothing.

use crate::error::ClusterError;
use crate::group::ClusterOptions;
use redis::{ConnectionLike, Value};

/// The checks of a node's links, from its builder's options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checks {
    /// Refuse a Redis Cluster node (a single-instance build).
    single: bool,
    /// Refuse a master with fewer replicas connected.
    replicas: Option<u32>,
    /// The link's slot on a cluster.
    slot: Option<u16>,
}

impl Checks {
    /// The checks a builder's cluster options ask for.
    pub(crate) fn new(options: &ClusterOptions) -> Checks {
        Checks {
            single: options.groups.is_none(),
            replicas: options.durability.map(|(n, _)| n),
            slot: None,
        }
    }

    /// These checks for a link of `slot` (on a cluster).
    pub(crate) fn for_slot(self, slot: Option<u16>) -> Checks {
        Checks { slot, ..self }
    }

    /// Runs the checks on `conn`, a new connection to `server`.
    pub(crate) fn run(
        &self,
        conn: &mut redis::Connection,
        server: &str,
    ) -> Result<(), ClusterError> {
        let mut req = Vec::new();
        let mut n = 0;
        if self.single {
            req.extend_from_slice(b"*2\r\n$4\r\nINFO\r\n$7\r\ncluster\r\n");
            n += 1;
        }
        if self.replicas.is_some() {
            req.extend_from_slice(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n");
            n += 1;
            if self.slot.is_some() {
                req.extend_from_slice(b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nNODES\r\n");
                n += 1;
            }
        }
        if n == 0 {
            return Ok(());
        }
        let replies = conn
            .req_packed_commands(&req, 0, n)
            .map_err(ClusterError::from_redis)?;
        let mut replies = replies.iter().map(info_text);
        if self.single {
            if let Some(Some(text)) = replies.next() {
                if field(&text, "cluster_enabled") == Some("1") {
                    return Err(ClusterError::ClusterNode {
                        server: server.to_owned(),
                    });
                }
            }
        }
        if let Some(wanted) = self.replicas {
            let replication = replies.next().flatten();
            // On a cluster, whether this node serves the link's slot.
            let serves = match self.slot {
                Some(slot) => replies.next().flatten().is_some_and(|t| serves(&t, slot)),
                None => true,
            };
            if let (Some(text), true) = (replication, serves) {
                let connected = field(&text, "connected_slaves").and_then(|v| v.parse().ok());
                if let (Some("master"), Some(connected)) = (field(&text, "role"), connected) {
                    if connected < u64::from(wanted) {
                        return Err(ClusterError::TooFewReplicas {
                            server: server.to_owned(),
                            connected,
                            wanted,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// The text of an `INFO` reply; `None` for an error reply or another
/// shape (the server is not judged).
fn info_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// Whether the `myself` line of a `CLUSTER NODES` text lists `slot` among
/// its slots (`lo-hi` or a single slot; migration entries, `[...]`, are
/// not served yet or still are).
fn serves(nodes: &str, slot: u16) -> bool {
    let Some(me) = nodes.lines().find(|l| {
        l.split(' ')
            .nth(2)
            .is_some_and(|f| f.split(',').any(|f| f == "myself"))
    }) else {
        return false;
    };
    me.split(' ').skip(8).any(|r| {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        match (lo.parse::<u16>(), hi.parse::<u16>()) {
            (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
            _ => false,
        }
    })
}

/// The value of `name` in an `INFO` text (`name:value` lines).
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim_end())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_info_lines() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=14,lag=0\r\n";
        assert_eq!(field(text, "role"), Some("master"));
        assert_eq!(field(text, "connected_slaves"), Some("1"));
        assert_eq!(
            field(text, "slave0"),
            Some("ip=127.0.0.1,port=7001,state=online,offset=14,lag=0")
        );
        assert_eq!(field(text, "connected"), None);
        assert_eq!(
            field("# Cluster\r\ncluster_enabled:0\r\n", "cluster_enabled"),
            Some("0")
        );
        assert_eq!(info_text(&Value::Nil), None);
    }

    #[test]
    fn the_myself_line_says_which_slots_a_node_serves() {
        let nodes = "\
            07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected\n\
            67ed 127.0.0.1:30002@40002 master - 0 1426238316232 2 connected 5461-10922\n\
            e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5461->-67ed]\n";
        assert!(serves(nodes, 0) && serves(nodes, 5460) && serves(nodes, 12000));
        assert!(!serves(nodes, 5461) && !serves(nodes, 11999) && !serves(nodes, 16383));
        assert!(!serves("", 0));
    }
}

//! [`Seeds`]: the nodes a node's links ask where a slot is, on a Redis
//! Cluster, shared by the node's links; and [`NodeLinks`], which makes a
//! node's links with the seeds and checks (`checks.rs`) its builder asks
//! for.
//!
//! # Learnt masters
//! The list starts with the builder's URL and `seeds`. Every master a
//! link is sent to by `MOVED` or `ASK` joins it (once; at most
//! [`MAX_SEEDS`]): a link whose master fails asks the next node of the
//! list, which redirects it to the slot's new master. So a node built
//! with one master's URL and no seeds still finds that master's
//! replacement after a failover, through the masters its groups learnt
//! (16 groups over 3 masters: every master serves some group). The list is
//! the node's, not a link's: a group that never was redirected still
//! knows the masters its siblings met.
//!
//! # Invariants
//! - The list only grows, from the builder's nodes first; its first entry
//!   is the builder's URL, whose connection settings (database, user,
//!   password, TLS) every learnt master inherits.
//! - The lock is held to read or push one entry: never across I/O.

use crate::checks::Checks;
use crate::error::ClusterError;
use crate::group::ClusterOptions;
use crate::link::{Link, LinkConfig};
use crate::sync::lock;
use std::sync::{Arc, Mutex};

/// The most nodes a node's seed list holds (the builder's and learnt
/// ones): a cluster with more masters still works, its later masters
/// being found through the others.
pub(crate) const MAX_SEEDS: usize = 64;

/// The nodes to ask where a slot is; see the module docs.
#[derive(Debug)]
pub(crate) struct Seeds {
    list: Mutex<Vec<redis::ConnectionInfo>>,
}

impl Seeds {
    /// The first entry: the builder's URL.
    pub(crate) fn first(&self) -> redis::ConnectionInfo {
        lock(&self.list)[0].clone()
    }

    /// The entry after `at` (wrapping), and its index.
    pub(crate) fn after(&self, at: usize) -> (usize, redis::ConnectionInfo) {
        let list = lock(&self.list);
        let next = (at + 1) % list.len();
        (next, list[next].clone())
    }

    /// Adds `node` unless it is listed (or the list is full).
    pub(crate) fn learn(&self, node: &redis::ConnectionInfo) {
        let mut list = lock(&self.list);
        if list.len() < MAX_SEEDS && !list.iter().any(|s| s.addr() == node.addr()) {
            list.push(node.clone());
        }
    }

    /// The nodes listed now, as `host:port`.
    #[cfg(test)]
    pub(crate) fn addrs(&self) -> Vec<String> {
        lock(&self.list)
            .iter()
            .map(|s| s.addr().to_string())
            .collect()
    }
}

/// Makes a node's links: each to the builder's URL, with the node's seeds
/// (on a cluster) and checks.
pub(crate) struct NodeLinks {
    url: String,
    seeds: Option<Arc<Seeds>>,
    checks: Checks,
    cfg: LinkConfig,
}

/// Parses a URL into connection settings.
pub(crate) fn info(u: &str) -> Result<redis::ConnectionInfo, ClusterError> {
    redis::IntoConnectionInfo::into_connection_info(u)
        .map_err(|e| ClusterError::Config(format!("bad redis url {u:?}: {e}")))
}

impl NodeLinks {
    /// The links of a node built with `url`, `options` and `cfg`.
    pub(crate) fn new(
        url: &str,
        options: &ClusterOptions,
        cfg: &LinkConfig,
    ) -> Result<NodeLinks, ClusterError> {
        let mut list = vec![info(url)?];
        for u in &options.seeds {
            list.push(info(u)?);
        }
        let seeds = options.groups.is_some().then(|| {
            Arc::new(Seeds {
                list: Mutex::new(list),
            })
        });
        Ok(NodeLinks {
            url: url.to_owned(),
            seeds,
            checks: Checks::new(options),
            cfg: *cfg,
        })
    }

    /// A new link (not connected), for a group of `slot` on a cluster.
    pub(crate) fn link(&self, slot: Option<u16>) -> Result<Link, ClusterError> {
        let checks = self.checks.for_slot(slot);
        Link::new(&self.url, self.seeds.clone(), checks, &self.cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learnt_masters_join_once_after_the_builders_nodes() {
        let opts = ClusterOptions {
            groups: Some(16),
            seeds: vec!["redis://127.0.0.1:7001/".into()],
            durability: None,
        };
        let links =
            NodeLinks::new("redis://127.0.0.1:7000/", &opts, &LinkConfig::default()).unwrap();
        let seeds = links.seeds.clone().unwrap();
        for port in [7002, 7001, 7002, 7003] {
            seeds.learn(&info(&format!("redis://127.0.0.1:{port}/")).unwrap());
        }
        assert_eq!(
            seeds.addrs(),
            [
                "127.0.0.1:7000",
                "127.0.0.1:7001",
                "127.0.0.1:7002",
                "127.0.0.1:7003"
            ]
        );
        assert_eq!(seeds.after(3).0, 0);
        for port in 0..2 * MAX_SEEDS as u16 {
            seeds.learn(&info(&format!("redis://127.0.0.1:{}/", 8000 + port)).unwrap());
        }
        assert_eq!(seeds.addrs().len(), MAX_SEEDS);
        // A single instance has no seeds.
        let single = NodeLinks::new(
            "redis://127.0.0.1:7000/",
            &ClusterOptions::default(),
            &LinkConfig::default(),
        )
        .unwrap();
        assert!(single.seeds.is_none());
    }
}

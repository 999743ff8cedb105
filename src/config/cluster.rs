//! `[cluster]`: whether this `pincer run` is one node of several sharing one
//! PostgreSQL (`[store] url`), its name among them and its lease clock. Off
//! by default, so a single PostgreSQL node behaves as before. Touches nothing
//! but `/proc/sys/kernel/hostname`, read for the default node id.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use crate::cluster::timing::{LeaseTiming, LeaseTtlError, DEFAULT_LEASE_TTL};
use crate::cluster::NodeId;

/// Where Linux keeps the host name (what `gethostname(2)` returns).
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// On only together with `[store] url`: this node registers, renews its
    /// row and claims groups under leases.
    pub enabled: bool,
    /// This node's name among the others; unset: the host name, made a valid
    /// node id ([`NodeId::from_hostname`]). Two machines with one host name
    /// must set it.
    pub node_id: Option<NodeId>,
    /// How long a node's row stays alive after a renewal: a dead node's
    /// groups move within about this. Between 2s and 10m.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// Where the groups' folders live: `"moved"` (each node's own
    /// `groups_dir`; a group's folder is snapshotted when its CLI stops and
    /// put in place on the node that runs it next) or `"shared"` (every
    /// node's `groups_dir` is the same shared filesystem: nothing moves).
    #[serde(default)]
    pub workspace: Workspace,
    /// A draining node (`pincer drain`, SIGTERM) lets a turn in flight
    /// finish for up to this before it hands the group over anyway.
    #[serde(default = "default_drain_turn_timeout", with = "humantime_serde")]
    pub drain_turn_timeout: Duration,
    /// ... and background tasks run this long after their turn ended.
    #[serde(default = "default_drain_tasks_wait", with = "humantime_serde")]
    pub drain_tasks_wait: Duration,
}

/// `[cluster] drain_turn_timeout`'s default: a long turn finishes; a stuck
/// one does not hold an upgrade for ever.
pub const DEFAULT_DRAIN_TURN_TIMEOUT: Duration = Duration::from_secs(120);
/// `[cluster] drain_tasks_wait`'s default.
pub const DEFAULT_DRAIN_TASKS_WAIT: Duration = Duration::from_secs(10);

fn default_drain_turn_timeout() -> Duration {
    DEFAULT_DRAIN_TURN_TIMEOUT
}

fn default_drain_tasks_wait() -> Duration {
    DEFAULT_DRAIN_TASKS_WAIT
}

/// `[cluster] workspace`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Workspace {
    #[default]
    Moved,
    Shared,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            enabled: false,
            node_id: None,
            lease_ttl: DEFAULT_LEASE_TTL,
            workspace: Workspace::Moved,
            drain_turn_timeout: DEFAULT_DRAIN_TURN_TIMEOUT,
            drain_tasks_wait: DEFAULT_DRAIN_TASKS_WAIT,
        }
    }
}

impl ClusterConfig {
    /// `store_shared`: whether `[store] url` is set (the cluster needs it).
    pub(super) fn check(&self, store_shared: bool) -> Result<(), ConfigError> {
        if self.enabled && !store_shared {
            return Err(ConfigError::Rule {
                key: "cluster.enabled",
                problem: "needs a shared store: set store.url to the PostgreSQL every node uses \
                          (`postgres://user:password@host/database`), or set cluster.enabled = false",
            });
        }
        self.timing().map(|_| ()).map_err(|e| ConfigError::Rule { key: "cluster.lease_ttl", problem: problem(&e) })?;
        Ok(())
    }

    /// The lease clocks (checked at load, so only a config built by hand fails here).
    pub fn timing(&self) -> Result<LeaseTiming, LeaseTtlError> {
        LeaseTiming::new(self.lease_ttl)
    }

    /// Whether the groups' folders move with them (not on a shared filesystem).
    pub fn moves_folders(&self) -> bool {
        self.enabled && self.workspace == Workspace::Moved
    }

    /// This node's id: the configured one, else the host name's.
    pub fn node_id(&self) -> NodeId {
        match &self.node_id {
            Some(id) => id.clone(),
            None => NodeId::from_hostname(&std::fs::read_to_string(HOSTNAME_FILE).unwrap_or_default()),
        }
    }
}

/// What to set, for the config error (whose text is static; the bounds are
/// `cluster::timing`'s, which a test keeps in step).
fn problem(e: &LeaseTtlError) -> &'static str {
    match e {
        LeaseTtlError::TooShort(_) => {
            "is too short: set it to at least 2s (the default is 10s), or a slow database round trip stops \
             every session"
        }
        LeaseTtlError::TooLong(_) => {
            "is too long: set it to at most 10m (the default is 10s); a dead node's groups wait this long to move"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::root::Config;
    use super::*;
    use crate::cluster::timing::{LONGEST_LEASE_TTL, SHORTEST_LEASE_TTL};

    #[test]
    fn off_by_default_with_a_ten_second_lease() {
        let c = ClusterConfig::default();
        assert!(!c.enabled && c.node_id.is_none());
        assert_eq!(c.timing().unwrap(), LeaseTiming::default());
        assert!(c.check(false).is_ok() && c.check(true).is_ok());
    }

    #[test]
    fn enabled_without_a_shared_store_says_to_set_store_url() {
        let on = ClusterConfig { enabled: true, ..ClusterConfig::default() };
        let said = on.check(false).unwrap_err().to_string();
        assert!(said.contains("cluster.enabled") && said.contains("set store.url"), "{said}");
        assert!(on.check(true).is_ok());
    }

    #[test]
    fn a_lease_ttl_outside_the_bounds_is_refused_naming_the_key_and_the_bounds() {
        let with = |ttl| ClusterConfig { lease_ttl: ttl, ..ClusterConfig::default() };
        assert!(with(SHORTEST_LEASE_TTL).check(true).is_ok() && with(LONGEST_LEASE_TTL).check(true).is_ok());
        let short = with(SHORTEST_LEASE_TTL - Duration::from_millis(1)).check(true).unwrap_err().to_string();
        let shortest = humantime::format_duration(SHORTEST_LEASE_TTL).to_string();
        assert!(short.contains("cluster.lease_ttl") && short.contains(&format!("at least {shortest} ")), "{short}");
        let long = with(LONGEST_LEASE_TTL + Duration::from_secs(1)).check(true).unwrap_err().to_string();
        let longest = humantime::format_duration(LONGEST_LEASE_TTL).to_string();
        assert!(long.contains("cluster.lease_ttl") && long.contains(&format!("at most {longest} ")), "{long}");
        let default = humantime::format_duration(DEFAULT_LEASE_TTL).to_string();
        assert!(short.contains(&format!("the default is {default})")), "{short}");
    }

    #[test]
    fn the_node_id_is_the_configured_one_else_the_host_names() {
        let named = ClusterConfig { node_id: Some(NodeId::new("pi-2").unwrap()), ..ClusterConfig::default() };
        assert_eq!(named.node_id().as_str(), "pi-2");
        let host = std::fs::read_to_string(HOSTNAME_FILE).unwrap_or_default();
        assert_eq!(ClusterConfig::default().node_id(), NodeId::from_hostname(&host));
    }

    #[test]
    fn read_from_toml_with_a_humantime_ttl_and_a_checked_node_id() {
        let c: ClusterConfig = toml::from_str("enabled = true\nnode_id = \"db-1\"\nlease_ttl = \"4s\"").unwrap();
        assert_eq!((c.enabled, c.node_id().as_str(), c.lease_ttl), (true, "db-1", Duration::from_secs(4)));
        assert!(c.moves_folders(), "folders move by default");
        let shared: ClusterConfig =
            toml::from_str("enabled = true\nlease_ttl = \"4s\"\nworkspace = \"shared\"").unwrap();
        assert!(!shared.moves_folders() && shared.workspace == Workspace::Shared);
        assert_eq!(shared.drain_turn_timeout, DEFAULT_DRAIN_TURN_TIMEOUT, "a drain's waits have defaults");
        let drain: ClusterConfig = toml::from_str(
            "enabled = true\nlease_ttl = \"4s\"\ndrain_turn_timeout = \"5m\"\ndrain_tasks_wait = \"1s\"",
        )
        .unwrap();
        assert_eq!(
            (drain.drain_turn_timeout, drain.drain_tasks_wait),
            (Duration::from_secs(300), Duration::from_secs(1))
        );
        let bad = toml::from_str::<ClusterConfig>("enabled = false\nnode_id = \"a b\"\nlease_ttl = \"10s\"");
        let bad = bad.unwrap_err().to_string();
        assert!(bad.contains("letters, digits"), "{bad}");
    }

    #[test]
    fn the_whole_config_needs_store_url_for_the_cluster() {
        use figment::providers::{Format, Serialized, Toml};
        let load = |toml: &str| {
            let figment = figment::Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(toml));
            Config::from_figment(figment)
        };
        let said = load("[cluster]\nenabled = true").unwrap_err().to_string();
        assert!(said.contains("set store.url"), "{said}");
        let on = load("[store]\nurl = \"postgres://db/pincer\"\n[cluster]\nlease_ttl = \"3s\"").unwrap();
        assert!(!on.cluster.enabled && on.cluster.lease_ttl == Duration::from_secs(3));
        assert!(load("[store]\nurl = \"postgres://db/pincer\"\n[cluster]\nenabled = true").unwrap().cluster.enabled);
        assert!(!load("").unwrap().cluster.enabled, "off by default");
        let said = load("[cluster]\nlease_ttl = \"1s\"").unwrap_err().to_string();
        assert!(said.contains("cluster.lease_ttl"), "{said}");
    }
}

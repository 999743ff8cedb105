//! A node's name in the cluster (`[cluster] node_id`, by default the host
//! name): validated once here, so it can go into SQL parameters, log lines and
//! metric labels as it is. Pure: touches nothing.

use std::fmt;
use std::str::FromStr;

/// The longest node id, in bytes: a host name label is at most 63, and a
/// metric label or a `pincer status` column should stay readable.
pub const MAX_LEN: usize = 64;

/// The name a host name that has nothing usable becomes.
const FALLBACK: &str = "node";

/// A node's id: 1 to 64 bytes of `[A-Za-z0-9._-]`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(String);

/// Why a configured node id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeIdError {
    #[error("[cluster] node_id is empty: set it to a name for this machine, e.g. its host name")]
    Empty,
    #[error("[cluster] node_id {id:?} is {len} bytes long: set one of at most {MAX_LEN}")]
    TooLong { id: String, len: usize },
    #[error("[cluster] node_id {id:?} contains {bad:?}: set one made of letters, digits, '.', '_' and '-' only")]
    BadChar { id: String, bad: char },
}

impl NodeId {
    /// `id` as a node id, when it is one.
    pub fn new(id: impl Into<String>) -> Result<Self, NodeIdError> {
        let id = id.into();
        if id.is_empty() {
            return Err(NodeIdError::Empty);
        }
        if let Some(bad) = id.chars().find(|c| !allowed(*c)) {
            return Err(NodeIdError::BadChar { id, bad });
        }
        if id.len() > MAX_LEN {
            let len = id.len();
            return Err(NodeIdError::TooLong { id, len });
        }
        Ok(Self(id))
    }

    /// The default node id for a machine called `host`: lower-cased (host
    /// names ignore case, so `Pi` and `pi` are one machine), every other
    /// character made a `-`, cut to [`MAX_LEN`], and `node` when nothing is left.
    pub fn from_hostname(host: &str) -> Self {
        let clean: String =
            host.trim().chars().map(|c| if allowed(c) { c.to_ascii_lowercase() } else { '-' }).take(MAX_LEN).collect();
        let clean = clean.trim_matches('-');
        Self(if clean.is_empty() { FALLBACK.to_owned() } else { clean.to_owned() })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Safe unquoted in SQL text, logs and Prometheus label values alike.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for NodeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for NodeId {
    type Err = NodeIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for NodeId {
    type Error = NodeIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<NodeId> for String {
    fn from(id: NodeId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_accepted_as_they_are() {
        for ok in ["pi", "node-1", "db01.example.com", "A_b.C-9", &"x".repeat(MAX_LEN)] {
            assert_eq!(NodeId::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn names_unsafe_for_sql_logs_or_labels_are_refused_saying_what_to_set() {
        assert_eq!(NodeId::new(""), Err(NodeIdError::Empty));
        for (bad, c) in [("a b", ' '), ("x'; DROP", '\''), ("é", 'é'), ("a\"b", '"'), ("a\nb", '\n'), ("a/b", '/')] {
            assert_eq!(NodeId::new(bad), Err(NodeIdError::BadChar { id: bad.into(), bad: c }));
        }
        let long = "x".repeat(MAX_LEN + 1);
        let err = NodeId::new(long.clone()).unwrap_err();
        assert_eq!(err, NodeIdError::TooLong { id: long, len: MAX_LEN + 1 });
        assert!(err.to_string().contains("[cluster] node_id"), "{err}");
    }

    #[test]
    fn a_host_name_becomes_a_valid_node_id() {
        let cases = [
            ("raspberrypi", "raspberrypi"),
            ("Pi.Local", "pi.local"),
            ("  my host\n", "my-host"),
            ("hôte", "h-te"),
            ("---", "node"),
            ("", "node"),
            ("日本", "node"),
        ];
        for (host, id) in cases {
            assert_eq!(NodeId::from_hostname(host).as_str(), id, "{host:?}");
        }
        let long = NodeId::from_hostname(&"h".repeat(300));
        assert_eq!(long.as_str().len(), MAX_LEN);
        for host in ["a b c", "x/y:z", "ü".repeat(100).as_str()] {
            let id = NodeId::from_hostname(host);
            assert_eq!(NodeId::new(id.as_str()).as_ref(), Ok(&id));
        }
    }

    #[test]
    fn config_files_deserialize_through_the_same_check() {
        #[derive(serde::Deserialize)]
        struct Cluster {
            node_id: NodeId,
        }
        let ok: Cluster = serde_json::from_str(r#"{"node_id":"n1"}"#).unwrap();
        assert_eq!(ok.node_id.as_str(), "n1");
        let bad = serde_json::from_str::<Cluster>(r#"{"node_id":"n 1"}"#).err().unwrap();
        assert!(bad.to_string().contains("letters, digits"), "{bad}");
    }
}

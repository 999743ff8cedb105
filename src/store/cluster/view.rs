//! The cluster at a glance for `pincer status` (issue 36): every node row
//! with the gateways it holds, and which node holds each group's lease.
//! Reads `nodes` and `leases` only, on PostgreSQL only: a SQLite store is
//! never shared, so it answers "no cluster" without a query.
//!
//! Whether a node is alive is judged by the database's clock, as every node
//! judges it (`store::cluster::membership`), never by the reader's: the reader may
//! be on another machine with a skewed clock. The three reads share one
//! snapshot, so a lease and its holder's row agree.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::store::db::Dialect;
use crate::store::flag::Flag;
use crate::store::handles::Health;
use crate::store::StoreError;

/// One node as its row says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub id: String,
    pub incarnation: i64,
    /// Its row has not expired, by the database's clock.
    pub alive: bool,
    /// Sessions it ran at its last renewal, and how many it may run.
    pub live: i64,
    pub slots: i64,
    /// The gateway leases this incarnation holds (`gw:telegram:<bot id>`, …).
    pub gateways: Vec<String>,
    /// When this incarnation registered and last renewed (unix seconds, the database's clock).
    pub started: i64,
    pub renewed: i64,
}

/// Who holds a group's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub node: String,
    pub incarnation: i64,
    pub epoch: i64,
    /// When this claim was made (unix seconds, the database's clock).
    pub since: i64,
    /// The holder's row is alive: false means the lease is free to claim.
    pub alive: bool,
}

/// The cluster's rows now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub nodes: Vec<NodeView>,
    /// `(group, its holder)` for each group lease held (released ones have none), by name.
    pub owners: Vec<(String, Owner)>,
}

impl ClusterView {
    /// Who holds `group`'s lease; `None`: nobody (never claimed, or released).
    pub fn owner_of(&self, group: &str) -> Option<&Owner> {
        self.owners.iter().find(|(name, _)| name == group).map(|(_, owner)| owner)
    }
}

/// Every node, whether its row is alive by the database's clock.
const NODES_SQL: &str = "
SELECT n.node_id, n.incarnation, n.started_at_us, n.renewed_at_us, n.slots, n.live,
       CASE WHEN n.expires_at_us > t.now_us THEN 1 ELSE 0 END AS alive
  FROM nodes n
 CROSS JOIN (SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint AS now_us) t
 ORDER BY n.node_id";

/// The gateway leases each node holds in its current incarnation (a lease
/// of an earlier incarnation belongs to a process that is gone).
const GATEWAYS_SQL: &str = "
SELECT l.node_id, l.name
  FROM leases l
  JOIN nodes n ON n.node_id = l.node_id AND n.incarnation = l.incarnation
 WHERE l.name LIKE 'gw:%'
 ORDER BY l.name";

/// Every group lease with a holder, and whether that holder's row is alive.
const GROUP_LEASES_SQL: &str = "
SELECT l.name, l.node_id, l.incarnation, l.epoch, l.acquired_at_us,
       CASE WHEN n.expires_at_us > t.now_us THEN 1 ELSE 0 END AS alive
  FROM leases l
 CROSS JOIN (SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint AS now_us) t
  LEFT JOIN nodes n ON n.node_id = l.node_id AND n.incarnation = l.incarnation
 WHERE l.name NOT LIKE 'gw:%' AND l.node_id IS NOT NULL
 ORDER BY l.name";

/// The leases (groups and gateways) `$1` holds in its current incarnation
/// while its row is alive: once it expired, they are anyone's to claim.
const HELD_BY_SQL: &str = "
SELECT COUNT(*) FROM leases l
  JOIN nodes n ON n.node_id = l.node_id AND n.incarnation = l.incarnation
 WHERE l.node_id = $1
   AND n.expires_at_us > (extract(epoch from clock_timestamp()) * 1000000)::bigint";

impl Health {
    /// How many leases `node` holds now (`/metrics`); 0 on SQLite.
    pub async fn leases_held_by(&self, node: &str) -> Result<i64, StoreError> {
        if self.db.dialect == Dialect::Sqlite {
            return Ok(0);
        }
        Ok(sqlx::query_scalar(HELD_BY_SQL).bind(node).fetch_one(&self.db.pool).await?)
    }

    /// The cluster's nodes and group leases; `None` when this store is no
    /// cluster's (SQLite, or PostgreSQL that no node registered in).
    pub async fn cluster_view(&self) -> Result<Option<ClusterView>, StoreError> {
        if self.db.dialect == Dialect::Sqlite {
            return Ok(None);
        }
        let mut tx = self.db.pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?;
        let nodes = sqlx::query(NODES_SQL).fetch_all(&mut *tx).await?;
        let gateways: Vec<(String, String)> = sqlx::query_as(GATEWAYS_SQL).fetch_all(&mut *tx).await?;
        let leases = sqlx::query(GROUP_LEASES_SQL).fetch_all(&mut *tx).await?;
        tx.rollback().await?;
        let mut nodes = nodes.iter().map(node_view).collect::<Result<Vec<_>, _>>()?;
        for node in &mut nodes {
            node.gateways = gateways.iter().filter(|(id, _)| *id == node.id).map(|(_, name)| name.clone()).collect();
        }
        let owners = leases.iter().map(owner).collect::<Result<Vec<_>, _>>()?;
        Ok((!nodes.is_empty() || !owners.is_empty()).then_some(ClusterView { nodes, owners }))
    }
}

fn node_view(r: &AnyRow) -> Result<NodeView, sqlx::Error> {
    Ok(NodeView {
        id: r.try_get("node_id")?,
        incarnation: r.try_get("incarnation")?,
        alive: r.try_get::<Flag, _>("alive")?.0,
        live: r.try_get("live")?,
        slots: r.try_get("slots")?,
        gateways: Vec::new(),
        started: r.try_get::<i64, _>("started_at_us")? / 1_000_000,
        renewed: r.try_get::<i64, _>("renewed_at_us")? / 1_000_000,
    })
}

fn owner(r: &AnyRow) -> Result<(String, Owner), sqlx::Error> {
    let owner = Owner {
        node: r.try_get("node_id")?,
        incarnation: r.try_get("incarnation")?,
        epoch: r.try_get("epoch")?,
        since: r.try_get::<i64, _>("acquired_at_us")? / 1_000_000,
        alive: r.try_get::<Flag, _>("alive")?.0,
    };
    Ok((r.try_get("name")?, owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fence::LeaseName;
    use crate::cluster::node_id::NodeId;
    use crate::store::cluster::fence::DB_NOW_US;
    use crate::store::tests::{on_both, postgres, temp_store};
    use crate::store::{Location, Store};

    #[test]
    fn aliveness_is_judged_by_the_database_clock_and_gateways_apart_from_groups() {
        for sql in [NODES_SQL, GROUP_LEASES_SQL, HELD_BY_SQL] {
            assert!(sql.contains(DB_NOW_US), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
        let gateway = LeaseName::telegram(1);
        assert!(gateway.as_str().starts_with("gw:"), "the prefix GATEWAYS_SQL matches");
        assert!(GATEWAYS_SQL.contains("LIKE 'gw:%'") && GROUP_LEASES_SQL.contains("NOT LIKE 'gw:%'"));
    }

    on_both! {
    async fn a_store_no_node_registered_in_is_no_cluster() {
        let (_dir, store) = temp_store().await;
        assert_eq!(store.health().cluster_view().await.unwrap(), None);
        assert_eq!(store.health().leases_held_by("node-a").await.unwrap(), 0);
        let family: crate::domain::GroupName = "family".parse().unwrap();
        store.groups().add_group(&family, &crate::store::GroupSettings::default()).await.unwrap();
        let overview = store.health().overview(0, 0, 0).await.unwrap();
        assert!(overview.nodes.is_none() && overview.groups[0].owner.is_none(), "{overview:?}");
    }
    }

    /// The overview of a cluster's store: its nodes, and each group's owner or none.
    #[tokio::test]
    async fn the_overview_of_a_clusters_store_names_each_groups_owner() {
        let store = Store::connect(&Location::Postgres(postgres::server().fresh_database())).await.unwrap();
        let (family, team) = ("family".parse().unwrap(), "team".parse().unwrap());
        for g in [&family, &team] {
            store.groups().add_group(g, &crate::store::GroupSettings::default()).await.unwrap();
        }
        let a = NodeId::new("node-a").unwrap();
        let ia = store.cluster().unwrap().register(&a, 8, 10_000_000, 0).await.unwrap().unwrap();
        store.leases().claim(&LeaseName::group(&family), &a, ia).await.unwrap().unwrap();
        let overview = store.health().overview(0, 0, 0).await.unwrap();
        let nodes: Vec<_> = overview.nodes.iter().flatten().map(|n| n.id.as_str()).collect();
        assert_eq!(nodes, ["node-a"]);
        let owners: Vec<_> =
            overview.groups.iter().map(|g| (g.name.as_str(), g.owner.clone().map(|o| o.map(|o| o.node)))).collect();
        assert_eq!(owners, [("family", Some(Some("node-a".to_owned()))), ("team", Some(None))]);
    }

    /// Two nodes (a store each, as on two machines) registered and claiming
    /// through the real statements; then one's row expires, and it shows as
    /// dead with what it held until the other takes its group over.
    #[tokio::test]
    async fn nodes_their_gateways_and_the_owners_of_groups() {
        let location = Location::Postgres(postgres::server().fresh_database());
        let (sa, sb) = (Store::connect(&location).await.unwrap(), Store::connect(&location).await.unwrap());
        let (a, b) = (NodeId::new("node-a").unwrap(), NodeId::new("node-b").unwrap());
        let ttl = 10_000_000;
        let ia = sa.cluster().unwrap().register(&a, 8, ttl, 0).await.unwrap().unwrap();
        let ib = sb.cluster().unwrap().register(&b, 4, ttl, 0).await.unwrap().unwrap();
        sa.cluster().unwrap().renew(&a, ia, ttl, 2).await.unwrap();
        let (family, team) = ("family".parse().unwrap(), "team".parse().unwrap());
        assert_eq!(sa.leases().claim(&LeaseName::group(&family), &a, ia).await.unwrap(), Some(1));
        assert_eq!(sb.leases().claim(&LeaseName::group(&team), &b, ib).await.unwrap(), Some(1));
        assert!(sa.leases().claim(&LeaseName::telegram(77), &a, ia).await.unwrap().is_some());
        let view = sa.health().cluster_view().await.unwrap().expect("a cluster");
        let ids: Vec<_> = view.nodes.iter().map(|n| (n.id.as_str(), n.incarnation, n.alive, n.live, n.slots)).collect();
        assert_eq!(ids, [("node-a", ia, true, 2, 8), ("node-b", ib, true, 0, 4)]);
        assert_eq!(view.nodes[0].gateways, ["gw:telegram:77"]);
        assert!(view.nodes[1].gateways.is_empty());
        assert!(view.nodes[0].started > 1_700_000_000 && view.nodes[0].renewed >= view.nodes[0].started);
        let family_owner = view.owner_of("family").expect("held");
        assert_eq!((family_owner.node.as_str(), family_owner.epoch, family_owner.alive), ("node-a", 1, true));
        assert_eq!(view.owner_of("team").map(|o| o.node.as_str()), Some("node-b"));
        assert_eq!(view.owners.len(), 2, "the gateway is no group: {view:?}");
        assert_eq!(sa.health().leases_held_by("node-a").await.unwrap(), 2, "a group and a gateway");

        // Node B's row expires: it and its lease show as dead; A takes the group over.
        let expire = "UPDATE nodes SET expires_at_us = 0 WHERE node_id = 'node-b'";
        sqlx::query(expire).execute(&sa.db.pool).await.unwrap();
        let view = sa.health().cluster_view().await.unwrap().unwrap();
        assert!(!view.nodes[1].alive);
        assert!(!view.owner_of("team").unwrap().alive, "the holder's row expired");
        assert_eq!(sa.health().leases_held_by("node-b").await.unwrap(), 0, "an expired node holds nothing");
        assert_eq!(sa.leases().claim(&LeaseName::group(&team), &a, ia).await.unwrap(), Some(2));
        let view = sb.health().cluster_view().await.unwrap().unwrap();
        let moved = view.owner_of("team").unwrap();
        assert_eq!((moved.node.as_str(), moved.epoch, moved.alive), ("node-a", 2, true));

        // A releases the family cleanly: nobody owns it.
        sa.leases().release(&LeaseName::group(&family)).await.unwrap();
        let view = sb.health().cluster_view().await.unwrap().unwrap();
        assert_eq!(view.owner_of("family"), None);
    }
}

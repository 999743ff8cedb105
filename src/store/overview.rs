//! The store's part of `pincer status`: what any `pincer` process can read
//! while the daemon runs (WAL lets it), without asking the daemon; on a
//! cluster's store, also its nodes and which node owns each group
//! (`cluster/view.rs`).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::cluster::{NodeView, Owner};
use super::error::StoreError;
use super::flag::Flag;
use super::handles::{Channels, Health};
use crate::domain::budget::Budget;
use crate::domain::Platform;

/// The whole store at a glance.
#[derive(Clone, Debug, Serialize)]
pub struct Overview {
    /// The database file's size (pages in use and free).
    pub db_bytes: u64,
    pub platforms: Vec<PlatformView>,
    /// Chat messages waiting for their session (queued or being prepared).
    pub waiting_messages: i64,
    pub outbox: Vec<Backlog>,
    pub groups: Vec<GroupView>,
    /// The cluster's nodes; absent when the store is no cluster's (one machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<NodeView>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PlatformView {
    pub platform: String,
    /// The cluster node whose device this is (WhatsApp on a cluster), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub state: String,
    pub detail: Option<String>,
    /// Since when (unix seconds).
    pub since: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Backlog {
    pub platform: String,
    pub waiting: i64,
    /// The oldest waiting row's age in seconds at the time of reading.
    pub oldest_seconds: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupView {
    pub name: String,
    pub active: bool,
    pub inactive_reason: Option<String>,
    /// The newest message or result (unix seconds).
    pub last_activity: Option<i64>,
    pub waiting_messages: i64,
    pub cost_today_usd: f64,
    pub cost_month_usd: f64,
    pub turns_today: i64,
    /// Its budget (its own over `[budget]`; filled in by the caller, who knows the config).
    pub budget: Budget,
    /// The newest failed turn's words, cut to one line, and when (unix seconds).
    pub last_error: Option<(i64, String)>,
    /// Which node holds its lease (`null`: none); absent when the store is
    /// no cluster's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Option<Owner>>,
}

/// Every group's line of the overview: activity, queue, spend since `$1`
/// (today) and `$2` (this month), and its newest error.
const GROUPS_SQL: &str = "
SELECT g.name, g.active, g.inactive_reason,
       (SELECT MAX(t) FROM (SELECT MAX(at_us) AS t FROM inbound i WHERE i.group_name = g.name
                            UNION ALL SELECT MAX(at_us) FROM results r WHERE r.group_name = g.name) AS newest) AS last_us,
       (SELECT COUNT(*) FROM inbound i WHERE i.group_name = g.name
           AND i.state IN ('queued', 'preparing')) AS waiting,
       (SELECT COALESCE(SUM(cost_usd), 0.0) FROM spend s WHERE s.group_name = g.name
           AND s.slot_us >= $1) AS today,
       (SELECT COALESCE(SUM(cost_usd), 0.0) FROM spend s WHERE s.group_name = g.name
           AND s.slot_us >= $2) AS month,
       (SELECT CAST(COALESCE(SUM(turns), 0) AS BIGINT) FROM spend s WHERE s.group_name = g.name
           AND s.slot_us >= $1) AS turns,
       (SELECT at_us FROM results r WHERE r.group_name = g.name AND r.is_error <> 0
           ORDER BY r.at_us DESC LIMIT 1) AS error_us,
       (SELECT text FROM results r WHERE r.group_name = g.name AND r.is_error <> 0
           ORDER BY r.at_us DESC LIMIT 1) AS error_text
  FROM groups g ORDER BY g.name";

impl Health {
    /// The overview now; `day_start_us` and `month_start_us` are where today
    /// and this month begin (in the operator's time zone, as unix µs).
    pub async fn overview(&self, now_us: i64, day_start_us: i64, month_start_us: i64) -> Result<Overview, StoreError> {
        let db_bytes = self.db.bytes().await?;
        let platforms = self.platforms().await?;
        let waiting_messages: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM inbound WHERE state IN ('queued', 'preparing')")
                .fetch_one(&self.db.pool)
                .await?;
        let outbox = self
            .outbox_backlog()
            .await?
            .into_iter()
            .map(|(platform, waiting, oldest)| Backlog {
                platform,
                waiting,
                oldest_seconds: (now_us - oldest).max(0) / 1_000_000,
            })
            .collect();
        let mut groups = self.group_views(day_start_us, month_start_us).await?;
        let cluster = self.cluster_view().await?;
        if let Some(cluster) = &cluster {
            for group in &mut groups {
                group.owner = Some(cluster.owner_of(&group.name).cloned());
            }
        }
        let nodes = cluster.map(|c| c.nodes);
        Ok(Overview { db_bytes, platforms, waiting_messages, outbox, groups, nodes })
    }

    /// The platforms that ever told their health: one line a row (each
    /// cluster node's own WhatsApp device among them).
    async fn platforms(&self) -> Result<Vec<PlatformView>, StoreError> {
        let mut platforms = Vec::new();
        for platform in [Platform::Telegram, Platform::WhatsApp] {
            for (node, h) in Channels::new(self.db.clone()).channel_healths(platform).await? {
                platforms.push(PlatformView {
                    platform: platform.to_string(),
                    node: (!node.is_empty()).then_some(node),
                    state: h.state,
                    detail: h.detail,
                    since: h.changed_at_us / 1_000_000,
                });
            }
        }
        Ok(platforms)
    }

    /// Every group's line ([`GROUPS_SQL`]), its budget left to the caller.
    async fn group_views(&self, day_start_us: i64, month_start_us: i64) -> Result<Vec<GroupView>, StoreError> {
        let rows = sqlx::query(GROUPS_SQL).bind(day_start_us).bind(month_start_us).fetch_all(&self.db.pool).await?;
        let views: Result<Vec<GroupView>, sqlx::Error> = rows.iter().map(group_view).collect();
        Ok(views?)
    }
}

/// One row of [`GROUPS_SQL`] as the status page shows it.
fn group_view(r: &AnyRow) -> Result<GroupView, sqlx::Error> {
    let error_us: Option<i64> = r.try_get("error_us")?;
    let error_text: Option<String> = r.try_get("error_text")?;
    Ok(GroupView {
        name: r.try_get("name")?,
        active: r.try_get::<Flag, _>("active")?.0,
        inactive_reason: r.try_get("inactive_reason")?,
        last_activity: r.try_get::<Option<i64>, _>("last_us")?.map(|us| us / 1_000_000),
        waiting_messages: r.try_get("waiting")?,
        cost_today_usd: r.try_get("today")?,
        cost_month_usd: r.try_get("month")?,
        turns_today: r.try_get("turns")?,
        budget: Budget::default(),
        last_error: error_us.map(|us| {
            let text = error_text.as_deref().unwrap_or("an error");
            (us / 1_000_000, crate::domain::one_line(text, 120))
        }),
        owner: None,
    })
}

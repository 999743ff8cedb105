//! What the chat platforms' adapters keep beyond messages: the ids of the
//! messages pincer sent (a reply to one engages the agent; the bot never
//! answers its own), and each platform's connection health, which a running
//! pincer writes for `pincer whatsapp status` and `pincer doctor` to read.
//! On a cluster each node's WhatsApp device has a row of its own (keyed by
//! the node's id); Telegram's bot, one connection whichever node serves it,
//! has one shared row, as every platform has on one machine.

use sqlx::FromRow;

use super::clock::now_us;
use super::error::{readable, StoreError};
use super::handles::Channels;
use crate::domain::{ChatAddress, Platform};

/// A platform's connection as the running pincer last saw it (a
/// `channel_health` row, by column name).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct ChannelHealth {
    /// `connected`, `disconnected`, `logged_out`, `banned`, ... (the adapter's words).
    pub state: String,
    pub detail: Option<String>,
    /// The account pincer is linked as, when known.
    pub linked_as: Option<String>,
    pub changed_at_us: i64,
    pub last_inbound_us: Option<i64>,
}

impl Channels {
    /// Remembers a message pincer sent to a chat.
    pub async fn record_sent(&self, to: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sent_messages (platform, chat, message_id, at_us) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(to.platform.as_str())
        .bind(&to.chat)
        .bind(message_id)
        .bind(now_us())
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Whether pincer sent the message with this id to this chat.
    pub async fn was_sent(&self, at: &ChatAddress, message_id: &str) -> Result<bool, StoreError> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sent_messages WHERE platform = $1 AND chat = $2 AND message_id = $3")
                .bind(at.platform.as_str())
                .bind(&at.chat)
                .bind(message_id)
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(found.is_some())
    }

    /// Records a change of a platform's connection (`linked_as` kept when `None`).
    pub async fn set_channel_health(
        &self,
        platform: Platform,
        state: &str,
        detail: Option<&str>,
        linked_as: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO channel_health (platform, node, state, detail, linked_as, changed_at_us)
                  VALUES ($1, $6, $2, $3, $4, $5)
             ON CONFLICT (platform, node) DO UPDATE SET state = $2, detail = $3,
                 linked_as = COALESCE($4, channel_health.linked_as), changed_at_us = $5",
        )
        .bind(platform.as_str())
        .bind(state)
        .bind(detail)
        .bind(linked_as)
        .bind(now_us())
        .bind(self.health_node(platform))
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// A message came in from the platform just now.
    pub async fn note_inbound(&self, platform: Platform) -> Result<(), StoreError> {
        sqlx::query("UPDATE channel_health SET last_inbound_us = $1 WHERE platform = $2 AND node = $3")
            .bind(now_us())
            .bind(platform.as_str())
            .bind(self.health_node(platform))
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// This node's view of `platform`'s connection: its own device's on a
    /// cluster node (WhatsApp), else the shared row.
    pub async fn channel_health(&self, platform: Platform) -> Result<Option<ChannelHealth>, StoreError> {
        let row = sqlx::query(
            "SELECT state, detail, linked_as, changed_at_us, last_inbound_us FROM channel_health
              WHERE platform = $1 AND node = $2",
        )
        .bind(platform.as_str())
        .bind(self.health_node(platform))
        .fetch_optional(&self.db.pool)
        .await?;
        let bad = |source| StoreError::BadRow { table: "channel_health", key: platform.to_string(), source };
        row.map(|r| ChannelHealth::from_row(&r).map_err(bad)).transpose()
    }

    /// Every row of `platform`'s health, by node (`""`: the shared row, or
    /// one machine's), for the operator's views.
    pub async fn channel_healths(&self, platform: Platform) -> Result<Vec<(String, ChannelHealth)>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, state, detail, linked_as, changed_at_us, last_inbound_us FROM channel_health
              WHERE platform = $1 ORDER BY node",
        )
        .bind(platform.as_str())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("channel_health", &rows, |row| {
            Ok((sqlx::Row::try_get::<String, _>(row, "node")?, ChannelHealth::from_row(row)?))
        }))
    }

    /// Whose row of `platform` this store writes: a cluster node's own for
    /// its WhatsApp device, else the shared one.
    fn health_node(&self, platform: Platform) -> String {
        match (platform, self.db.fences.node()) {
            (Platform::WhatsApp, Some(node)) => node.as_str().to_owned(),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests;

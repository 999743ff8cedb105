//! The status messages pincer has posted and may still edit or delete
//! (issue 21's live progress): each is stored as it is shown and forgotten
//! when deleted or finished, so the next start finds the ones a stopped
//! pincer left behind.

use sqlx::any::AnyRow;
use sqlx::FromRow;

use super::clock::now_us;
use super::error::{bad_row, readable, StoreError};
use super::handles::Channels;
use crate::domain::{ChatAddress, GroupName, Platform};

/// A status message alive in a chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusRecord {
    pub at: ChatAddress,
    /// The platform's id of the message.
    pub message_id: String,
    pub group: GroupName,
    /// The turn it shows; `None` for the line about background work.
    pub turn: Option<u64>,
}

#[derive(sqlx::FromRow)]
struct StatusRow {
    platform: String,
    chat: String,
    thread: Option<String>,
    message_id: String,
    group_name: String,
    turn: Option<i64>,
}

impl Channels {
    /// Remembers a status message just posted.
    pub async fn remember_status(&self, r: &StatusRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO status_messages (platform, chat, thread, message_id, group_name, turn, at_us)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (platform, chat, message_id) DO UPDATE SET group_name = excluded.group_name,
                 turn = excluded.turn, thread = excluded.thread",
        )
        .bind(r.at.platform.as_str())
        .bind(&r.at.chat)
        .bind(&r.at.thread)
        .bind(&r.message_id)
        .bind(r.group.as_str())
        .bind(r.turn.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
        .bind(now_us())
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Forgets a status message: deleted, finished, or cleaned up.
    pub async fn forget_status(&self, at: &ChatAddress, message_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM status_messages WHERE platform = $1 AND chat = $2 AND message_id = $3")
            .bind(at.platform.as_str())
            .bind(&at.chat)
            .bind(message_id)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// The status messages remembered on a platform, oldest first.
    pub async fn status_messages(&self, platform: Platform) -> Result<Vec<StatusRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT platform, chat, thread, message_id, group_name, turn FROM status_messages
              WHERE platform = $1 ORDER BY at_us",
        )
        .bind(platform.as_str())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(readable("status_messages", &rows, status_from_row))
    }
}

fn status_from_row(row: &AnyRow) -> Result<StatusRecord, sqlx::Error> {
    let r = StatusRow::from_row(row)?;
    let platform = Platform::parse(&r.platform).ok_or_else(|| bad_row(format!("platform {:?}", r.platform)))?;
    Ok(StatusRecord {
        at: ChatAddress { platform, chat: r.chat, thread: r.thread },
        message_id: r.message_id,
        group: r.group_name.parse().map_err(|e| bad_row(format!("group name {:?}: {e}", r.group_name)))?,
        turn: r.turn.map(|n| u64::try_from(n).unwrap_or_default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{on_both, temp_store};

    fn record(chat: i64, id: &str, turn: Option<u64>) -> StatusRecord {
        StatusRecord {
            at: ChatAddress::telegram(chat, Some(7)),
            message_id: id.to_owned(),
            group: "team".parse().unwrap(),
            turn,
        }
    }

    on_both! {
    async fn status_messages_are_remembered_per_platform_until_forgotten() {
        let (_dir, store) = temp_store().await;
        store.channels().remember_status(&record(-1, "10", Some(3))).await.unwrap();
        store.channels().remember_status(&record(-2, "11", None)).await.unwrap();
        let console = StatusRecord { at: ChatAddress::console(&"team".parse().unwrap()), ..record(0, "1", None) };
        store.channels().remember_status(&console).await.unwrap();
        let left = store.channels().status_messages(Platform::Telegram).await.unwrap();
        assert_eq!(left, [record(-1, "10", Some(3)), record(-2, "11", None)]);
        store.channels().forget_status(&record(-1, "10", None).at, "10").await.unwrap();
        assert_eq!(store.channels().status_messages(Platform::Telegram).await.unwrap(), [record(-2, "11", None)]);
        assert_eq!(store.channels().status_messages(Platform::Console).await.unwrap(), [console]);
    }
    }

    on_both! {
    async fn a_groups_progress_mode_is_kept_and_none_means_the_default() {
        use crate::domain::activity::ProgressMode;
        use crate::store::GroupSettings;
        let (_dir, store) = temp_store().await;
        let g: GroupName = "team".parse().unwrap();
        store.groups().add_group(&g, &GroupSettings::default()).await.unwrap();
        assert_eq!(store.groups().group("team").await.unwrap().settings.progress, None);
        for mode in [Some(ProgressMode::Off), Some(ProgressMode::Verbose), Some(ProgressMode::Status), None] {
            let settings = GroupSettings { progress: mode, ..GroupSettings::default() };
            store.groups().save_group_settings(&g, &settings).await.unwrap();
            assert_eq!(store.groups().group("team").await.unwrap().settings.progress, mode);
        }
    }
    }
}

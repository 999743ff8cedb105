//! Registered groups: their settings, the chat each is bound to (one platform,
//! one chat, maybe one thread), and whether that chat still has the bot.

use sqlx::any::AnyRow;
use sqlx::FromRow;

use super::clock::now_us;
use super::db::Dialect;
use super::error::{bad_row, readable, row_key, StoreError};
use super::fenced;
use super::flag::Flag;
use super::handles::Groups;
use crate::domain::activity::ProgressMode;
use crate::domain::budget::Budget;
use crate::domain::{ChatAddress, GroupName, Platform, ToolsFor};

/// What an operator chooses for a group (`pincer groups add/set`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSettings {
    /// Tools `can_use_tool` allows; `None` means the configured default.
    pub allowed_tools: Option<Vec<String>>,
    /// What engages the agent; `None` means `@<assistant_name>`.
    pub trigger: Option<String>,
    /// `false`: every message engages the agent.
    pub requires_trigger: bool,
    /// Channel user ids who may answer tool approvals.
    pub admins: Vec<String>,
    /// The chat the group lives in; `None`: only `pincer chat` reaches it.
    pub chat: Option<ChatAddress>,
    /// The main group's agent may act on other groups (`--main`).
    pub main: bool,
    /// Whose messages may make the agent use tools (`--tools`).
    pub tools: ToolsFor,
    /// How much the chat is shown of the agent's work (`--progress`); `None`
    /// means the configured default.
    pub progress: Option<ProgressMode>,
    /// Its own budget, part by part over `[budget]` (`--budget-…`).
    pub budget: Budget,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            allowed_tools: None,
            trigger: None,
            requires_trigger: true,
            admins: Vec::new(),
            chat: None,
            main: false,
            tools: ToolsFor::Everyone,
            progress: None,
            budget: Budget::default(),
        }
    }
}

/// A registered group as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    pub name: GroupName,
    pub created_at_us: i64,
    pub session_id: Option<String>,
    pub settings: GroupSettings,
    /// `false` once the bot lost its chat (kicked, blocked); see `inactive_reason`.
    pub active: bool,
    pub inactive_reason: Option<String>,
}

const SELECT_GROUP: &str = "
SELECT g.name, g.created_at_us, g.session_id, g.allowed_tools, g.trigger, g.requires_trigger, g.admins,
       g.active, g.inactive_reason, b.platform, b.chat, b.thread, g.is_main, g.tools, g.progress,
       g.budget_daily_cents, g.budget_monthly_cents, g.budget_daily_turns
  FROM groups g LEFT JOIN chat_bindings b ON b.group_name = g.name";

impl Groups {
    /// Registers a group. Fails if the name or its chat is taken.
    pub async fn add_group(&self, name: &GroupName, settings: &GroupSettings) -> Result<(), StoreError> {
        let mut tx = self.db.pool.begin().await?;
        let done = sqlx::query("INSERT INTO groups (name, created_at_us) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(name.as_str())
            .bind(now_us())
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::GroupExists(name.clone()));
        }
        write_settings(&mut tx, name, settings).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces a registered group's settings.
    pub async fn save_group_settings(&self, name: &GroupName, settings: &GroupSettings) -> Result<(), StoreError> {
        self.group(name.as_str()).await?;
        let mut tx = self.db.pool.begin().await?;
        write_settings(&mut tx, name, settings).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn group(&self, name: &str) -> Result<GroupRecord, StoreError> {
        let row =
            sqlx::query(&format!("{SELECT_GROUP} WHERE g.name = $1")).bind(name).fetch_optional(&self.db.pool).await?;
        let row = row.ok_or_else(|| StoreError::UnknownGroup(name.to_owned()))?;
        group_from_row(&row).map_err(|source| bad_group(&row, source))
    }

    /// Every group that reads; a row that does not is logged and left out.
    pub async fn groups(&self) -> Result<Vec<GroupRecord>, StoreError> {
        let rows = sqlx::query(&format!("{SELECT_GROUP} ORDER BY g.name")).fetch_all(&self.db.pool).await?;
        Ok(readable("groups", &rows, group_from_row))
    }

    /// The group a chat message belongs to: the one bound to its thread,
    /// else the one bound to the whole chat.
    pub async fn group_for_chat(&self, at: &ChatAddress) -> Result<Option<GroupRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "{SELECT_GROUP} WHERE b.platform = $1 AND b.chat = $2 AND (b.thread = $3 OR b.thread IS NULL)
              ORDER BY b.thread IS NULL LIMIT 1"
        ))
        .bind(at.platform.as_str())
        .bind(&at.chat)
        .bind(&at.thread)
        .fetch_optional(&self.db.pool)
        .await?;
        row.map(|row| group_from_row(&row).map_err(|source| bad_group(&row, source))).transpose()
    }

    /// A chat got a new id on its platform (a Telegram group that became a
    /// supergroup): its bindings and the replies waiting for it follow.
    pub async fn move_chat(&self, platform: Platform, from: &str, to: &str) -> Result<(), StoreError> {
        let mut tx = self.db.pool.begin().await?;
        for table in ["chat_bindings", "outbox"] {
            sqlx::query(&format!("UPDATE {table} SET chat = $1 WHERE platform = $2 AND chat = $3"))
                .bind(to)
                .bind(platform.as_str())
                .bind(from)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Marks a group's chat as reachable again, or gone (with why).
    pub async fn set_group_active(
        &self,
        name: &GroupName,
        active: bool,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE groups SET active = $1, inactive_reason = $2 WHERE name = $3")
            .bind(i64::from(active))
            .bind(if active { None } else { reason })
            .bind(name.as_str())
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Adds `tool` to the group's allowed tools, starting from `default` when
    /// the group has no list of its own yet. One statement, so two approvals
    /// answered at once both land (a read, then a write, could lose one).
    pub async fn allow_tool(&self, name: &GroupName, tool: &str, default: &[String]) -> Result<(), StoreError> {
        let default = serde_json::to_string(default).expect("a list of strings serializes");
        let sql = match self.db.dialect {
            Dialect::Sqlite => {
                "UPDATE groups SET allowed_tools = CASE
                     WHEN EXISTS (SELECT 1 FROM json_each(COALESCE(allowed_tools, $2)) WHERE value = $3)
                     THEN COALESCE(allowed_tools, $2)
                     ELSE json_insert(COALESCE(allowed_tools, $2), '$[#]', $3) END
                  WHERE name = $1"
            }
            Dialect::Postgres => {
                "UPDATE groups SET allowed_tools = CASE
                     WHEN COALESCE(allowed_tools, $2)::jsonb ? $3
                     THEN COALESCE(allowed_tools, $2)
                     ELSE (COALESCE(allowed_tools, $2)::jsonb || to_jsonb($3::text))::text END
                  WHERE name = $1"
            }
        };
        let done = sqlx::query(sql).bind(name.as_str()).bind(default).bind(tool).execute(&self.db.pool).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::UnknownGroup(name.to_string()));
        }
        Ok(())
    }

    pub async fn set_session_id(&self, group: &GroupName, session_id: Option<&str>) -> Result<(), StoreError> {
        let query =
            sqlx::query("UPDATE groups SET session_id = $1 WHERE name = $2").bind(session_id).bind(group.as_str());
        fenced::execute_for(&self.db, group, query).await?;
        Ok(())
    }
}

async fn write_settings(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    name: &GroupName,
    settings: &GroupSettings,
) -> Result<(), StoreError> {
    let json = |list: &[String]| serde_json::to_string(list).expect("a list of strings serializes");
    sqlx::query(
        "UPDATE groups SET allowed_tools = $1, trigger = $2, requires_trigger = $3, admins = $4, is_main = $5, tools = $6,
                           progress = $7, budget_daily_cents = $8, budget_monthly_cents = $9, budget_daily_turns = $10
          WHERE name = $11",
    )
    .bind(settings.allowed_tools.as_deref().map(json))
    .bind(&settings.trigger)
    .bind(i64::from(settings.requires_trigger))
    .bind(json(&settings.admins))
    .bind(i64::from(settings.main))
    .bind(settings.tools.as_str())
    .bind(settings.progress.map(progress_str))
    .bind(settings.budget.daily_cents.and_then(|c| i64::try_from(c).ok()))
    .bind(settings.budget.monthly_cents.and_then(|c| i64::try_from(c).ok()))
    .bind(settings.budget.daily_turns.map(i64::from))
    .bind(name.as_str())
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM chat_bindings WHERE group_name = $1").bind(name.as_str()).execute(&mut **tx).await?;
    if let Some(at) = &settings.chat {
        let taken: Option<String> = sqlx::query_scalar(
            "SELECT group_name FROM chat_bindings WHERE platform = $1 AND chat = $2 AND COALESCE(thread, '') = COALESCE($3, '')",
        )
        .bind(at.platform.as_str())
        .bind(&at.chat)
        .bind(&at.thread)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(other) = taken {
            return Err(StoreError::ChatTaken(other));
        }
        sqlx::query("INSERT INTO chat_bindings (group_name, platform, chat, thread) VALUES ($1, $2, $3, $4)")
            .bind(name.as_str())
            .bind(at.platform.as_str())
            .bind(&at.chat)
            .bind(&at.thread)
            .execute(&mut **tx)
            .await?;
    }
    super::outbox::follow_binding(tx, name).await
}

fn bad_group(row: &AnyRow, source: sqlx::Error) -> StoreError {
    StoreError::BadRow { table: "groups", key: row_key(row), source }
}

/// A [`SELECT_GROUP`] row, by column name.
#[derive(sqlx::FromRow)]
struct GroupRow {
    name: String,
    created_at_us: i64,
    session_id: Option<String>,
    allowed_tools: Option<String>,
    trigger: Option<String>,
    #[sqlx(try_from = "Flag")]
    requires_trigger: bool,
    admins: Option<String>,
    #[sqlx(try_from = "Flag")]
    active: bool,
    inactive_reason: Option<String>,
    platform: Option<String>,
    chat: Option<String>,
    thread: Option<String>,
    #[sqlx(try_from = "Flag")]
    is_main: bool,
    tools: String,
    progress: Option<String>,
    budget_daily_cents: Option<i64>,
    budget_monthly_cents: Option<i64>,
    budget_daily_turns: Option<i64>,
}

fn group_from_row(row: &AnyRow) -> Result<GroupRecord, sqlx::Error> {
    let r = GroupRow::from_row(row)?;
    let list = |json: Option<String>| json.and_then(|t| serde_json::from_str::<Vec<String>>(&t).ok());
    let chat = match (r.platform.as_deref().and_then(Platform::parse), r.chat) {
        (Some(platform), Some(chat)) => Some(ChatAddress { platform, chat, thread: r.thread }),
        (Some(_), None) => return Err(bad_row("a chat binding without its chat")),
        (None, _) => None,
    };
    Ok(GroupRecord {
        name: r.name.parse().map_err(|e| bad_row(format!("group name {:?}: {e}", r.name)))?,
        created_at_us: r.created_at_us,
        session_id: r.session_id,
        settings: GroupSettings {
            allowed_tools: list(r.allowed_tools),
            trigger: r.trigger,
            requires_trigger: r.requires_trigger,
            admins: list(r.admins).unwrap_or_default(),
            chat,
            main: r.is_main,
            // Only `as_str` values are written; anything else reads as the stricter choice.
            tools: r.tools.parse().unwrap_or(ToolsFor::Admins),
            // Only `progress_str` values are written; anything else reads as the default.
            progress: r.progress.as_deref().and_then(progress_mode),
            // Only values pincer wrote are there; a negative one (written by hand) is no limit.
            budget: Budget {
                daily_cents: r.budget_daily_cents.and_then(|c| u64::try_from(c).ok()),
                monthly_cents: r.budget_monthly_cents.and_then(|c| u64::try_from(c).ok()),
                daily_turns: r.budget_daily_turns.and_then(|t| u32::try_from(t).ok()),
            },
        },
        active: r.active,
        inactive_reason: r.inactive_reason,
    })
}

/// How a group's progress mode is stored.
fn progress_str(mode: ProgressMode) -> &'static str {
    match mode {
        ProgressMode::Off => "off",
        ProgressMode::Status => "status",
        ProgressMode::Verbose => "verbose",
    }
}

fn progress_mode(stored: &str) -> Option<ProgressMode> {
    [ProgressMode::Off, ProgressMode::Status, ProgressMode::Verbose].into_iter().find(|m| progress_str(*m) == stored)
}

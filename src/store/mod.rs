//! The store: the only module that speaks SQL.
//!
//! SQLite in WAL mode through sqlx, with the migrations in `migrations/`
//! embedded at build time and applied when the store opens. Every write that
//! the session engine depends on ("persist first") goes through here.

mod budget;
mod channels;
mod egress;
mod groups;
mod history;
mod hot;
mod outbox;
mod overview;
mod preparing;
mod proxy_spend;
mod queue;
mod retention;
mod rows;
mod schedules;
mod status;

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::SystemTime;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{FromRow, Row, SqliteConnection, SqlitePool};

use crate::domain::media::ModelImage;
use crate::domain::{
    from_unix_us, unix_us, ChatLine, GroupName, Inbound, InboundId, PermissionDecision, TaskFrame, TurnResult,
};

pub use channels::ChannelHealth;
pub use egress::{EgressDecision, EgressVerdict, EgressVia};
pub use groups::{GroupRecord, GroupSettings};
pub use history::{Delivery, FileEntry, HistoryEntry};
pub use outbox::{DeliveryState, Enqueue, Marked, OutboxId, OutboxRow, Seen};
pub use overview::{Backlog, GroupView, Overview, PlatformView};
pub use preparing::{Stored, ToPrepare, Waiting};
pub use proxy_spend::{bucket_of, BUCKET_US};
pub use queue::{Pulled, Recovered};
pub use retention::{Pruned, SpaceMode};
pub use schedules::{NewSchedule, RunId, RunRecord};
pub use status::StatusRecord;

/// What can go wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("group `{0}` is already registered")]
    GroupExists(GroupName),
    #[error("group `{0}` is not registered: add it with `pincer groups add {0}`")]
    UnknownGroup(String),
    #[error("there is no scheduled task #{0}: `pincer tasks list` shows them")]
    UnknownSchedule(i64),
    #[error("scheduled task #{0} kept changing while pincer recorded its run; `pincer tasks runs {0}` shows the log")]
    ScheduleContended(i64),
    #[error("that chat (or topic) is already bound to group `{0}`: unbind it there first")]
    ChatTaken(String),
    #[error("message {0} was already received")]
    Duplicate(String),
    #[error("cannot open the database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot migrate the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error(
        "a stored row of `{table}` ({key}) cannot be read, so it was changed outside pincer: {source}. \
         Fix or delete that row with sqlite3"
    )]
    BadRow { table: &'static str, key: String, source: sqlx::Error },
}

/// Why a stored row does not read as what its table holds.
fn bad_row(why: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(why.to_string().into())
}

/// `read` over `rows`, each row that does not read logged and skipped: a row
/// changed outside pincer (by hand, by another program) must not take a
/// listing, or pincer, down with it. Every read is `try_get`, never `get`,
/// which panics on a value of another type.
fn readable<T>(table: &'static str, rows: &[SqliteRow], read: impl Fn(&SqliteRow) -> Result<T, sqlx::Error>) -> Vec<T> {
    rows.iter()
        .filter_map(|row| match read(row) {
            Ok(value) => Some(value),
            Err(e) => {
                tracing::error!(
                    table, row = %row_key(row), %e,
                    "skipping a stored row that cannot be read (changed outside pincer?); fix or delete it with sqlite3"
                );
                None
            }
        })
        .collect()
}

/// The row's `id` (or a group's `name`), to name it in a log line.
fn row_key(row: &SqliteRow) -> String {
    row.try_get::<i64, _>("id")
        .map(|id| id.to_string())
        .or_else(|_| row.try_get::<String, _>("name"))
        .unwrap_or_else(|_| "?".to_owned())
}

/// Where an inbound message is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InboundState {
    Queued,
    Sent,
    Answered,
    Failed,
    /// Seen in the chat but not addressed to the agent: context for later.
    Observed,
    /// Handed to the agent as context of a later message.
    Included,
    /// Stored with media still to fetch and prepare: its group's session
    /// takes nothing at or after it until it is queued (see `preparing.rs`).
    Preparing,
    /// An album's part whose attachments went with another part (the
    /// message the agent read).
    Merged,
}

impl InboundState {
    fn as_str(self) -> &'static str {
        match self {
            InboundState::Queued => "queued",
            InboundState::Sent => "sent",
            InboundState::Answered => "answered",
            InboundState::Failed => "failed",
            InboundState::Observed => "observed",
            InboundState::Included => "included",
            InboundState::Preparing => "preparing",
            InboundState::Merged => "merged",
        }
    }
}

/// Chat lines taken as context for a message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TakenContext {
    /// The newest ones, oldest first.
    pub lines: Vec<ChatLine>,
    /// How many older ones were left out.
    pub omitted: usize,
}

/// A message's attachments as stored: NULL for none.
pub(crate) fn media_json(media: &[crate::domain::media::Attachment]) -> Option<String> {
    // Serializing plain data (strings, numbers, enums) cannot fail.
    (!media.is_empty()).then(|| serde_json::to_string(media).unwrap_or_else(|_| "[]".to_owned()))
}

/// A cheap, cloneable handle to the database.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    /// The message path's own connection (`hot`).
    hot: hot::Hot,
    /// The database file, to name it to operators.
    path: std::sync::Arc<Path>,
}

/// A result's row, the first statement of [`Store::record_result`]'s list.
const RESULT_SQL: &str = "
INSERT INTO results (group_name, at_us, session_id, subtype, is_error, text, total_cost_usd, duration_ms, num_turns, origin, raw, cost_usd)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The states of several messages at once, from a JSON list of `[id, state]`
/// ([`settle_list`]).
const SETTLE_SQL: &str = "
UPDATE inbound SET state = s.value ->> 1 FROM json_each(?) AS s WHERE inbound.id = s.value ->> 0";

/// [`SETTLE_SQL`]'s parameter.
fn settle_list(states: impl Iterator<Item = (InboundId, InboundState)>) -> String {
    let pairs: Vec<(i64, &str)> = states.map(|(id, state)| (id.0, state.as_str())).collect();
    // Plain numbers and state names: serializing cannot fail.
    serde_json::to_string(&pairs).unwrap_or_default()
}

/// Now, as unix microseconds, strictly increasing within this process.
///
/// History merges several tables by this timestamp, so two rows written in the
/// same microsecond (or across a clock step back) must still sort in write order.
pub fn now_us() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let wall = unix_us(SystemTime::now());
    let prev = LAST.fetch_max(wall, Ordering::Relaxed);
    if wall > prev {
        wall
    } else {
        LAST.fetch_add(1, Ordering::Relaxed) + 1
    }
}

impl Store {
    /// Opens (creating if missing) the database at `path` and migrates it.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(|source| StoreError::Open { path: path.display().to_string(), source })?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL is durable against process crashes, which is what
            // "persist first" guards against; it trades only power-loss safety.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::from_secs(5));
        let failed = |source| StoreError::Open { path: path.display().to_string(), source };
        if !path.exists() {
            // A new database gives pages freed by retention back (`store::retention`):
            // the mode is set once, by the connection that creates the file, before
            // any table. Set on every connection it would take the write lock at each
            // connect. An older database is never switched while pincer runs (a full
            // VACUUM holds the write lock): `retention.rs`, `SpaceMode`.
            let create = options.clone().auto_vacuum(sqlx::sqlite::SqliteAutoVacuum::Incremental);
            let first = SqlitePoolOptions::new().max_connections(1).connect_with(create).await.map_err(failed)?;
            sqlx::migrate!("./migrations").run(&first).await?;
            first.close().await;
        }
        let pool = SqlitePoolOptions::new()
            // A connection to a local file does not go stale the way a network
            // one does: the ping sqlx sends before lending it out would be one
            // more round trip to the connection's thread.
            .test_before_acquire(false)
            .after_release(|conn, _| Box::pin(roll_back_what_was_left_open(conn)))
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .map_err(failed)?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let hot = hot::Hot::open(&options).await.map_err(failed)?;
        Ok(Store { pool, hot, path: path.into() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn close(&self) {
        self.hot.close().await;
        self.pool.close().await;
    }

    /// Whether the database answers a query now (the service watchdog's check).
    pub async fn answers(&self) -> bool {
        sqlx::query("SELECT 1").execute(&self.pool).await.is_ok()
    }

    /// Whether a write could start now (`/readyz`): takes the write lock
    /// and lets it go at once, writing nothing.
    ///
    /// Cancel-safe: a probe whose client goes away while the database is
    /// locked drops this future half-way. As a sqlx transaction, a `BEGIN`
    /// that succeeds after nobody waits for it is rolled back by the
    /// connection's own thread, and a dropped transaction rolls back too
    /// (and [`roll_back_what_was_left_open`] catches anything else).
    pub async fn writable(&self) -> bool {
        let Ok(tx) = self.pool.begin_with("BEGIN IMMEDIATE").await else {
            return false;
        };
        let _ = tx.rollback().await;
        true
    }

    /// The outbox now, per platform: rows waiting and the oldest one's `at_us`.
    pub async fn outbox_backlog(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT platform, COUNT(*), MIN(at_us) FROM outbox WHERE state = 'queued' GROUP BY platform ORDER BY platform",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Stores a message in its first state: `Queued` for the agent, or
    /// `Observed`. A second copy of a message with the same platform id
    /// (`external_id`) is refused with [`StoreError::Duplicate`].
    pub async fn insert_inbound(&self, msg: &Inbound, state: InboundState) -> Result<InboundId, StoreError> {
        let done = insert_inbound_row(&mut *self.hot.lock().await?, msg, state).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Duplicate(msg.external_id.clone().unwrap_or_default()));
        }
        Ok(InboundId(done.last_insert_rowid()))
    }

    /// Takes the group's observed messages from before `before` (the message
    /// they go with: the newest `limit`, oldest first) and marks all of them
    /// included.
    pub async fn take_context(
        &self,
        group: &GroupName,
        limit: usize,
        before: InboundId,
    ) -> Result<TakenContext, StoreError> {
        // One statement, so reading and marking are atomic without a deferred
        // transaction (which WAL refuses to upgrade once another writer committed).
        let mut rows = sqlx::query(
            "UPDATE inbound SET state = 'included' WHERE group_name = ? AND state = 'observed' AND id < ?
             RETURNING id, sender, sent_at_us, reply_to, text, sender_id, media",
        )
        .bind(group.as_str())
        .bind(before.0)
        .fetch_all(&mut *self.hot.lock().await?)
        .await?;
        // RETURNING has no defined order: newest first, to keep the newest `limit`.
        // (`id` is the rowid, always an integer.)
        let id = |r: &SqliteRow| r.try_get::<i64, _>("id").unwrap_or_default();
        rows.sort_by_key(|r| std::cmp::Reverse(id(r)));
        let omitted = rows.len().saturating_sub(limit);
        let newest = rows.get(..limit.min(rows.len())).unwrap_or_default();
        let mut lines: Vec<ChatLine> = readable("inbound", newest, |r| Ok(rows::ContextRow::from_row(r)?.into()));
        lines.reverse();
        crate::metrics::hop("context_taken");
        Ok(TakenContext { lines, omitted })
    }

    pub async fn set_inbound_state(&self, ids: &[InboundId], state: InboundState) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(SETTLE_SQL)
            .bind(settle_list(ids.iter().map(|id| (*id, state))))
            .execute(&mut *self.hot.lock().await?)
            .await?;
        Ok(())
    }

    /// Stores a result; `cost_usd` is this turn's own share of the CLI's
    /// running total. `out`, if any, goes into the outbox in the same
    /// transaction, so a stored result is never without its delivery, and so
    /// do the states of the messages it settles (`answered`, `failed`): a
    /// pincer killed right after never sends an answered message again.
    ///
    /// The transaction is one statement list (`BEGIN IMMEDIATE` ... `COMMIT`),
    /// sent to SQLite's thread at once: one round trip where sqlx's
    /// transaction takes one per statement. If it stops half-way (a failed
    /// statement, or this future dropped), it is rolled back as the
    /// connection is given back (`hot`).
    pub async fn record_result(
        &self,
        group: &GroupName,
        r: &TurnResult,
        cost_usd: Option<f64>,
        raw: &str,
        out: Option<Enqueue<'_>>,
        settles: &[(InboundId, InboundState)],
    ) -> Result<Option<OutboxId>, StoreError> {
        crate::metrics::hop("result_storing");
        let at_us = now_us();
        let sql = [
            Some("BEGIN IMMEDIATE"),
            Some(RESULT_SQL),
            out.is_some().then_some(outbox::ENQUEUE_AFTER_RESULT_SQL),
            (!settles.is_empty()).then_some(SETTLE_SQL),
            Some("COMMIT"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(";\n");
        let mut query = sqlx::query_scalar::<_, i64>(&sql)
            .bind(group.as_str())
            .bind(at_us)
            .bind(&r.session_id)
            .bind(&r.subtype)
            .bind(r.is_error)
            .bind(&r.text)
            .bind(r.total_cost_usd)
            .bind(r.duration_ms)
            .bind(r.num_turns)
            .bind(&r.origin)
            .bind(raw)
            .bind(cost_usd);
        if let Some(out) = &out {
            query = query.bind(group.as_str()).bind(at_us).bind(out.kind.as_str()).bind(out.text).bind(out.console);
        }
        if !settles.is_empty() {
            query = query.bind(settle_list(settles.iter().copied()));
        }
        let mut hot = self.hot.lock().await?;
        hot.unsettled();
        // Only the outbox row's `RETURNING` yields a row. (`fetch_all`, not
        // `fetch_optional`: that stops at the first row, before `COMMIT`.)
        let returned = query.fetch_all(&mut *hot).await?;
        hot.settled();
        crate::metrics::hop("result_stored");
        match (out, returned.first()) {
            (None, _) => Ok(None),
            (Some(_), Some(id)) => Ok(Some(OutboxId(*id))),
            // Cannot happen: the result's row names the group (a foreign
            // key), and its reply's row needs nothing more.
            (Some(_), None) => Err(StoreError::UnknownGroup(group.to_string())),
        }
    }

    /// What the group's turns have cost so far, in USD.
    pub async fn group_cost(&self, group: &GroupName) -> Result<f64, StoreError> {
        let total: Option<f64> = sqlx::query_scalar("SELECT SUM(cost_usd) FROM results WHERE group_name = ?")
            .bind(group.as_str())
            .fetch_one(&self.pool)
            .await?;
        Ok(total.unwrap_or(0.0))
    }

    pub async fn record_task_frame(&self, group: &GroupName, t: &TaskFrame, raw: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO task_frames (group_name, at_us, session_id, subtype, task_id, task_type, status, summary, description, raw)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&t.session_id)
        .bind(&t.subtype)
        .bind(&t.task_id)
        .bind(&t.task_type)
        .bind(&t.status)
        .bind(&t.summary)
        .bind(&t.description)
        .bind(raw)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn record_decision(&self, group: &GroupName, d: &PermissionDecision) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO permission_decisions (group_name, at_us, tool_name, tool_use_id, input, allowed, message, decided_by)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(group.as_str())
        .bind(now_us())
        .bind(&d.tool_name)
        .bind(&d.tool_use_id)
        .bind(&d.input)
        .bind(d.allowed)
        .bind(&d.message)
        .bind(&d.decided_by)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn decisions(&self, group: &GroupName) -> Result<Vec<PermissionDecision>, StoreError> {
        let rows = sqlx::query(
            "SELECT tool_name, tool_use_id, input, allowed, message, decided_by FROM permission_decisions WHERE group_name = ? ORDER BY id",
        )
        .bind(group.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(readable("permission_decisions", &rows, |r| Ok(rows::DecisionRow::from_row(r)?.into())))
    }

    pub async fn record_session_event(
        &self,
        group: &GroupName,
        kind: &str,
        session_id: Option<&str>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO session_events (group_name, at_us, kind, session_id, detail) VALUES (?, ?, ?, ?, ?)")
            .bind(group.as_str())
            .bind(now_us())
            .bind(kind)
            .bind(session_id)
            .bind(detail)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Session lifecycle events of a group, oldest first, as `(kind, session_id)`.
    pub async fn session_events(&self, group: &GroupName) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = sqlx::query("SELECT kind, session_id FROM session_events WHERE group_name = ? ORDER BY id")
            .bind(group.as_str())
            .fetch_all(&self.pool)
            .await?;
        Ok(readable("session_events", &rows, |r| {
            let e = rows::SessionEventRow::from_row(r)?;
            Ok((e.kind, e.session_id))
        }))
    }
}

impl Store {
    /// Session events of a group with their details, oldest first, as `(kind, detail)`.
    #[cfg(test)]
    pub(crate) async fn session_event_details(
        &self,
        group: &GroupName,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let rows = sqlx::query("SELECT kind, detail FROM session_events WHERE group_name = ? ORDER BY id")
            .bind(group.as_str())
            .fetch_all(&self.pool)
            .await?;
        Ok(readable("session_events", &rows, |r| Ok((r.try_get(0)?, r.try_get(1)?))))
    }
}

/// The pool's check on every connection given back: a transaction still
/// open on it is rolled back before anyone else may borrow it.
///
/// A borrower that opened a transaction with a raw `BEGIN` and was dropped
/// (cancelled) before its `COMMIT` or `ROLLBACK` would otherwise give the
/// connection back inside that transaction: its write lock would refuse
/// every other writer (after their 5 s busy timeout) for as long as the
/// connection sits idle, and whatever the next borrower writes there would
/// never be committed. One round trip per release, off the message path
/// (which has its own connection, `hot`). A connection that cannot say is
/// closed, which rolls back too.
async fn roll_back_what_was_left_open(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
    match sqlx::Executor::execute(&mut *conn, "ROLLBACK").await {
        Ok(_) => {
            tracing::warn!("rolled back a transaction left open on a database connection (its caller was cancelled)");
            Ok(true)
        }
        Err(sqlx::Error::Database(e)) if e.message().contains("no transaction is active") => Ok(true),
        Err(e) => {
            tracing::warn!(%e, "closing a database connection that may still be inside a transaction");
            Ok(false)
        }
    }
}

/// Sets each message's state, on `conn` (the pool's, or a transaction's).
/// Inserts `msg` in `state`; a second copy (same `external_id`) inserts nothing.
async fn insert_inbound_row(
    conn: &mut SqliteConnection,
    msg: &Inbound,
    state: InboundState,
) -> Result<sqlx::sqlite::SqliteQueryResult, StoreError> {
    Ok(sqlx::query(
        "INSERT INTO inbound (group_name, at_us, source, sender, sender_id, text, sent_at_us, reply_to, state, external_id,
                              media, album)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(msg.group.as_str())
    .bind(now_us())
    .bind(msg.source.as_str())
    .bind(&msg.sender)
    .bind(&msg.sender_id)
    .bind(&msg.text)
    .bind(unix_us(msg.sent_at))
    .bind(&msg.reply_to)
    .bind(state.as_str())
    .bind(&msg.external_id)
    .bind(media_json(&msg.media))
    .bind(&msg.album)
    .execute(&mut *conn)
    .await?)
}

/// Stores the images the model is shown with message `id`, in order.
async fn insert_images(conn: &mut SqliteConnection, id: InboundId, images: &[ModelImage]) -> Result<(), StoreError> {
    for (seq, image) in images.iter().enumerate() {
        sqlx::query("INSERT INTO inbound_images (inbound_id, seq, media_type, data) VALUES (?, ?, ?, ?)")
            .bind(id.0)
            .bind(i64::try_from(seq).unwrap_or(i64::MAX))
            .bind(&image.media_type)
            .bind(&image.data)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;

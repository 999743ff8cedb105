//! A turn's result, stored with its reply and the states of the messages it
//! settles in one transaction on the message path's connection (`hot`): in
//! SQLite one statement list, in PostgreSQL one statement at a time (with,
//! on a cluster node, the transcript bytes its turn appended).

use sqlx::AnyConnection;

use super::clock::now_us;
use super::db::Dialect;
use super::error::StoreError;
use super::fenced;
use super::fences::Fences;
use super::handles::OutboxLog;
use super::inbound::{settle_list, settle_sql, InboundState, SETTLE_SQL};
use super::outbox::{self, Enqueue, OutboxId};
use super::transcripts::{self, TranscriptWrite};
use crate::domain::{GroupName, InboundId, TurnResult};

/// A result's row, the first statement of SQLite's statement list (`?`).
const RESULT_SQL: &str = "
INSERT INTO results (group_name, at_us, session_id, subtype, is_error, text, total_cost_usd, duration_ms, num_turns, origin, raw, cost_usd)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// [`RESULT_SQL`] as a statement of its own, returning the row's id.
const RESULT_RETURNING_SQL: &str = "
INSERT INTO results (group_name, at_us, session_id, subtype, is_error, text, total_cost_usd, duration_ms, num_turns, origin, raw, cost_usd)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id";

/// What [`OutboxLog::record_result`] stores, as its statements bind it.
struct Row<'a> {
    group: &'a GroupName,
    at_us: i64,
    r: &'a TurnResult,
    cost_usd: Option<f64>,
    raw: &'a str,
}

/// What a result carries into its transaction besides its reply: the
/// states of the messages it settles and, on a cluster node, what its turn
/// appended to the CLI's transcript (SQLite, never a cluster's, has none).
#[derive(Clone, Copy, Debug, Default)]
pub struct Carried<'a> {
    pub settles: &'a [(InboundId, InboundState)],
    pub transcript: Option<&'a TranscriptWrite>,
}

/// Binds a result's twelve columns, in [`RESULT_SQL`]'s order.
macro_rules! bind_result {
    ($query:expr, $row:expr) => {
        $query
            .bind($row.group.as_str())
            .bind($row.at_us)
            .bind(&$row.r.session_id)
            .bind(&$row.r.subtype)
            .bind(i64::from($row.r.is_error))
            .bind(&$row.r.text)
            .bind($row.r.total_cost_usd)
            .bind($row.r.duration_ms)
            .bind($row.r.num_turns)
            .bind(&$row.r.origin)
            .bind($row.raw)
            .bind($row.cost_usd)
    };
}

impl OutboxLog {
    /// Stores a result; `cost_usd` is this turn's own share of the CLI's
    /// running total. `out`, if any, goes into the outbox in the same
    /// transaction, so a stored result is never without its delivery, and so
    /// do the states of the messages it settles (`answered`, `failed`): a
    /// pincer killed right after never sends an answered message again.
    ///
    /// In SQLite the transaction is one statement list (`BEGIN IMMEDIATE`
    /// ... `COMMIT`), sent to SQLite's thread at once: one round trip where
    /// sqlx's transaction takes one per statement. If it stops half-way (a
    /// failed statement, or this future dropped), it is rolled back as the
    /// connection is given back (`hot`). PostgreSQL takes one statement per
    /// round trip in any case, in a sqlx transaction.
    pub async fn record_result(
        &self,
        group: &GroupName,
        r: &TurnResult,
        cost_usd: Option<f64>,
        raw: &str,
        out: Option<Enqueue<'_>>,
        settles: &[(InboundId, InboundState)],
    ) -> Result<Option<OutboxId>, StoreError> {
        self.record_result_with(group, r, cost_usd, raw, out, Carried { settles, transcript: None }).await
    }

    /// [`OutboxLog::record_result`], with what else the result carries.
    pub async fn record_result_with(
        &self,
        group: &GroupName,
        r: &TurnResult,
        cost_usd: Option<f64>,
        raw: &str,
        out: Option<Enqueue<'_>>,
        carried: Carried<'_>,
    ) -> Result<Option<OutboxId>, StoreError> {
        let settles = carried.settles;
        crate::metrics::hop("result_storing");
        let row = Row { group, at_us: now_us(), r, cost_usd, raw };
        let mut hot = self.db.hot.lock().await?;
        let id = match self.db.dialect {
            Dialect::Sqlite => {
                hot.unsettled();
                let id = in_one_list(&mut hot, &row, out, settles).await?;
                hot.settled();
                id
            }
            Dialect::Postgres => in_steps(&mut hot, &self.db.fences, &row, out, carried).await?,
        };
        crate::metrics::hop("result_stored");
        match (out, id) {
            (None, _) => Ok(None),
            (Some(_), Some(id)) => Ok(Some(OutboxId(id))),
            // Cannot happen: the result's row names the group (a foreign
            // key), and its reply's row needs nothing more.
            (Some(_), None) => Err(StoreError::UnknownGroup(group.to_string())),
        }
    }
}

/// SQLite: the whole transaction as one statement list; the reply's row id if any.
async fn in_one_list(
    conn: &mut AnyConnection,
    row: &Row<'_>,
    out: Option<Enqueue<'_>>,
    settles: &[(InboundId, InboundState)],
) -> Result<Option<i64>, StoreError> {
    let sql = statements(out.is_some(), !settles.is_empty());
    let mut query = bind_result!(sqlx::query_scalar::<_, i64>(&sql), row);
    if let Some(out) = &out {
        query = query.bind(row.group.as_str()).bind(row.at_us).bind(out.kind.as_str()).bind(out.text).bind(out.console);
    }
    if !settles.is_empty() {
        query = query.bind(settle_list(settles.iter().copied()));
    }
    // Only the outbox row's `RETURNING` yields a row. (`fetch_all`, not
    // `fetch_optional`: that stops at the first row, before `COMMIT`.)
    Ok(query.fetch_all(&mut *conn).await?.first().copied())
}

/// PostgreSQL: the same writes, a statement at a time in one transaction,
/// fenced by the group's lease on a cluster node (`fenced.rs`), with the
/// transcript's new bytes if any: a fenced-out node stores neither.
async fn in_steps(
    conn: &mut AnyConnection,
    fences: &Fences,
    row: &Row<'_>,
    out: Option<Enqueue<'_>>,
    carried: Carried<'_>,
) -> Result<Option<i64>, StoreError> {
    let settles = carried.settles;
    let mut tx = fenced::begin_checked(&mut *conn, fences, row.group).await?;
    let result: i64 = bind_result!(sqlx::query_scalar(RESULT_RETURNING_SQL), row).fetch_one(&mut *tx).await?;
    let mut reply = None;
    if let Some(out) = &out {
        reply = sqlx::query_scalar(outbox::ENQUEUE_RESULT_REPLY_SQL)
            .bind(row.group.as_str())
            .bind(row.at_us)
            .bind(out.kind.as_str())
            .bind(out.text)
            .bind(out.console)
            .bind(result)
            .fetch_optional(&mut *tx)
            .await?;
    }
    if !settles.is_empty() {
        sqlx::query(settle_sql(Dialect::Postgres)).bind(settle_list(settles.iter().copied())).execute(&mut *tx).await?;
    }
    if let Some(write) = carried.transcript {
        transcripts::write_in(&mut tx, row.group, write).await?;
    }
    tx.commit().await?;
    Ok(reply)
}

/// [`OutboxLog::record_result`]'s statement list: the result's row, its
/// reply's outbox row (`with_reply`), the settled messages' states
/// (`with_settles`), in one transaction.
fn statements(with_reply: bool, with_settles: bool) -> String {
    [
        Some("BEGIN IMMEDIATE"),
        Some(RESULT_SQL),
        with_reply.then_some(outbox::ENQUEUE_AFTER_RESULT_SQL),
        with_settles.then_some(SETTLE_SQL),
        Some("COMMIT"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(";\n")
}

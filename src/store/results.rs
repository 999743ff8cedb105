//! A turn's result, stored with its reply and the states of the messages it
//! settles in one statement list on the message path's connection (`hot`).

use super::clock::now_us;
use super::error::StoreError;
use super::handles::OutboxLog;
use super::inbound::{settle_list, InboundState, SETTLE_SQL};
use super::outbox::{self, Enqueue, OutboxId};
use crate::domain::{GroupName, InboundId, TurnResult};

/// A result's row, the first statement of [`OutboxLog::record_result`]'s list.
const RESULT_SQL: &str = "
INSERT INTO results (group_name, at_us, session_id, subtype, is_error, text, total_cost_usd, duration_ms, num_turns, origin, raw, cost_usd)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

impl OutboxLog {
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
        let sql = statements(out.is_some(), !settles.is_empty());
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
        let mut hot = self.db.hot.lock().await?;
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

//! The inbound queue: messages wait here, not in memory, until their group's
//! session takes them.
//!
//! A chat adapter's message is confirmed once it is stored `queued`; the
//! group's session pulls queued rows in id order when it can take them. A
//! restart goes through the same door: [`Queue::recover_after_restart`] puts
//! what a previous pincer had written but not seen answered back in the queue
//! (`recovery.rs`).

use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

use super::error::{readable, StoreError};
use super::fenced;
use super::flag::Flag;
use super::handles::Queue;
use super::inbound::{insert_inbound_row, settle_list, settle_sql, InboundState};
use super::recovery::{Recovered, Recovery};
use super::rows::{self, InboundRow};
use crate::domain::media::{Attachment, ModelImage, Outcome};
use crate::domain::{from_unix_us, ChatLine, GroupName, Inbound, InboundId};

/// One queued row, as the session pulls it.
#[derive(Debug)]
pub struct Pulled {
    pub id: InboundId,
    pub msg: Inbound,
    /// Observed chat lines wait before it: only then is its context taken
    /// (the common case, a chat with nothing unseen, costs no second write).
    pub has_context: bool,
    /// The images the model is shown with it, in order (see `inbound_images`).
    pub images: Vec<ModelImage>,
}

/// Chat lines taken as context for a message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TakenContext {
    /// The newest ones, oldest first.
    pub lines: Vec<ChatLine>,
    /// How many older ones were left out.
    pub omitted: usize,
}

impl Queue {
    /// Stores a message in its first state: `Queued` for the agent, or
    /// `Observed`. A second copy of a message with the same platform id
    /// (`external_id`) is refused with [`StoreError::Duplicate`].
    pub async fn insert_inbound(&self, msg: &Inbound, state: InboundState) -> Result<InboundId, StoreError> {
        let id = insert_inbound_row(&mut *self.db.hot.lock().await?, msg, state).await?;
        id.ok_or_else(|| StoreError::Duplicate(msg.external_id.clone().unwrap_or_default()))
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
        // Marking them is a write of the group's: fenced on a cluster node.
        let query = sqlx::query(
            "UPDATE inbound SET state = 'included' WHERE group_name = $1 AND state = 'observed' AND id < $2
             RETURNING id, sender, sent_at_us, reply_to, text, sender_id, media",
        )
        .bind(group.as_str())
        .bind(before.0);
        let mut rows = fenced::fetch_hot_for(&self.db, group, query).await?;
        // RETURNING has no defined order: newest first, to keep the newest `limit`.
        // (`id` is the rowid, always an integer.)
        let id = |r: &AnyRow| r.try_get::<i64, _>("id").unwrap_or_default();
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
        sqlx::query(settle_sql(self.db.dialect))
            .bind(settle_list(ids.iter().map(|id| (*id, state))))
            .execute(&mut *self.db.hot.lock().await?)
            .await?;
        Ok(())
    }

    /// [`Queue::set_inbound_state`] of `group`'s own session: fenced by the
    /// group's lease on a cluster node (`fenced.rs`).
    pub async fn settle(&self, group: &GroupName, ids: &[InboundId], state: InboundState) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let query = sqlx::query(settle_sql(self.db.dialect)).bind(settle_list(ids.iter().map(|id| (*id, state))));
        fenced::fetch_hot_for(&self.db, group, query).await?;
        Ok(())
    }

    /// Up to `limit` of `group`'s queued messages after `after`, oldest first.
    /// A row that does not read (changed outside pincer) is marked failed and
    /// logged, so it never blocks the queue behind it.
    pub async fn queued_inbound(
        &self,
        group: &GroupName,
        after: InboundId,
        limit: usize,
    ) -> Result<Vec<Pulled>, StoreError> {
        crate::metrics::hop("pull");
        let rows = sqlx::query(
            "SELECT id, group_name, source, sender, sender_id, text, sent_at_us, reply_to, at_us, external_id, media, album,
                    EXISTS (SELECT 1 FROM inbound o WHERE o.group_name = q.group_name
                                AND o.state = 'observed' AND o.id < q.id) AS has_context
               FROM inbound q WHERE group_name = $1 AND state = 'queued' AND id > $2
                AND id < COALESCE((SELECT MIN(id) FROM inbound p WHERE p.group_name = $1 AND p.state = 'preparing'),
                                  9223372036854775807)
              ORDER BY id LIMIT $3",
        )
        .bind(group.as_str())
        .bind(after.0)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.db.hot.lock().await?)
        .await?;
        let mut pulled = Vec::with_capacity(rows.len());
        let mut unreadable = Vec::new();
        for row in &rows {
            let id = InboundId(row.try_get::<i64, _>("id")?);
            match read_queued(row) {
                Ok(msg) => pulled.push(Pulled {
                    id,
                    msg,
                    has_context: row.try_get::<Flag, _>("has_context")?.0,
                    images: Vec::new(),
                }),
                Err(e) => {
                    tracing::error!(
                        %group, id = id.0, %e,
                        "a queued message cannot be read (changed outside pincer?); marking it failed"
                    );
                    unreadable.push(id);
                }
            }
        }
        if !unreadable.is_empty() {
            self.set_inbound_state(&unreadable, InboundState::Failed).await?;
        }
        for p in pulled.iter_mut().filter(|p| p.msg.media.iter().any(shown)) {
            p.images = self.inbound_images(p.id).await?;
        }
        crate::metrics::hop("pulled");
        Ok(pulled)
    }

    /// The images stored to show the model with message `id`, in order.
    pub async fn inbound_images(&self, id: InboundId) -> Result<Vec<ModelImage>, StoreError> {
        let rows: Vec<(String, Vec<u8>)> =
            sqlx::query_as("SELECT media_type, data FROM inbound_images WHERE inbound_id = $1 ORDER BY seq")
                .bind(id.0)
                .fetch_all(&mut *self.db.hot.lock().await?)
                .await?;
        Ok(rows.into_iter().map(|(media_type, data)| ModelImage { media_type, data }).collect())
    }

    /// Stores images for message `id` as the preparer does (for tests of what reads them).
    #[cfg(test)]
    pub(crate) async fn test_insert_images(&self, id: InboundId, images: &[ModelImage]) -> Result<(), StoreError> {
        let mut conn = self.db.pool.acquire().await?;
        super::inbound::insert_images(&mut conn, id, images).await
    }

    /// At start, before any session runs: the restart's [`Recovery`] of
    /// what a previous pincer left in flight, every group's, in one
    /// transaction of its own (a pincer killed half-way leaves the rows as
    /// they were). Here because the router, which recovers before anything
    /// is served, holds the queue.
    pub async fn recover_after_restart(&self, now: DateTime<Utc>) -> Result<Recovered, StoreError> {
        let mut tx = self.db.pool.begin().await?;
        let recovered = Recovery::restart(now).run(&mut tx).await?;
        tx.commit().await?;
        Ok(recovered)
    }

    /// Gives up on one message if it is still queued (no session took it):
    /// whether it was. A scheduled prompt whose run gave up waiting is
    /// withdrawn so that its retry is not answered beside it.
    pub async fn withdraw_queued(&self, id: InboundId) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE inbound SET state = 'failed' WHERE id = $1 AND state = 'queued'")
            .bind(id.0)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Gives up on every queued message of `group` (a group that cannot be
    /// served: deleted by hand, or its row unreadable). Returns how many.
    pub async fn fail_queued(&self, group: &str) -> Result<u64, StoreError> {
        let done = sqlx::query("UPDATE inbound SET state = 'failed' WHERE group_name = $1 AND state = 'queued'")
            .bind(group)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Puts the group's written-but-unanswered chat messages back in the
    /// queue: the process they were written to is gone with the session
    /// actor that wrote them (a supervised restart). Scheduled prompts are
    /// left alone: their run heard that the session stopped, and retries it.
    pub async fn requeue_sent(&self, group: &GroupName) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE inbound SET state = 'queued'
              WHERE group_name = $1 AND state = 'sent' AND source <> 'scheduled'",
        )
        .bind(group.as_str())
        .execute(&self.db.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

/// Whether an attachment goes to the model as an image.
fn shown(a: &Attachment) -> bool {
    matches!(a.outcome, Outcome::Saved { shown: true, .. })
}

fn read_queued(row: &AnyRow) -> Result<Inbound, sqlx::Error> {
    let row = InboundRow::from_row(row)?;
    let stored = from_unix_us(row.at_us);
    let (_, mut msg) = row.message()?;
    msg.accepted_at = accepted_at(stored, SystemTime::now(), Instant::now());
    Ok(msg)
}

/// When a message stored at `stored` (wall clock) was accepted, on the
/// monotonic clock, for the latency metrics: `now` less its age (none if the
/// wall clock stepped back).
fn accepted_at(stored: SystemTime, wall_now: SystemTime, now: Instant) -> Instant {
    let age = wall_now.duration_since(stored).unwrap_or(Duration::ZERO);
    now.checked_sub(age).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_read_back_keeps_its_age_for_the_metrics() {
        let now = Instant::now();
        let wall = SystemTime::now();
        let stored = wall - Duration::from_millis(40);
        assert_eq!(now.duration_since(accepted_at(stored, wall, now)), Duration::from_millis(40));
        let ahead = wall + Duration::from_secs(5);
        assert_eq!(accepted_at(ahead, wall, now), now, "a clock stepped back makes no negative age");
    }
}

//! The `inbound` table's shared pieces: a message's states, and the
//! statements that write a message, its images and its state, which the
//! queue, the preparing of media and the outbox's results all use.

use sqlx::AnyConnection;

use super::clock::now_us;
use super::db::Dialect;
use super::error::StoreError;
use crate::domain::media::{Attachment, ModelImage};
use crate::domain::{unix_us, Inbound, InboundId};

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
    pub(super) fn as_str(self) -> &'static str {
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

/// A message's attachments as stored: NULL for none.
pub(super) fn media_json(media: &[Attachment]) -> Option<String> {
    // Serializing plain data (strings, numbers, enums) cannot fail.
    (!media.is_empty()).then(|| serde_json::to_string(media).unwrap_or_else(|_| "[]".to_owned()))
}

/// The states of several messages at once, from a JSON list of `[id, state]`
/// ([`settle_list`]), in a SQLite statement list (`?`: its parameters run on
/// from the statements before it).
pub(super) const SETTLE_SQL: &str = "
UPDATE inbound SET state = s.value ->> 1 FROM json_each(?) AS s WHERE inbound.id = s.value ->> 0";

/// [`SETTLE_SQL`] as a statement of its own, the list as `$1`.
pub(super) fn settle_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "UPDATE inbound SET state = s.value ->> 1 FROM json_each($1) AS s WHERE inbound.id = s.value ->> 0"
        }
        Dialect::Postgres => {
            "UPDATE inbound SET state = s.value ->> 1 FROM json_array_elements($1::json) AS s(value)
              WHERE inbound.id = (s.value ->> 0)::bigint"
        }
    }
}

/// [`SETTLE_SQL`]'s parameter.
pub(super) fn settle_list(states: impl Iterator<Item = (InboundId, InboundState)>) -> String {
    let pairs: Vec<(i64, &str)> = states.map(|(id, state)| (id.0, state.as_str())).collect();
    // Plain numbers and state names: serializing cannot fail.
    serde_json::to_string(&pairs).unwrap_or_default()
}

/// Inserts `msg` in `state`, returning its id; a second copy (same
/// `external_id`) inserts nothing and returns none.
pub(super) async fn insert_inbound_row(
    conn: &mut AnyConnection,
    msg: &Inbound,
    state: InboundState,
) -> Result<Option<InboundId>, StoreError> {
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO inbound (group_name, at_us, source, sender, sender_id, text, sent_at_us, reply_to, state, external_id,
                              media, album)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING RETURNING id",
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
    .fetch_optional(&mut *conn)
    .await?;
    Ok(id.map(InboundId))
}

/// Stores the images the model is shown with message `id`, in order.
pub(super) async fn insert_images(
    conn: &mut AnyConnection,
    id: InboundId,
    images: &[ModelImage],
) -> Result<(), StoreError> {
    for (seq, image) in images.iter().enumerate() {
        sqlx::query("INSERT INTO inbound_images (inbound_id, seq, media_type, data) VALUES ($1, $2, $3, $4)")
            .bind(id.0)
            .bind(i64::try_from(seq).unwrap_or(i64::MAX))
            .bind(&image.media_type)
            .bind(&image.data)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

//! The `inbound` table's shared pieces: a message's states, and the
//! statements that write a message, its images and its state, which the
//! queue, the preparing of media and the outbox's results all use.

use sqlx::SqliteConnection;

use super::clock::now_us;
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
/// ([`settle_list`]).
pub(super) const SETTLE_SQL: &str = "
UPDATE inbound SET state = s.value ->> 1 FROM json_each(?) AS s WHERE inbound.id = s.value ->> 0";

/// [`SETTLE_SQL`]'s parameter.
pub(super) fn settle_list(states: impl Iterator<Item = (InboundId, InboundState)>) -> String {
    let pairs: Vec<(i64, &str)> = states.map(|(id, state)| (id.0, state.as_str())).collect();
    // Plain numbers and state names: serializing cannot fail.
    serde_json::to_string(&pairs).unwrap_or_default()
}

/// Inserts `msg` in `state`; a second copy (same `external_id`) inserts nothing.
pub(super) async fn insert_inbound_row(
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
pub(super) async fn insert_images(
    conn: &mut SqliteConnection,
    id: InboundId,
    images: &[ModelImage],
) -> Result<(), StoreError> {
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

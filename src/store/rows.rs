//! The rows the queries in `store/mod.rs` read, mapped by column name, and
//! how each becomes a domain value. A value that does not parse into its
//! domain type (a group name or source edited by hand) is a `bad_row`, which
//! the caller reports as `StoreError::BadRow` or logs and skips.

use std::time::UNIX_EPOCH;

use sqlx::FromRow;

use super::error::bad_row;
use super::flag::Flag;
use crate::domain::from_unix_us;
use crate::domain::media::Attachment;
use crate::domain::{ChatLine, GroupName, Inbound, InboundId, PermissionDecision, Source};

/// An `inbound` row as a line of context.
#[derive(FromRow)]
pub(super) struct ContextRow {
    sender: String,
    sender_id: Option<String>,
    sent_at_us: Option<i64>,
    reply_to: Option<String>,
    text: String,
    media: Option<String>,
}

impl From<ContextRow> for ChatLine {
    fn from(r: ContextRow) -> ChatLine {
        ChatLine {
            sender: r.sender,
            sender_id: r.sender_id,
            sent_at: r.sent_at_us.map_or(UNIX_EPOCH, from_unix_us),
            reply_to: r.reply_to,
            text: r.text,
            // Context is only named: a line whose media does not read says so.
            media: read_media(r.media.as_deref()).unwrap_or_default(),
        }
    }
}

/// A stored `media` column: NULL is none; JSON that does not read (changed
/// outside pincer) is a bad row.
pub(super) fn read_media(json: Option<&str>) -> Result<Vec<Attachment>, sqlx::Error> {
    match json {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(json).map_err(|e| bad_row(format!("media {e}"))),
    }
}

/// An `inbound` row as a message for the agent.
#[derive(FromRow)]
pub(super) struct InboundRow {
    id: i64,
    group_name: String,
    source: String,
    sender: String,
    sender_id: Option<String>,
    text: String,
    sent_at_us: Option<i64>,
    reply_to: Option<String>,
    /// When pincer stored it (unix µs).
    pub at_us: i64,
    external_id: Option<String>,
    media: Option<String>,
    album: Option<String>,
}

impl InboundRow {
    pub fn message(self) -> Result<(InboundId, Inbound), sqlx::Error> {
        let r = self;
        let group = r.group_name;
        let group = group.parse::<GroupName>().map_err(|e| bad_row(format!("group name {group:?}: {e}")))?;
        let source = Source::parse(&r.source).ok_or_else(|| bad_row(format!("no source {:?}", r.source)))?;
        let mut msg = Inbound::new(group, source, r.sender, r.text);
        msg.sender_id = r.sender_id;
        msg.sent_at = r.sent_at_us.map_or(UNIX_EPOCH, from_unix_us);
        msg.reply_to = r.reply_to;
        msg.external_id = r.external_id;
        msg.media = read_media(r.media.as_deref())?;
        msg.album = r.album;
        Ok((InboundId(r.id), msg))
    }
}

/// A `permission_decisions` row.
#[derive(FromRow)]
pub(super) struct DecisionRow {
    tool_name: String,
    tool_use_id: Option<String>,
    input: String,
    #[sqlx(try_from = "Flag")]
    allowed: bool,
    message: Option<String>,
    decided_by: String,
}

impl From<DecisionRow> for PermissionDecision {
    fn from(r: DecisionRow) -> PermissionDecision {
        PermissionDecision {
            tool_name: r.tool_name,
            tool_use_id: r.tool_use_id,
            input: r.input,
            allowed: r.allowed,
            message: r.message,
            decided_by: r.decided_by,
        }
    }
}

/// A `session_events` row, as `(kind, session_id)`.
#[derive(FromRow)]
pub(super) struct SessionEventRow {
    pub kind: String,
    pub session_id: Option<String>,
}

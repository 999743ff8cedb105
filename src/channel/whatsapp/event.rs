//! The crate's events, read into pincer's terms: an inbound message becomes
//! a [`WaMessage`], a connection event a [`ConnState`]. This is the only
//! place that reads whatsapp-rust's message and event types.

use std::time::SystemTime;

use whatsapp_rust::proto_helpers::MessageExt;
use whatsapp_rust::types::events::{ConnectFailureReason, Event, InboundMessage};
use whatsapp_rust::waproto::whatsapp as wa;
use whatsapp_rust::Jid;

use super::health::ConnState;
use super::inbound::WaMessage;

/// What an event means to pincer.
pub(super) enum Happened<'a> {
    /// Messages to take (those the durability hook has not taken already).
    Messages(Vec<&'a InboundMessage>),
    Connection(ConnState, Option<String>),
    Other,
}

/// Reads one event.
pub(super) fn read(event: &Event) -> Happened<'_> {
    use ConnState::*;
    let conn = |state, detail: Option<String>| Happened::Connection(state, detail);
    match event {
        // With the hook, messages are taken before the ack and come here a second time: skip those.
        Event::Messages(batch) if batch.hook_committed => Happened::Other,
        Event::Messages(batch) => Happened::Messages(batch.messages.iter().collect()),
        Event::Connected(_) => conn(Connected, None),
        Event::Disconnected(d) => conn(Disconnected, Some(format!("{:?}", d.reason))),
        Event::LoggedOut(l) => conn(LoggedOut, Some(format!("{:?}", l.reason))),
        Event::StreamReplaced(_) => conn(Replaced, None),
        Event::TemporaryBan(b) => conn(Banned, Some(format!("{:?}, for {}", b.code, b.expire))),
        Event::ClientOutdated(_) => conn(Outdated, None),
        Event::ConnectFailure(f) => match f.reason {
            // The client retries these itself.
            ConnectFailureReason::InternalServerError | ConnectFailureReason::ServiceUnavailable => {
                conn(Disconnected, Some(format!("{:?}", f.reason)))
            }
            ConnectFailureReason::LoggedOut => conn(LoggedOut, Some(format!("{:?}", f.reason))),
            _ => {
                let said = f.message.as_deref().unwrap_or("");
                conn(LoggedOut, Some(format!("connection refused by WhatsApp: {:?} {said}", f.reason)))
            }
        },
        _ => Happened::Other,
    }
}

/// A message as pincer reads it: its text (or caption), the files it
/// carries, a sticker, place or contact as a line of text; `None` for
/// anything else (reactions, receipts, protocol messages).
pub(super) fn message(m: &InboundMessage) -> Option<WaMessage> {
    let base = m.message.get_base_message();
    let media = super::media::attachments(base);
    let text = match m.message.text_content().or_else(|| m.message.get_caption()) {
        Some(text) => text.to_owned(),
        None => super::media::text_of(base).or_else(|| (!media.is_empty()).then(String::new))?,
    };
    let info = &m.info;
    let source = &info.source;
    let context = context_info(m.message.get_base_message());
    let sender_number = [Some(&source.sender), source.sender_alt.as_ref()]
        .into_iter()
        .flatten()
        .find(|j| j.is_pn())
        .map(|j| j.user.to_string());
    Some(WaMessage {
        id: format!("{}/{}/{}", source.chat, source.sender.to_non_ad(), info.id),
        message_id: info.id.clone(),
        chat: source.chat.to_string(),
        sender: source.sender.to_string(),
        is_group: source.is_group,
        from_me: source.is_from_me,
        sender_number,
        sender_name: if info.push_name.is_empty() { source.sender.user.to_string() } else { info.push_name.clone() },
        text,
        media,
        sent_at: SystemTime::UNIX_EPOCH
            .checked_add(std::time::Duration::from_millis(u64::try_from(info.timestamp.timestamp_millis()).ok()?)),
        mentions: context.map(|c| c.mentioned_jid.iter().filter_map(|j| user_of(j)).collect()).unwrap_or_default(),
        quoted_id: context.and_then(|c| c.stanza_id.clone()),
        quoted_sender: context.and_then(|c| c.participant.as_deref()).and_then(user_of),
        quoted_text: context
            .and_then(|c| c.quoted_message.as_option())
            .and_then(|q| q.text_content().or_else(|| q.get_caption()))
            .map(str::to_owned),
    })
}

/// The context (mentions, quote) of a text or a captioned media message.
fn context_info(m: &wa::Message) -> Option<&wa::ContextInfo> {
    [
        m.extended_text_message.as_option().and_then(|t| t.context_info.as_option()),
        m.image_message.as_option().and_then(|t| t.context_info.as_option()),
        m.video_message.as_option().and_then(|t| t.context_info.as_option()),
        m.document_message.as_option().and_then(|t| t.context_info.as_option()),
    ]
    .into_iter()
    .flatten()
    .next()
}

/// The user part of a JID string (a phone number or a LID), without its device.
fn user_of(jid: &str) -> Option<String> {
    jid.parse::<Jid>().ok().map(|j| j.user.to_string())
}

#[cfg(test)]
mod tests;

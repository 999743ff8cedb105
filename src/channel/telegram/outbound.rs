//! Sending to Telegram: outbox messages rendered from Markdown and split to
//! Telegram's limit, and files as photos, audio or documents with their
//! caption ([`Sender`] is this platform's [`Deliver`]), and the
//! direct posts that are not outbox messages (approval prompts, `/chatid` in
//! a chat that has no group).
//!
//! Every Bot API error is sorted here into what delivery does next: try again
//! (network, 5xx, `RetryAfter`), pause the group (the bot lost the chat),
//! follow the chat (a group became a supergroup), or give the message up.

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardMarkup, InputFile, MessageId, ParseMode};
use teloxide::{ApiError, RequestError};

use super::format::{self, Chunk};
use super::target::{TelegramTarget, TgBot};
use crate::channel::{Deliver, DeliveryError};
use crate::domain::media::{FileKind, OutboundFile};
use crate::domain::{ChatAddress, OutboundKind, Platform};

/// Delivers the Telegram outbox.
pub(super) struct Sender {
    pub bot: TgBot,
    /// For files: no 17 s limit on an upload (delivery bounds it by the
    /// file's size), see `super::target::files_bot`.
    pub files: TgBot,
}

/// One message of an outbox row in the chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Text(Chunk),
    /// A file, with its caption when the caption fits under it.
    File {
        file: OutboundFile,
        caption: Option<Chunk>,
    },
}

/// Telegram's limit on a caption, in UTF-16 code units.
const CAPTION_LIMIT: usize = 1024;

impl Deliver for Sender {
    type Part = Part;
    const PLATFORM: Platform = Platform::Telegram;

    fn parts(&self, kind: OutboundKind, text: &str, file: Option<&OutboundFile>) -> Vec<Part> {
        parts(kind, text, file)
    }

    async fn send(&self, to: &ChatAddress, part: &Part) -> Result<(), DeliveryError> {
        let Some(target) = TelegramTarget::from_address(to) else {
            return Err(DeliveryError::Rejected(format!("{to} is not a Telegram chat id")));
        };
        let sent = match part {
            Part::Text(chunk) => send_chunk(&self.bot, target, chunk, None).await,
            Part::File { file, caption } => {
                // Missing, the upload would fail as I/O, which reads as passing: say it never comes back.
                if let Err(e) = tokio::fs::metadata(&file.path).await {
                    return Err(DeliveryError::Rejected(format!(
                        "pincer's copy of {} cannot be read ({e}); ask the agent to send it again",
                        file.name
                    )));
                }
                send_file(&self.files, target, file, caption.as_ref()).await
            }
        };
        match sent {
            Ok(_) => Ok(()),
            Err(e) => Err(classify(e, target)),
        }
    }
}

/// A row's messages: its text's chunks, or its file with the caption
/// under it (the file, then the text's chunks, when it is too long for that).
fn parts(kind: OutboundKind, text: &str, file: Option<&OutboundFile>) -> Vec<Part> {
    let text = decorate(kind, text);
    let Some(file) = file else {
        return format::render(&text).into_iter().map(Part::Text).collect();
    };
    let mut caption = format::render_with_limit(&text, CAPTION_LIMIT);
    if caption.len() <= 1 {
        return vec![Part::File { file: file.clone(), caption: caption.pop() }];
    }
    let rest = format::render(&text).into_iter().map(Part::Text);
    std::iter::once(Part::File { file: file.clone(), caption: None }).chain(rest).collect()
}

/// Sends one file, once: as a photo, audio or document as it was judged, a
/// photo Telegram will not take as one again as a document, and the caption
/// as plain text if Telegram rejects our HTML.
async fn send_file(
    bot: &TgBot,
    target: TelegramTarget,
    file: &OutboundFile,
    caption: Option<&Chunk>,
) -> Result<MessageId, RequestError> {
    let mut html = true;
    let mut kind = file.kind;
    loop {
        let input = InputFile::file(file.path.clone()).file_name(file.name.clone());
        let text = caption.map(|c| if html { c.html.clone() } else { c.plain.clone() });
        // The three requests are different types with the same setters.
        macro_rules! send {
            ($request:expr) => {{
                let mut request = $request;
                if let Some(text) = text {
                    request = request.caption(text);
                    if html {
                        request = request.parse_mode(ParseMode::Html);
                    }
                }
                if let Some(thread) = target.thread() {
                    request = request.message_thread_id(thread);
                }
                request.await.map(|m| m.id)
            }};
        }
        let chat = ChatId(target.chat_id);
        let sent = match kind {
            FileKind::Photo => send!(bot.send_photo(chat, input)),
            FileKind::Audio => send!(bot.send_audio(chat, input)),
            FileKind::Document => send!(bot.send_document(chat, input)),
        };
        match sent {
            Err(RequestError::Api(ApiError::CantParseEntities(why))) if html => {
                tracing::warn!(chat_id = target.chat_id, %why, "Telegram rejected a caption's formatting; sending it plain");
                html = false;
            }
            Err(RequestError::Api(ref e)) if kind == FileKind::Photo && is_no_photo(e) => {
                tracing::info!(chat_id = target.chat_id, file = %file.name, %e, "Telegram took no photo; sending it as a document");
                kind = FileKind::Document;
            }
            other => return other,
        }
    }
}

/// Telegram's words for an image it will not show as a photo (its own
/// checks are stricter than pincer's guess).
fn is_no_photo(e: &ApiError) -> bool {
    match e {
        ApiError::ImageProcessFailed => true,
        ApiError::Unknown(text) => text.contains("PHOTO_") || text.contains("IMAGE_PROCESS_FAILED"),
        _ => false,
    }
}

/// How a kind of message looks in the chat.
fn decorate(kind: OutboundKind, text: &str) -> String {
    match kind {
        OutboundKind::Reply | OutboundKind::Answer => text.to_owned(),
        OutboundKind::Error => format!("⚠️ {text}"),
        OutboundKind::Notice => format!("ℹ️ {text}"),
    }
}

/// What delivery does about a failed send.
fn classify(e: RequestError, target: TelegramTarget) -> DeliveryError {
    match e {
        RequestError::MigrateToChatId(to) => DeliveryError::Moved(TelegramTarget { chat_id: to.0, ..target }.address()),
        RequestError::RetryAfter(after) => {
            DeliveryError::Transient { why: e.to_string(), retry_after: Some(after.duration()) }
        }
        RequestError::Network(_) | RequestError::Io(_) => DeliveryError::transient(e.to_string()),
        ref gone if chat_is_gone(gone) => DeliveryError::ChatGone(e.to_string()),
        // teloxide reports an answer it cannot parse (a proxy's HTML error
        // page for a 502) as InvalidJson: a passing failure, not ours.
        RequestError::InvalidJson { .. } => DeliveryError::transient(e.to_string()),
        RequestError::Api(ApiError::Unknown(ref text)) if is_server_side(text) => {
            DeliveryError::transient(e.to_string())
        }
        other => DeliveryError::Rejected(other.to_string()),
    }
}

/// Error descriptions of Telegram's own trouble (it answers 5xx with JSON too).
fn is_server_side(description: &str) -> bool {
    ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout"]
        .iter()
        .any(|s| description.contains(s))
}

/// Posts `markdown` now, outside the outbox (a prompt with buttons; a chat
/// with no group). Returns the id of the last message sent.
pub(super) async fn post(
    bot: &TgBot,
    target: TelegramTarget,
    markdown: &str,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<Option<MessageId>, RequestError> {
    let chunks = format::render(markdown);
    let count = chunks.len();
    let mut last = None;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let markup = if i + 1 == count { keyboard.clone() } else { None };
        last = Some(send_chunk(bot, target, &chunk, markup).await?);
    }
    Ok(last)
}

/// Sends one chunk, once; as plain text if Telegram rejects our HTML.
pub(super) async fn send_chunk(
    bot: &TgBot,
    target: TelegramTarget,
    chunk: &Chunk,
    keyboard: Option<InlineKeyboardMarkup>,
) -> Result<MessageId, RequestError> {
    let mut html = true;
    loop {
        let text = if html { &chunk.html } else { &chunk.plain };
        let mut request = bot.send_message(ChatId(target.chat_id), text.clone());
        if html {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(thread) = target.thread() {
            request = request.message_thread_id(thread);
        }
        if let Some(markup) = keyboard.clone() {
            request = request.reply_markup(markup);
        }
        match request.await {
            Ok(message) => return Ok(message.id),
            Err(RequestError::Api(ApiError::CantParseEntities(why))) if html => {
                // Our rendering should never be rejected; if it is, the words still matter more.
                tracing::warn!(chat_id = target.chat_id, %why, "Telegram rejected the formatting; sending plain text");
                html = false;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether an error means the bot can no longer post in the chat.
fn chat_is_gone(e: &RequestError) -> bool {
    match e {
        RequestError::Api(api) => match api {
            ApiError::BotBlocked
            | ApiError::BotKicked
            | ApiError::BotKickedFromSupergroup
            | ApiError::BotKickedFromChannel
            | ApiError::ChatNotFound
            | ApiError::GroupDeactivated
            | ApiError::UserDeactivated
            | ApiError::NotEnoughRightsToPostMessages => true,
            ApiError::Unknown(text) => text.starts_with("Forbidden:"),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: TelegramTarget = TelegramTarget { chat_id: -5, topic_id: Some(7) };

    fn kind(e: RequestError) -> &'static str {
        match classify(e, AT) {
            DeliveryError::Transient { .. } => "transient",
            DeliveryError::ChatGone(_) => "gone",
            DeliveryError::Moved(_) => "moved",
            DeliveryError::Rejected(_) => "rejected",
        }
    }

    #[test]
    fn lost_chats_are_told_apart_from_passing_trouble() {
        assert_eq!(kind(RequestError::Api(ApiError::BotBlocked)), "gone");
        assert_eq!(kind(RequestError::Api(ApiError::BotKickedFromSupergroup)), "gone");
        assert_eq!(
            kind(RequestError::Api(ApiError::Unknown("Forbidden: bot was kicked from the group chat".into()))),
            "gone"
        );
        assert_eq!(kind(RequestError::Api(ApiError::MessageIsTooLong)), "rejected");
        assert_eq!(kind(RequestError::Api(ApiError::Unknown("Bad Gateway".into()))), "transient");
        assert_eq!(kind(RequestError::Io(std::io::Error::other("reset").into())), "transient");
        let after = RequestError::RetryAfter(teloxide::types::Seconds::from_seconds(3));
        assert_eq!(
            classify(after, AT),
            DeliveryError::Transient {
                why: "Retry after 3s".into(),
                retry_after: Some(std::time::Duration::from_secs(3))
            }
        );
    }

    #[test]
    fn a_migrated_chat_keeps_its_topic() {
        let moved = classify(RequestError::MigrateToChatId(ChatId(-1_005)), AT);
        assert_eq!(moved, DeliveryError::Moved(ChatAddress::telegram(-1_005, Some(7))));
    }

    #[test]
    fn a_file_carries_its_caption_or_goes_before_a_long_one() {
        let file = OutboundFile {
            path: "/x/1-a.png".into(),
            name: "a.png".into(),
            kind: FileKind::Photo,
            bytes: 9,
            from: "a.png".into(),
        };
        let short = parts(OutboundKind::Reply, "the **chart**", Some(&file));
        match short.as_slice() {
            [Part::File { caption: Some(c), .. }] => assert_eq!(c.html, "the <b>chart</b>"),
            other => panic!("one file with its caption: {other:?}"),
        }
        assert!(matches!(parts(OutboundKind::Reply, "", Some(&file)).as_slice(), [Part::File { caption: None, .. }]));
        let long = "word ".repeat(400);
        match parts(OutboundKind::Reply, &long, Some(&file)).as_slice() {
            [Part::File { caption: None, .. }, Part::Text(text)] => assert_eq!(text.plain, long.trim()),
            other => panic!("the file, then the text: {other:?}"),
        }
        assert!(matches!(parts(OutboundKind::Reply, "hi", None).as_slice(), [Part::Text(_)]));
    }

    #[test]
    fn notices_and_errors_are_marked_and_replies_are_not() {
        assert_eq!(decorate(OutboundKind::Reply, "hi"), "hi");
        assert_eq!(decorate(OutboundKind::Answer, "Session: live"), "Session: live");
        assert_eq!(decorate(OutboundKind::Error, "x"), "⚠️ x");
        assert_eq!(decorate(OutboundKind::Notice, "x"), "ℹ️ x");
    }
}

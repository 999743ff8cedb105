//! What a Telegram message carries besides its text, as pincer's
//! [`Attachment`]s (photos, files, voice notes, audio, video) or as a line
//! of text (a sticker, a place, a contact, a poll); and [`Files`], which
//! downloads an attachment through the Bot API (`getFile`, then the file
//! URL), at most [`fetch_limit`] bytes, counted as they arrive, within the
//! time its size needs on a slow link (`delivery::files::transfer_timeout`;
//! the preparer bounds the tries).

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use teloxide::net::Download;
use teloxide::prelude::*;
use teloxide::types::{FileId, FileMeta, Message};
use teloxide::{ApiError, RequestError};

use crate::channel::delivery::files::transfer_timeout;
use crate::domain::media::{place_text, Attachment, MediaKind};
use crate::media::{Capped, Fetch, FetchError};

/// How much of a poll's or a contact's words the agent is shown.
const LINE_CHARS: usize = 300;

/// The files `msg` carries, in the order the agent is shown them.
pub(super) fn attachments(msg: &Message) -> Vec<Attachment> {
    let mut found = Vec::new();
    if let Some(sizes) = msg.photo() {
        // The largest size Telegram made: the one a person sees when they open it.
        if let Some(best) = sizes.iter().max_by_key(|p| u64::from(p.width) * u64::from(p.height)) {
            let mut photo = with_file(MediaKind::Photo, &best.file).with_mime(Some("image/jpeg"));
            (photo.width, photo.height) = (Some(best.width), Some(best.height));
            found.push(photo);
        }
    }
    if let Some(doc) = msg.document() {
        let mime = doc.mime_type.as_ref().map(|m| m.essence_str());
        let kind = MediaKind::of_file(mime);
        found.push(described(kind, &doc.file, doc.file_name.as_deref(), mime, None));
    }
    if let Some(voice) = msg.voice() {
        let mime = voice.mime_type.as_ref().map(|m| m.essence_str()).or(Some("audio/ogg"));
        found.push(described(MediaKind::Voice, &voice.file, None, mime, Some(voice.duration.seconds())));
    }
    if let Some(audio) = msg.audio() {
        let mime = audio.mime_type.as_ref().map(|m| m.essence_str());
        let seconds = Some(audio.duration.seconds());
        found.push(described(MediaKind::Audio, &audio.file, audio.file_name.as_deref(), mime, seconds));
    }
    if let Some(video) = msg.video() {
        let mime = video.mime_type.as_ref().map(|m| m.essence_str());
        let seconds = Some(video.duration.seconds());
        found.push(described(MediaKind::Video, &video.file, video.file_name.as_deref(), mime, seconds));
    }
    if let Some(note) = msg.video_note() {
        found.push(described(MediaKind::Video, &note.file, None, Some("video/mp4"), Some(note.duration.seconds())));
    }
    if let Some(animation) = msg.animation() {
        let mime = animation.mime_type.as_ref().map(|m| m.essence_str());
        found.push(described(MediaKind::Video, &animation.file, animation.file_name.as_deref(), mime, None));
    }
    found
}

/// What a message without a file still says: a sticker, a place, a
/// contact or a poll, as one line for the agent.
pub(super) fn text_of(msg: &Message) -> Option<String> {
    if let Some(sticker) = msg.sticker() {
        return Some(match &sticker.emoji {
            Some(emoji) => format!("[sticker {emoji}]"),
            None => "[sticker]".to_owned(),
        });
    }
    if let Some(venue) = msg.venue() {
        let name = format!("{}, {}", venue.title, venue.address);
        let name: String = name.chars().take(LINE_CHARS).collect();
        return Some(place_text(Some(&name), venue.location.latitude, venue.location.longitude));
    }
    if let Some(place) = msg.location() {
        return Some(place_text(None, place.latitude, place.longitude));
    }
    if let Some(contact) = msg.contact() {
        let name = [Some(contact.first_name.as_str()), contact.last_name.as_deref()].into_iter().flatten();
        let line = format!("[contact: {}, {}]", name.collect::<Vec<_>>().join(" "), contact.phone_number);
        return Some(line.chars().take(LINE_CHARS).collect());
    }
    if let Some(poll) = msg.poll() {
        let options: Vec<&str> = poll.options.iter().map(|o| o.text.as_str()).collect();
        let line = format!("[poll: {} — {}]", poll.question, options.join(" / "));
        return Some(line.chars().take(LINE_CHARS).collect());
    }
    None
}

/// A file as Telegram described it: its name, type and length, when it gave them.
fn described(
    kind: MediaKind,
    file: &FileMeta,
    name: Option<&str>,
    mime: Option<&str>,
    seconds: Option<u32>,
) -> Attachment {
    let mut attachment = with_file(kind, file).with_name(name).with_mime(mime);
    attachment.duration = seconds.map(|s| std::time::Duration::from_secs(s.into()));
    attachment
}

fn with_file(kind: MediaKind, file: &FileMeta) -> Attachment {
    let mut attachment = Attachment::bounded(kind, file.id.0.clone());
    // Telegram leaves the size out at times (teloxide then reads u32::MAX).
    attachment.size = (file.size != u32::MAX).then_some(u64::from(file.size));
    attachment
}

/// Downloads Telegram files for the preparer. Not rate-limited: Telegram
/// limits what a bot sends, not what it fetches.
pub struct Files {
    /// The bot as configured; the download itself goes through
    /// [`super::target::files_bot`], without teloxide's 17 s limit.
    pub bot: Bot,
}

impl Fetch for Files {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        Box::pin(async move {
            let max = into.limit();
            let file = self.bot.get_file(FileId(attachment.fetch.clone())).await.map_err(|e| match e {
                // "Bad Request: file is too big": over the 20 MB a bot may fetch.
                RequestError::Api(ApiError::Unknown(ref text)) if text.contains("too big") => {
                    FetchError::TooLarge { limit: max }
                }
                RequestError::Api(api) => FetchError::Gone(api.to_string()),
                other => FetchError::Transient(other.to_string()),
            })?;
            let announced = (file.meta.size != u32::MAX).then_some(u64::from(file.meta.size)).or(attachment.size);
            if announced.is_some_and(|size| size > max) {
                return Err(FetchError::TooLarge { limit: max });
            }
            // A size Telegram did not give is taken as the most it may be.
            let limit = transfer_timeout(announced.unwrap_or(max).min(max));
            let bot = super::target::files_bot(&self.bot);
            tokio::time::timeout(limit, download(&bot, &file.path, into)).await.unwrap_or_else(|_| {
                Err(FetchError::Transient(format!(
                    "the download did not finish within {}",
                    humantime::format_duration(limit)
                )))
            })
        })
    }
}

/// The file at `path` on Telegram's file server, at most `max` bytes,
/// counted as they arrive.
/// Streams the file into `into`, which refuses the first byte past its limit.
async fn download(bot: &Bot, path: &str, mut into: Capped) -> Result<Capped, FetchError> {
    let mut stream = bot.download_file_stream(path);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| match e.status() {
            Some(s) if s.is_client_error() => FetchError::Gone(format!("the file server answered {s}")),
            _ => FetchError::Transient(e.to_string()),
        })?;
        into.push(&chunk)?;
    }
    Ok(into)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A group message from Telegram's JSON with `extra` fields.
    fn message(extra: serde_json::Value) -> Message {
        let mut msg = json!({
            "message_id": 5, "date": 1_700_000_000,
            "chat": { "id": -1, "type": "group", "title": "Family" },
            "from": { "id": 7, "is_bot": false, "first_name": "Ann" },
        });
        for (k, v) in extra.as_object().unwrap() {
            msg[k.as_str()] = v.clone();
        }
        serde_json::from_value(msg).expect("a Telegram message")
    }

    #[test]
    fn places_contacts_polls_and_stickers_read_as_one_line() {
        let place = message(json!({ "location": { "latitude": 52.52, "longitude": 13.405 } }));
        assert_eq!(text_of(&place).unwrap(), "[location: 52.520000, 13.405000]");
        let contact =
            message(json!({ "contact": { "phone_number": "+49 30 1234", "first_name": "Bo", "last_name": "Li" } }));
        assert_eq!(text_of(&contact).unwrap(), "[contact: Bo Li, +49 30 1234]");
        let poll = message(json!({ "poll": {
            "id": "p", "question": "Pizza?", "options": [{ "text": "yes", "voter_count": 0 }, { "text": "no", "voter_count": 0 }],
            "total_voter_count": 0, "is_closed": false, "is_anonymous": true, "type": "regular",
            "allows_multiple_answers": false } }));
        assert_eq!(text_of(&poll).unwrap(), "[poll: Pizza? — yes / no]");
        let sticker = message(json!({ "sticker": {
            "file_id": "s", "file_unique_id": "s", "type": "regular", "width": 512, "height": 512,
            "is_animated": false, "is_video": false, "emoji": "👍" } }));
        assert_eq!(text_of(&sticker).unwrap(), "[sticker 👍]");
        assert!(attachments(&sticker).is_empty(), "a sticker is not fetched");
    }

    #[test]
    fn the_largest_photo_size_is_taken_and_an_image_document_is_an_image() {
        let photo = message(json!({ "photo": [
            { "file_id": "small", "file_unique_id": "a", "file_size": 900, "width": 90, "height": 60 },
            { "file_id": "large", "file_unique_id": "b", "file_size": 90_000, "width": 1280, "height": 853 },
        ], "caption": "receipt" }));
        let found = attachments(&photo);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].kind, found[0].fetch.as_str(), found[0].size), (MediaKind::Photo, "large", Some(90_000)));
        let doc = message(json!({ "document": {
            "file_id": "d", "file_unique_id": "d", "file_name": "chart.png", "mime_type": "image/png" } }));
        let found = attachments(&doc);
        assert_eq!(found[0].kind, MediaKind::Image);
        assert_eq!(found[0].file_name.as_deref(), Some("chart.png"));
        assert_eq!(found[0].size, None, "a size Telegram left out is unknown, not 4 GB");
    }
}

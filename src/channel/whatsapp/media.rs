//! What a WhatsApp message carries besides its text, as pincer's
//! [`Attachment`]s (images, voice notes, audio, video, documents) or as a
//! line of text (a sticker, a place, a contact); and [`WaFiles`], which
//! downloads an attachment through the client, streamed into the
//! preparer's sink, which stops it past [`fetch_limit`] bytes, within the
//! time its announced size needs on a slow link
//! (`delivery::files::transfer_timeout`; the preparer bounds the tries).
//!
//! A WhatsApp file is fetched with what its message said (the CDN path, the
//! media key and the hashes the crate checks the bytes against), kept as the
//! attachment's `fetch` in a [`MediaRef`], so a restart can still fetch it.
//!
//! [`fetch_limit`]: crate::domain::media::fetch_limit

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use futures_util::future::BoxFuture;
use whatsapp_rust::waproto::whatsapp as wa;

use super::client::{MediaRef, WaClient, WaError, WaMediaKind};
use crate::channel::delivery::files::transfer_timeout;
use crate::domain::media::{place_text, Attachment, MediaKind};
use crate::media::{Capped, Fetch, FetchError};

/// How much of a contact's words the agent is shown.
const LINE_CHARS: usize = 300;

/// The files `msg` carries (its base message, unwrapped from WhatsApp's
/// envelopes), in the order the agent is shown them. A file the message
/// gives no way to fetch is left out: not worth a line that promises a file.
pub(super) fn attachments(msg: &wa::Message) -> Vec<Attachment> {
    let mut found = Vec::new();
    if let Some(image) = msg.image_message.as_option() {
        if let Some(photo) = attachment(MediaKind::Photo, WaMediaKind::Image, cdn!(image)) {
            let mut photo = photo.with_mime(image.mimetype.as_deref());
            (photo.width, photo.height) = (image.width, image.height);
            found.push(photo);
        }
    }
    if let Some(doc) = msg.document_message.as_option() {
        let mime = doc.mimetype.as_deref();
        if let Some(file) = attachment(MediaKind::of_file(mime), WaMediaKind::Document, cdn!(doc)) {
            found.push(file.with_mime(mime).with_name(doc.file_name.as_deref().or(doc.title.as_deref())));
        }
    }
    if let Some(audio) = msg.audio_message.as_option() {
        let kind = if audio.ptt == Some(true) { MediaKind::Voice } else { MediaKind::Audio };
        if let Some(file) = attachment(kind, WaMediaKind::Audio, cdn!(audio)) {
            let mut file = file.with_mime(audio.mimetype.as_deref().map(|m| m.split(';').next().unwrap_or(m)));
            file.duration = audio.seconds.map(|s| std::time::Duration::from_secs(s.into()));
            found.push(file);
        }
    }
    if let Some(video) = msg.video_message.as_option() {
        if let Some(file) = attachment(MediaKind::Video, WaMediaKind::Video, cdn!(video)) {
            let mut file = file.with_mime(video.mimetype.as_deref());
            file.duration = video.seconds.map(|s| std::time::Duration::from_secs(s.into()));
            found.push(file);
        }
    }
    found
}

/// What a message without a file still says: a sticker, a place or a
/// contact, as one line for the agent.
pub(super) fn text_of(msg: &wa::Message) -> Option<String> {
    if let Some(sticker) = msg.sticker_message.as_option() {
        return Some(match sticker.emojis.as_deref().filter(|e| !e.is_empty()) {
            Some(emoji) => format!("[sticker {}]", emoji.chars().take(8).collect::<String>()),
            None => "[sticker]".to_owned(),
        });
    }
    if let Some(place) = msg.location_message.as_option() {
        let (latitude, longitude) = (place.degrees_latitude?, place.degrees_longitude?);
        let name = [place.name.as_deref(), place.address.as_deref()].into_iter().flatten().collect::<Vec<_>>();
        let name: String = name.join(", ").chars().take(LINE_CHARS).collect();
        return Some(place_text((!name.is_empty()).then_some(name.as_str()), latitude, longitude));
    }
    if let Some(contact) = msg.contact_message.as_option() {
        let name = contact.display_name.as_deref().unwrap_or("someone");
        // The number is in the vCard's TEL line ("TEL;type=CELL;waid=49…:+49 …").
        let number = contact.vcard.as_deref().and_then(|card| {
            card.lines().find(|l| l.to_ascii_uppercase().starts_with("TEL")).and_then(|l| l.rsplit_once(':'))
        });
        let line = match number {
            Some((_, number)) => format!("[contact: {name}, {}]", number.trim()),
            None => format!("[contact: {name}]"),
        };
        return Some(line.chars().take(LINE_CHARS).collect());
    }
    None
}

/// Where a media message's file lies and how it is checked: the fields
/// every kind of WhatsApp media message has alike.
struct Cdn<'a> {
    path: &'a Option<String>,
    key: &'a Option<Vec<u8>>,
    sha: &'a Option<Vec<u8>>,
    enc: &'a Option<Vec<u8>>,
    length: Option<u64>,
}

/// The [`Cdn`] fields of an image, document, audio or video message (four
/// types with the same field names).
macro_rules! cdn {
    ($m:expr) => {
        Cdn {
            path: &$m.direct_path,
            key: &$m.media_key,
            sha: &$m.file_sha256,
            enc: &$m.file_enc_sha256,
            length: $m.file_length,
        }
    };
}
use cdn;

/// An attachment whose `fetch` is its [`MediaRef`]; `None` without a path
/// or a key, or with a path that is not WhatsApp's.
fn attachment(kind: MediaKind, wa_kind: WaMediaKind, cdn: Cdn<'_>) -> Option<Attachment> {
    let (path, key) = (cdn.path.as_ref()?, cdn.key.as_ref()?);
    // A path is WhatsApp's, never a URL or a place of the sender's choosing.
    if !path.starts_with('/') || path.contains("..") || path.len() > 2048 {
        return None;
    }
    let fetch = MediaRef {
        kind: wa_kind,
        direct_path: path.clone(),
        media_key: STANDARD.encode(key),
        file_sha256: STANDARD.encode(cdn.sha.as_deref().unwrap_or_default()),
        file_enc_sha256: STANDARD.encode(cdn.enc.as_deref().unwrap_or_default()),
        length: cdn.length.unwrap_or(0),
    };
    let mut attachment = Attachment::bounded(kind, serde_json::to_string(&fetch).ok()?);
    attachment.size = cdn.length;
    Some(attachment)
}

/// Downloads WhatsApp files for the preparer, through the linked device.
pub struct WaFiles<C> {
    pub client: Arc<C>,
}

impl<C: WaClient> Fetch for WaFiles<C> {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>> {
        Box::pin(async move {
            let media: MediaRef = serde_json::from_str(&attachment.fetch)
                .map_err(|e| FetchError::Gone(format!("the message did not say how to fetch it: {e}")))?;
            if media.length > into.limit() {
                return Err(FetchError::TooLarge { limit: into.limit() });
            }
            // The sender's length may lie: the sink stops the download at the
            // limit. A length the message left out is taken as the most it may be.
            let max = into.limit();
            let announced = if media.length == 0 { max } else { media.length.min(max) };
            let limit = transfer_timeout(announced);
            let fetched = tokio::time::timeout(limit, self.client.download(&media, into)).await;
            let fetched = fetched.unwrap_or_else(|_| {
                Err(WaError::Other(format!("the download did not finish within {}", humantime::format_duration(limit))))
            });
            fetched.map_err(|e| match e {
                WaError::Rejected(why) => FetchError::Gone(why),
                WaError::TooLarge { limit } => FetchError::TooLarge { limit },
                other => FetchError::Transient(other.to_string()),
            })
        })
    }
}

#[cfg(test)]
mod tests;

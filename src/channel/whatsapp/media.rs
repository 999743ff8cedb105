//! What a WhatsApp message carries besides its text, as pincer's
//! [`Attachment`]s (images, voice notes, audio, video, documents) or as a
//! line of text (a sticker, a place, a contact); and [`WaFiles`], which
//! downloads an attachment through the client, at most [`fetch_limit`] bytes.
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
use crate::domain::media::{place_text, Attachment, MediaKind};
use crate::media::{Fetch, FetchError};

/// How much of a contact's words the agent is shown.
const LINE_CHARS: usize = 300;

/// The files `msg` carries (its base message, unwrapped from WhatsApp's
/// envelopes), in the order the agent is shown them.
pub(super) fn attachments(msg: &wa::Message) -> Vec<Attachment> {
    let mut found = Vec::new();
    if let Some(image) = msg.image_message.as_option() {
        let cdn = cdn(WaMediaKind::Image, &image.direct_path, &image.media_key, &image.file_sha256);
        let mut photo = attachment(MediaKind::Photo, cdn, &image.file_enc_sha256, image.file_length)
            .with_mime(image.mimetype.as_deref());
        (photo.width, photo.height) = (image.width, image.height);
        found.extend(photo.ready());
    }
    if let Some(doc) = msg.document_message.as_option() {
        let mime = doc.mimetype.as_deref();
        let kind = MediaKind::of_file(mime);
        let cdn = cdn(WaMediaKind::Document, &doc.direct_path, &doc.media_key, &doc.file_sha256);
        let file = attachment(kind, cdn, &doc.file_enc_sha256, doc.file_length);
        found.extend(file.with_mime(mime).with_name(doc.file_name.as_deref().or(doc.title.as_deref())).ready());
    }
    if let Some(audio) = msg.audio_message.as_option() {
        let kind = if audio.ptt == Some(true) { MediaKind::Voice } else { MediaKind::Audio };
        let cdn = cdn(WaMediaKind::Audio, &audio.direct_path, &audio.media_key, &audio.file_sha256);
        let mut file = attachment(kind, cdn, &audio.file_enc_sha256, audio.file_length)
            .with_mime(audio.mimetype.as_deref().map(|m| m.split(';').next().unwrap_or(m)));
        file.duration = audio.seconds.map(|s| std::time::Duration::from_secs(s.into()));
        found.extend(file.ready());
    }
    if let Some(video) = msg.video_message.as_option() {
        let cdn = cdn(WaMediaKind::Video, &video.direct_path, &video.media_key, &video.file_sha256);
        let mut file = attachment(MediaKind::Video, cdn, &video.file_enc_sha256, video.file_length)
            .with_mime(video.mimetype.as_deref());
        file.duration = video.seconds.map(|s| std::time::Duration::from_secs(s.into()));
        found.extend(file.ready());
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

/// The CDN half of a [`MediaRef`]; `None` without a path or key (nothing to fetch).
fn cdn(
    kind: WaMediaKind,
    path: &Option<String>,
    key: &Option<Vec<u8>>,
    sha: &Option<Vec<u8>>,
) -> Option<(WaMediaKind, String, String, String)> {
    let (path, key) = (path.as_ref()?, key.as_ref()?);
    // A path is WhatsApp's, never a URL or a place of the sender's choosing.
    if !path.starts_with('/') || path.contains("..") || path.len() > 2048 {
        return None;
    }
    Some((kind, path.clone(), STANDARD.encode(key), STANDARD.encode(sha.as_deref().unwrap_or_default())))
}

/// An attachment whose `fetch` is its [`MediaRef`] (empty when the message
/// gave nothing to fetch it with: it is then named, not fetched).
fn attachment(
    kind: MediaKind,
    cdn: Option<(WaMediaKind, String, String, String)>,
    enc: &Option<Vec<u8>>,
    length: Option<u64>,
) -> Attachment {
    let fetch = cdn.map(|(wa_kind, direct_path, media_key, file_sha256)| MediaRef {
        kind: wa_kind,
        direct_path,
        media_key,
        file_sha256,
        file_enc_sha256: STANDARD.encode(enc.as_deref().unwrap_or_default()),
        length: length.unwrap_or(0),
    });
    let mut attachment =
        Attachment::bounded(kind, fetch.map(|f| serde_json::to_string(&f).unwrap_or_default()).unwrap_or_default());
    attachment.size = length;
    attachment
}

trait Ready {
    fn ready(self) -> Option<Attachment>;
}

impl Ready for Attachment {
    /// Kept only when it can be fetched: one without a way to fetch it is
    /// not worth a line that promises a file.
    fn ready(self) -> Option<Attachment> {
        (!self.fetch.is_empty()).then_some(self)
    }
}

/// Downloads WhatsApp files for the preparer, through the linked device.
pub struct WaFiles<C> {
    pub client: Arc<C>,
}

impl<C: WaClient> Fetch for WaFiles<C> {
    fn fetch<'a>(&'a self, attachment: &'a Attachment, max: u64) -> BoxFuture<'a, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            let media: MediaRef = serde_json::from_str(&attachment.fetch)
                .map_err(|e| FetchError::Gone(format!("the message did not say how to fetch it: {e}")))?;
            if media.length > max {
                return Err(FetchError::TooLarge { limit: max });
            }
            let bytes = self.client.download(&media).await.map_err(|e| match e {
                WaError::Rejected(why) => FetchError::Gone(why),
                other => FetchError::Transient(other.to_string()),
            })?;
            if bytes.len() as u64 > max {
                return Err(FetchError::TooLarge { limit: max });
            }
            Ok(bytes)
        })
    }
}

#[cfg(test)]
mod tests;

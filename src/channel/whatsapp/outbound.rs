//! Sending the WhatsApp outbox: each message rendered from Markdown to
//! WhatsApp's markup and split ([`super::format`]), a file uploaded with its
//! caption, each part sent and its
//! message id remembered, so a reply quoting it engages the agent and the
//! bot never answers its own posts.

use std::sync::Arc;

use super::client::{WaClient, WaError};
use super::format;
use crate::channel::{Deliver, DeliveryError, Directory};
use crate::domain::media::{FileKind, OutboundFile};
use crate::domain::{ChatAddress, OutboundKind, Platform};

/// Delivers the WhatsApp outbox.
pub(super) struct Sender<C> {
    pub client: Arc<C>,
    pub directory: Directory,
}

/// One message of an outbox row in the chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Text(String),
    /// A file, with its caption when the caption fits under it.
    File {
        file: OutboundFile,
        caption: Option<String>,
    },
}

/// How long a caption pincer puts under a file (WhatsApp's apps cut longer ones).
const CAPTION_LIMIT: usize = 1024;

impl<C: WaClient> Deliver for Sender<C> {
    type Part = Part;
    const PLATFORM: Platform = Platform::WhatsApp;

    fn parts(&self, kind: OutboundKind, text: &str, file: Option<&OutboundFile>) -> Vec<Part> {
        parts(kind, text, file)
    }

    async fn send(&self, to: &ChatAddress, part: &Part) -> Result<(), DeliveryError> {
        let sent = match part {
            Part::Text(text) => self.client.send_text(&to.chat, text).await,
            Part::File { file, caption } => self.client.send_file(&to.chat, file, caption.as_deref()).await,
        };
        let id = sent.map_err(classify)?;
        if let Err(e) = self.directory.record_sent(to, &id).await {
            // The message is in the chat; only recognising replies to it is lost.
            tracing::error!(chat = %to, %e, "cannot remember a sent WhatsApp message id");
        }
        Ok(())
    }
}

/// A row's messages: its text's parts, or its file with the caption under
/// it (the file, then the text's parts, when the caption is too long or the
/// file is audio, which WhatsApp shows no caption under).
fn parts(kind: OutboundKind, text: &str, file: Option<&OutboundFile>) -> Vec<Part> {
    let text = decorate(kind, text);
    let Some(file) = file else {
        return format::render(&text).into_iter().map(Part::Text).collect();
    };
    let mut caption = format::render_with_limit(&text, CAPTION_LIMIT);
    if caption.len() <= 1 && (file.kind != FileKind::Audio || caption.is_empty()) {
        return vec![Part::File { file: file.clone(), caption: caption.pop() }];
    }
    let rest = format::render(&text).into_iter().map(Part::Text);
    std::iter::once(Part::File { file: file.clone(), caption: None }).chain(rest).collect()
}

/// How a kind of message looks in the chat.
fn decorate(kind: OutboundKind, text: &str) -> String {
    match kind {
        OutboundKind::Reply | OutboundKind::Answer => text.to_owned(),
        OutboundKind::Error => format!("⚠️ {text}"),
        OutboundKind::Notice => format!("ℹ️ {text}"),
    }
}

/// Not connected (or logged out, banned...) is passing: the reply waits for
/// the connection to come back, and goes out then.
fn classify(e: WaError) -> DeliveryError {
    match e {
        WaError::Rejected(why) => DeliveryError::Rejected(why),
        other => DeliveryError::transient(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_waited_out_and_a_bad_request_is_given_up() {
        assert!(matches!(classify(WaError::NotConnected("x".into())), DeliveryError::Transient { .. }));
        assert!(matches!(classify(WaError::Other("timeout".into())), DeliveryError::Transient { .. }));
        assert!(matches!(classify(WaError::Rejected("bad jid".into())), DeliveryError::Rejected(_)));
        assert_eq!(decorate(OutboundKind::Notice, "x"), "ℹ️ x");
    }

    #[test]
    fn a_file_carries_its_caption_unless_it_is_audio_or_the_caption_is_long() {
        let file = |kind| OutboundFile { path: "/x/1-a".into(), name: "a".into(), kind, bytes: 1, from: "a".into() };
        let photo = file(FileKind::Photo);
        assert_eq!(
            parts(OutboundKind::Reply, "the *chart*", Some(&photo)),
            [Part::File { file: photo.clone(), caption: Some("the _chart_".into()) }]
        );
        let audio = file(FileKind::Audio);
        assert_eq!(
            parts(OutboundKind::Reply, "listen", Some(&audio)),
            [Part::File { file: audio.clone(), caption: None }, Part::Text("listen".into())]
        );
        assert_eq!(parts(OutboundKind::Reply, "", Some(&audio)), [Part::File { file: audio, caption: None }]);
        let long = "word ".repeat(300);
        let split = parts(OutboundKind::Reply, &long, Some(&photo));
        assert_eq!(split.len(), 2, "the file, then the text: {split:?}");
        assert_eq!(split[0], Part::File { file: photo, caption: None });
    }
}

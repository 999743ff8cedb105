//! Sending the WhatsApp outbox: each message rendered from Markdown to
//! WhatsApp's markup and split ([`super::format`]), each part sent and its
//! message id remembered, so a reply quoting it engages the agent and the
//! bot never answers its own posts.

use std::sync::Arc;

use super::client::{WaClient, WaError};
use super::format;
use crate::channel::{Deliver, DeliveryError, Directory};
use crate::domain::{ChatAddress, OutboundKind, Platform};

/// Delivers the WhatsApp outbox.
pub(super) struct Sender<C> {
    pub client: Arc<C>,
    pub directory: Directory,
}

impl<C: WaClient> Deliver for Sender<C> {
    type Part = String;
    const PLATFORM: Platform = Platform::WhatsApp;

    fn parts(&self, kind: OutboundKind, text: &str, _file: Option<&crate::domain::media::OutboundFile>) -> Vec<String> {
        format::render(&decorate(kind, text))
    }

    async fn send(&self, to: &ChatAddress, part: &String) -> Result<(), DeliveryError> {
        let id = self.client.send_text(&to.chat, part).await.map_err(classify)?;
        if let Err(e) = self.directory.record_sent(to, &id).await {
            // The message is in the chat; only recognising replies to it is lost.
            tracing::error!(chat = %to, %e, "cannot remember a sent WhatsApp message id");
        }
        Ok(())
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
}

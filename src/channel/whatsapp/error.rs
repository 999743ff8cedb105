//! Why the WhatsApp adapter did not take a batch of inbound messages: then
//! WhatsApp is not told they were received, and brings them again. Touches
//! nothing.

use crate::channel::intake::Refused;
use crate::router::RouteError;
use crate::store::StoreError;

/// Why a batch of inbound messages was not taken.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error("pincer is not ready for WhatsApp messages yet")]
    NotReady,
    /// Intake refused a message (the chat was told when it should be).
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

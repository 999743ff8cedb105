//! Media from the chats, made ready for the agent: each platform fetches
//! its own files ([`Fetch`]); pincer keeps them in the group's folder,
//! prepares images for the model and asks a transcription engine for the
//! words of voice notes, before the group's session takes the message.

pub mod folder;
pub mod images;
pub mod local;
pub mod outgoing;
pub mod preparer;
pub mod transcribe;

use futures_util::future::BoxFuture;

use crate::domain::media::Attachment;

pub use preparer::{Fetchers, Preparer, PreparerDeps};

/// How a platform's adapter downloads the files its messages carry.
pub trait Fetch: Send + Sync + 'static {
    /// The attachment's bytes, at most `max` of them (more is
    /// [`FetchError::TooLarge`], found before reading all of it when the
    /// platform says the size).
    fn fetch<'a>(&'a self, attachment: &'a Attachment, max: u64) -> BoxFuture<'a, Result<Vec<u8>, FetchError>>;
}

/// Why a file could not be fetched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Larger than `limit` bytes: never worth trying again.
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// Worth trying again (network, timeout, server error).
    #[error("{0}")]
    Transient(String),
    /// The platform will never give it (expired, deleted, refused).
    #[error("{0}")]
    Gone(String),
}

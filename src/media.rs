//! Media from the chats, made ready for the agent: each platform fetches
//! its own files ([`Fetch`]); pincer keeps them in the group's folder,
//! prepares images for the model and asks a transcription engine for the
//! words of voice notes, before the group's session takes the message.

pub mod budget;
pub mod capped;
pub mod folder;
pub mod images;
pub mod local;
pub mod outgoing;
pub mod preparer;
pub mod priority;
pub mod transcribe;

use futures_util::future::BoxFuture;

use crate::domain::media::Attachment;

pub use capped::{Capped, Overflow};
pub use preparer::{Fetchers, Preparer, PreparerDeps};

/// How a platform's adapter downloads the files its messages carry.
pub trait Fetch: Send + Sync + 'static {
    /// Streams the attachment's bytes into `into` as they arrive and gives
    /// it back full. `into` refuses any byte past its limit: the download
    /// stops there ([`FetchError::TooLarge`], found before reading any of it
    /// when the platform says the size), so no file is held whole before its
    /// size is known. A failure drops the bytes taken so far.
    fn fetch<'a>(&'a self, attachment: &'a Attachment, into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>>;
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

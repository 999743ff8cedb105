//! Media from the chats, made ready for the agent: each platform fetches
//! its own files ([`Fetch`]); pincer keeps them in the group's folder,
//! prepares images for the model and asks a transcription engine for the
//! words of voice notes, before the group's session takes the message.

pub mod budget;
pub mod capped;
mod fetch;
mod fetch_error;
pub mod folder;
pub mod images;
pub mod local;
pub mod outgoing;
pub mod preparer;
pub mod priority;
pub mod transcribe;

pub use capped::{Capped, Overflow};
pub use fetch::Fetch;
pub use fetch_error::FetchError;
pub use preparer::{Fetchers, Preparer, PreparerDeps};

//! What a platform's adapter gives the preparer: a way to download a
//! message's files ([`Fetch`]).

use futures_util::future::BoxFuture;

use super::capped::Capped;
use super::fetch_error::FetchError;
use crate::domain::media::Attachment;

/// How a platform's adapter downloads the files its messages carry.
pub trait Fetch: Send + Sync + 'static {
    /// Streams the attachment's bytes into `into` as they arrive and gives
    /// it back full. `into` refuses any byte past its limit: the download
    /// stops there ([`FetchError::TooLarge`], found before reading any of it
    /// when the platform says the size), so no file is held whole before its
    /// size is known. A failure drops the bytes taken so far.
    fn fetch<'a>(&'a self, attachment: &'a Attachment, into: Capped) -> BoxFuture<'a, Result<Capped, FetchError>>;
}

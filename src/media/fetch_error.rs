//! Why a file could not be fetched: what the preparer does next depends on it
//! (too large: never again; transient: later; gone: told).

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

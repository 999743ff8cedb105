//! [`Capped`]: where a download's bytes go as they arrive. The preparer
//! hands one to a platform's [`Fetch`](super::fetch::Fetch) with the most bytes it
//! takes, and the first byte past that is refused, so a file bigger than
//! its message said is abandoned there instead of being held whole first.
//!
//! It is a `Write + Seek` sink (for a client that writes into one, rewinds
//! and empties it between tries) and takes chunks ([`Capped::push`]) from a
//! stream. Its buffer never grows past the limit. Whether it refused a byte
//! is also kept outside it ([`Overflow`]), for a client that keeps the sink
//! when it fails.

use std::io::{self, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::fetch_error::FetchError;

/// A download's bytes, at most `limit` of them.
#[derive(Debug)]
pub struct Capped {
    bytes: Vec<u8>,
    /// Where the next write goes (a client may rewind).
    at: usize,
    limit: u64,
    over: Arc<AtomicBool>,
}

/// Tells whether a [`Capped`] refused a byte, after the sink is gone.
#[derive(Clone, Debug)]
pub struct Overflow(Arc<AtomicBool>);

impl Overflow {
    pub fn happened(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The error a write past the limit gets: a platform's client passes it
/// on, and [`Overflow`] says it was the limit.
#[derive(Debug, thiserror::Error)]
#[error("more than the {limit} bytes pincer takes")]
pub struct PastLimit {
    pub limit: u64,
}

impl Capped {
    /// An empty sink that takes at most `limit` bytes.
    pub fn new(limit: u64) -> Capped {
        Capped { bytes: Vec::new(), at: 0, limit, over: Arc::new(AtomicBool::new(false)) }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether a byte past the limit was refused, readable once the sink is gone.
    pub fn overflow(&self) -> Overflow {
        Overflow(self.over.clone())
    }

    /// Appends a chunk of a stream; past the limit it is
    /// [`FetchError::TooLarge`] and the download should stop.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        self.at = self.bytes.len();
        self.put(chunk).map_err(|_| FetchError::TooLarge { limit: self.limit })
    }

    /// Everything written, in order.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Empties it to `len` bytes (a client starting a download over).
    pub fn truncate(&mut self, len: u64) {
        self.bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        self.at = self.at.min(self.bytes.len());
    }

    fn put(&mut self, data: &[u8]) -> Result<(), PastLimit> {
        let end = self.at as u64 + data.len() as u64;
        if end > self.limit {
            self.over.store(true, Ordering::Release);
            return Err(PastLimit { limit: self.limit });
        }
        let end = end as usize;
        if end > self.bytes.capacity() {
            // Doubling as a Vec does, but never past the limit: what a sink
            // holds stays within what it takes.
            let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
            let room = end.max(self.bytes.capacity().saturating_mul(2)).min(limit);
            self.bytes.reserve_exact(room - self.bytes.len());
        }
        if end > self.bytes.len() {
            self.bytes.resize(end, 0);
        }
        self.bytes[self.at..end].copy_from_slice(data);
        self.at = end;
        Ok(())
    }
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.put(data).map_err(|e| io::Error::new(io::ErrorKind::FileTooLarge, e))?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Capped {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let at = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => (self.bytes.len() as u64).checked_add_signed(d),
            SeekFrom::Current(d) => (self.at as u64).checked_add_signed(d),
        };
        // A seek past the end would leave a gap the next write fills with
        // zeros: no download needs that, so it is refused with the rest.
        match at.filter(|n| *n <= self.bytes.len() as u64) {
            Some(n) => {
                self.at = n as usize;
                Ok(n)
            }
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "a seek outside what was written")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_taken_up_to_the_limit_and_the_first_byte_past_it_is_refused() {
        let mut sink = Capped::new(10);
        let overflow = sink.overflow();
        sink.push(b"hello").unwrap();
        sink.push(b"world").unwrap();
        assert!(!overflow.happened());
        assert_eq!(sink.push(b"!"), Err(FetchError::TooLarge { limit: 10 }));
        assert!(overflow.happened(), "told after the sink is gone too");
        assert_eq!(sink.into_bytes(), b"helloworld", "nothing past the limit kept");
    }

    #[test]
    fn its_buffer_never_grows_past_the_limit() {
        let mut sink = Capped::new(1000);
        for _ in 0..999 {
            sink.push(b"x").unwrap();
        }
        assert!(sink.bytes.capacity() <= 1000, "{}", sink.bytes.capacity());
    }

    #[test]
    fn a_client_that_empties_and_rewinds_it_between_tries_gets_the_last_try_only() {
        // As whatsapp-rust's `download_to_writer` does: each try truncates to
        // 0 and rewinds, a verified one is rewound for reading.
        let mut sink = Capped::new(8);
        sink.write_all(b"garbage!").unwrap();
        sink.truncate(0);
        sink.rewind().unwrap();
        sink.write_all(b"good").unwrap();
        sink.rewind().unwrap();
        assert_eq!(sink.len(), 4);
        let err = sink.write_all(b"too long now").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(err.get_ref().is_some_and(|e| e.is::<PastLimit>()));
        assert!(sink.overflow().happened());
        assert!(sink.seek(SeekFrom::Start(5)).is_err(), "no gap past the end");
    }
}

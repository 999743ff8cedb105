//! Reading a child's stdout one line at a time, with a cap on line length.
//!
//! A line over the cap is skipped (reported, then discarded up to its newline)
//! and reading goes on: one bad line must never wedge or end the stream.
//! tokio-util's `LinesCodec` has a cap too, but its `FramedRead` ends the
//! stream after the first error, which is the opposite of what we need.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest stdout line we accept, as the Python SDK does.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// What one read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    Line(String),
    /// A line over the cap, of this many bytes; it was discarded.
    TooLong(usize),
    /// A line that is not UTF-8; it was discarded.
    NotUtf8,
}

/// A bounded line reader over any buffered async reader.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    max: usize,
    /// Bytes of an over-long line seen so far; `Some` while discarding it.
    discarding: Option<usize>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        LineReader { inner, buf: Vec::new(), max, discarding: None }
    }

    /// The next line, or `None` at end of input. A last line without a
    /// newline still counts.
    pub async fn next_line(&mut self) -> std::io::Result<Option<LineRead>> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if let Some(n) = self.discarding.take() {
                    return Ok(Some(LineRead::TooLong(n)));
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(self.take_line()));
            }
            let (chunk, found_newline) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], true),
                None => (available, false),
            };
            let chunk_len = chunk.len();
            match self.discarding.as_mut() {
                Some(seen) => *seen += chunk_len,
                None if self.buf.len() + chunk_len > self.max => {
                    self.discarding = Some(self.buf.len() + chunk_len);
                    self.buf.clear();
                }
                None => self.buf.extend_from_slice(chunk),
            }
            self.inner.consume(chunk_len + usize::from(found_newline));
            if found_newline {
                if let Some(n) = self.discarding.take() {
                    return Ok(Some(LineRead::TooLong(n)));
                }
                return Ok(Some(self.take_line()));
            }
        }
    }

    fn take_line(&mut self) -> LineRead {
        let bytes = std::mem::take(&mut self.buf);
        match String::from_utf8(bytes) {
            Ok(mut s) => {
                if s.ends_with('\r') {
                    s.pop();
                }
                LineRead::Line(s)
            }
            Err(_) => LineRead::NotUtf8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn read_all(input: &[u8], max: usize, buf_cap: usize) -> Vec<LineRead> {
        let mut r = LineReader::new(BufReader::with_capacity(buf_cap, input), max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_keeps_a_last_partial_line() {
        let got = read_all(b"a\nbb\r\n\nlast", 10, 3).await;
        let want = ["a", "bb", "", "last"].map(|s| LineRead::Line(s.into()));
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn skips_an_oversized_line_and_goes_on() {
        let mut input = b"ok1\n".to_vec();
        input.extend(vec![b'x'; 50]);
        input.extend(b"\nok2\n");
        let got = read_all(&input, 10, 4).await;
        assert_eq!(got, vec![LineRead::Line("ok1".into()), LineRead::TooLong(50), LineRead::Line("ok2".into())]);
    }

    /// What the reader must give for `input`: each newline-ended segment
    /// (and a last one without a newline) as a line, one trailing `\r`
    /// dropped; over `max` bytes: skipped, with its length; not UTF-8: reported.
    fn model(input: &[u8], max: usize) -> Vec<LineRead> {
        let mut segments: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
        if segments.last().is_some_and(|s| s.is_empty()) {
            segments.pop();
        }
        segments
            .into_iter()
            .map(|seg| match std::str::from_utf8(seg) {
                _ if seg.len() > max => LineRead::TooLong(seg.len()),
                Ok(text) => LineRead::Line(text.strip_suffix('\r').unwrap_or(text).to_owned()),
                Err(_) => LineRead::NotUtf8,
            })
            .collect()
    }

    proptest::proptest! {
        /// Arbitrary bytes, read through buffers of any size, never panic or
        /// wedge the reader, and give exactly the model's lines.
        #[test]
        fn arbitrary_bytes_read_as_the_model_says(
            input in proptest::collection::vec(
                proptest::prop_oneof![4 => proptest::num::u8::ANY, 1 => proptest::strategy::Just(b'\n')],
                0..600,
            ),
            max in 1usize..80,
            buf_cap in 1usize..32,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = runtime.block_on(read_all(&input, max, buf_cap));
            proptest::prop_assert_eq!(got, model(&input, max));
        }
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_cap_is_kept_and_invalid_utf8_is_reported() {
        let got = read_all(b"0123456789\n\xff\xfe\nz\n", 10, 4).await;
        assert_eq!(got, vec![LineRead::Line("0123456789".into()), LineRead::NotUtf8, LineRead::Line("z".into())]);
    }
}

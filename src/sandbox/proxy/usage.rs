//! What one forwarded response used, read from its bytes as they stream by
//! (never buffered whole, never delayed): a streamed reply's
//! `message_start.message.usage` and each `message_delta.usage` (whose
//! numbers are totals so far, so the last one wins field by field), or a
//! plain reply's `usage` in its JSON body, with the `model` that answered.
//!
//! Bounded: an SSE line longer than [`MAX_LINE`] is skipped (usage lines
//! are a few hundred bytes; text deltas are never needed), and a JSON body
//! is kept up to [`MAX_JSON`]; past that (no reply the API can send is that
//! large) its bytes are counted as output tokens at the dearest price, so
//! no response passes uncounted.

use serde_json::Value;

/// The longest SSE line looked at.
pub const MAX_LINE: usize = 64 * 1024;

/// The largest JSON body read for its `usage`.
pub const MAX_JSON: usize = 8 * 1024 * 1024;

/// The tokens of one response, as the API counted them, and its model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub model: Option<String>,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    /// Written to the prompt cache, all of it (`cache_creation_input_tokens`).
    pub cache_creation: u64,
    /// The part of it kept for an hour, which costs more.
    pub cache_creation_1h: u64,
    pub web_searches: u64,
}

impl Usage {
    /// Takes every count `usage` (an API `usage` object) carries; the rest stay.
    fn merge(&mut self, usage: &Value) {
        let count = |v: Option<&Value>| v.and_then(Value::as_u64);
        let fields: [(&mut u64, Option<&Value>); 6] = [
            (&mut self.input, usage.get("input_tokens")),
            (&mut self.output, usage.get("output_tokens")),
            (&mut self.cache_read, usage.get("cache_read_input_tokens")),
            (&mut self.cache_creation, usage.get("cache_creation_input_tokens")),
            (&mut self.cache_creation_1h, usage.pointer("/cache_creation/ephemeral_1h_input_tokens")),
            (&mut self.web_searches, usage.pointer("/server_tool_use/web_search_requests")),
        ];
        for (field, value) in fields {
            if let Some(n) = count(value) {
                *field = n;
            }
        }
    }
}

/// Reads one response's usage from its body, chunk by chunk.
#[derive(Debug)]
pub enum Meter {
    Sse(SseMeter),
    Json(JsonMeter),
}

impl Meter {
    /// The meter for a response with this status and `content-type`; none
    /// for a failed call (the API bills no error) or another kind of body
    /// (`count_tokens` answers a count, which costs nothing).
    pub fn for_response(status: u16, content_type: Option<&str>) -> Option<Meter> {
        if !(200..300).contains(&status) {
            return None;
        }
        let kind = content_type?.split(';').next()?.trim().to_ascii_lowercase();
        match kind.as_str() {
            "text/event-stream" => Some(Meter::Sse(SseMeter::default())),
            "application/json" => Some(Meter::Json(JsonMeter::default())),
            _ => None,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        match self {
            Meter::Sse(m) => m.feed(chunk),
            Meter::Json(m) => m.feed(chunk),
        }
    }

    /// What the body said it used, once it ended (or was cut off).
    pub fn finish(self) -> Option<Usage> {
        match self {
            Meter::Sse(m) => m.finish(),
            Meter::Json(m) => m.finish(),
        }
    }
}

/// A streamed reply's usage, line by line.
#[derive(Debug, Default)]
pub struct SseMeter {
    /// The line read so far (without its end).
    line: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: dropped up to its end.
    skipping: bool,
    usage: Usage,
    seen: bool,
}

impl SseMeter {
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            self.take(&chunk[..end]);
            if !self.skipping {
                self.line_ended();
            }
            self.line.clear();
            self.skipping = false;
            chunk = &chunk[end + 1..];
        }
        self.take(chunk);
    }

    /// Adds `part` to the current line, unless that makes it too long to look at.
    fn take(&mut self, part: &[u8]) {
        if self.skipping {
            return;
        }
        if self.line.len() + part.len() > MAX_LINE {
            self.skipping = true;
            self.line = Vec::new();
            return;
        }
        self.line.extend_from_slice(part);
    }

    fn line_ended(&mut self) {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Only the two kinds of event that carry usage are parsed at all.
        let carries = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
        if !carries(b"message_start") && !carries(b"message_delta") {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let message = &event["message"];
                if let Some(model) = message.get("model").and_then(Value::as_str) {
                    self.usage.model = Some(model.chars().take(100).collect());
                }
                self.usage.merge(&message["usage"]);
                self.seen = true;
            }
            Some("message_delta") => {
                self.usage.merge(&event["usage"]);
                self.seen = true;
            }
            _ => {}
        }
    }

    pub fn finish(self) -> Option<Usage> {
        self.seen.then_some(self.usage)
    }
}

/// A plain reply's usage, from its whole body (bounded).
#[derive(Debug, Default)]
pub struct JsonMeter {
    body: Vec<u8>,
    /// Bytes past [`MAX_JSON`]: the body is no longer kept, only counted.
    bytes: usize,
}

impl JsonMeter {
    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes = self.bytes.saturating_add(chunk.len());
        if self.bytes <= MAX_JSON {
            self.body.extend_from_slice(chunk);
        } else {
            self.body = Vec::new();
        }
    }

    pub fn finish(self) -> Option<Usage> {
        if self.bytes > MAX_JSON {
            // Unreadable within the bound: every four bytes an output token,
            // at the dearest price (no model), rather than nothing.
            tracing::warn!(
                bytes = self.bytes,
                "credential proxy: a reply too large to read its usage; counted by its size"
            );
            return Some(Usage { output: (self.bytes / 4) as u64, ..Usage::default() });
        }
        let body: Value = serde_json::from_slice(&self.body).ok()?;
        let usage = body.get("usage")?;
        let mut counted = Usage {
            model: body.get("model").and_then(Value::as_str).map(|m| m.chars().take(100).collect()),
            ..Usage::default()
        };
        counted.merge(usage);
        Some(counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "event: message_start\r\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"claude-sonnet-4-5\",",
        "\"content\":[],\"usage\":{\"input_tokens\":1200,\"cache_creation_input_tokens\":300,",
        "\"cache_read_input_tokens\":5000,\"output_tokens\":1,",
        "\"cache_creation\":{\"ephemeral_5m_input_tokens\":100,\"ephemeral_1h_input_tokens\":200}}}}\r\n\r\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"message_delta\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":75,\"server_tool_use\":{\"web_search_requests\":2}}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );

    fn expected() -> Usage {
        Usage {
            model: Some("claude-sonnet-4-5".into()),
            input: 1200,
            output: 75,
            cache_read: 5000,
            cache_creation: 300,
            cache_creation_1h: 200,
            web_searches: 2,
        }
    }

    fn metered(chunks: impl IntoIterator<Item = Vec<u8>>, content_type: &str) -> Option<Usage> {
        let mut meter = Meter::for_response(200, Some(content_type)).unwrap();
        for chunk in chunks {
            meter.feed(&chunk);
        }
        meter.finish()
    }

    #[test]
    fn a_stream_is_read_the_same_whatever_its_chunks() {
        let bytes = STREAM.as_bytes();
        assert_eq!(metered([bytes.to_vec()], "text/event-stream"), Some(expected()), "one chunk");
        let bytewise = bytes.iter().map(|b| vec![*b]);
        assert_eq!(metered(bytewise, "text/event-stream; charset=utf-8"), Some(expected()), "byte by byte");
        for size in [7, 64, 333] {
            let chunks = bytes.chunks(size).map(<[u8]>::to_vec);
            assert_eq!(metered(chunks, "text/event-stream"), Some(expected()), "chunks of {size}");
        }
    }

    #[test]
    fn a_stream_cut_off_counts_what_it_said_so_far() {
        let cut = STREAM.find("event: message_delta").unwrap();
        let usage = metered([STREAM.as_bytes()[..cut].to_vec()], "text/event-stream").unwrap();
        assert_eq!((usage.input, usage.output, usage.cache_read), (1200, 1, 5000));
        assert_eq!(metered([b"event: ping\n".to_vec()], "text/event-stream"), None, "no usage said");
    }

    #[test]
    fn an_overlong_line_is_skipped_without_being_kept() {
        let mut meter = SseMeter::default();
        let long = format!("data: {{\"type\":\"content_block_delta\",\"text\":\"{}\"}}", "x".repeat(MAX_LINE * 3));
        for chunk in long.as_bytes().chunks(4096) {
            meter.feed(chunk);
            assert!(meter.line.len() <= MAX_LINE, "the line is never kept past the bound");
        }
        meter.feed(b"\n");
        meter.feed(STREAM.as_bytes());
        assert_eq!(meter.finish(), Some(expected()), "the lines after it are read");
    }

    #[test]
    fn a_plain_reply_is_read_from_its_body_and_an_oversized_one_by_its_size() {
        let body = br#"{"id":"m2","type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":0}}"#;
        let usage = metered(body.chunks(5).map(<[u8]>::to_vec), "application/json").unwrap();
        assert_eq!(usage, Usage { model: Some("claude-haiku-4-5".into()), input: 10, output: 3, ..Usage::default() });
        assert_eq!(metered([br#"{"input_tokens":12}"#.to_vec()], "application/json"), None, "a token count is free");

        let mut meter = JsonMeter::default();
        for _ in 0..(MAX_JSON / 65536 + 2) {
            meter.feed(&[b' '; 65536]);
            assert!(meter.body.len() <= MAX_JSON);
        }
        let usage = meter.finish().unwrap();
        assert!(usage.output as usize >= MAX_JSON / 4 && usage.model.is_none(), "{usage:?}");
    }

    #[test]
    fn failures_and_other_bodies_are_not_metered() {
        assert!(Meter::for_response(429, Some("application/json")).is_none());
        assert!(Meter::for_response(200, Some("text/plain")).is_none());
        assert!(Meter::for_response(200, None).is_none());
    }
}

//! Self-tests of the fake Messages API's wire: it must answer as the real API
//! does (a streamed reply one SSE event per chunk, each connection closed after
//! its answer), or the benches that time pincer's proxy against it measure a
//! path no real reply takes. Raw HTTP/1.1 over TCP, no CLI needed.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::fake_api::{echo, FakeApi, Wire};

/// Not a timing: how long a broken fake may hang a test before it fails.
const HANG: Duration = Duration::from_secs(30);

const BODY: &str = r#"{"model":"claude-fake","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn request() -> String {
    format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
}

/// Reads one response's head: its lower-cased header lines.
async fn head(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Vec<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(buf.drain(..end + 4).collect()).unwrap();
            return head.lines().map(str::to_ascii_lowercase).collect();
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(HANG, conn.read(&mut chunk)).await.expect("the fake answers").unwrap();
        assert!(n > 0, "closed before the head ended");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Splits a whole chunked body into its chunks' data.
fn chunks(mut body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap().trim(), 16).unwrap();
        body = &body[line + 2..];
        if size == 0 {
            return out;
        }
        out.push(String::from_utf8(body[..size].to_vec()).unwrap());
        body = &body[size + 2..];
    }
}

#[tokio::test]
async fn a_streamed_reply_goes_out_one_event_per_chunk_and_the_connection_closes() {
    let api = FakeApi::start(echo()).await;
    let mut conn = TcpStream::connect(api.base_url().trim_start_matches("http://")).await.unwrap();
    conn.write_all(request().as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let headers = head(&mut conn, &mut buf).await;
    assert!(headers.iter().any(|h| h == "connection: close"), "{headers:?}");
    assert!(headers.iter().any(|h| h == "transfer-encoding: chunked"), "{headers:?}");
    // The fake closes: reading to the end returns.
    tokio::time::timeout(HANG, conn.read_to_end(&mut buf)).await.expect("the connection closes").unwrap();
    let chunks = chunks(&buf);
    let names: Vec<&str> = chunks.iter().map(|c| c.lines().next().unwrap_or_default()).collect();
    assert_eq!(
        names,
        [
            "event: message_start",
            "event: content_block_start",
            "event: content_block_delta",
            "event: content_block_stop",
            "event: message_delta",
            "event: message_stop"
        ]
    );
    for chunk in &chunks {
        assert_eq!(chunk.matches("event: ").count(), 1, "one event per chunk: {chunk:?}");
        assert!(chunk.ends_with("\n\n"), "{chunk:?}");
    }
    assert!(chunks[2].contains("ECHO: hi"), "{}", chunks[2]);
}

#[tokio::test]
async fn batched_the_whole_body_goes_at_once_on_a_kept_connection() {
    let api = FakeApi::start_on(echo(), Wire::BATCHED).await;
    let mut conn = TcpStream::connect(api.base_url().trim_start_matches("http://")).await.unwrap();
    for _ in 0..2 {
        conn.write_all(request().as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let headers = head(&mut conn, &mut buf).await;
        assert!(!headers.iter().any(|h| h.starts_with("connection: close")), "{headers:?}");
        let length: usize = headers
            .iter()
            .find_map(|h| h.strip_prefix("content-length: "))
            .expect("one body with its length")
            .parse()
            .unwrap();
        while buf.len() < length {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(HANG, conn.read(&mut chunk)).await.expect("the body").unwrap();
            assert!(n > 0, "closed mid-body");
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8(buf).unwrap();
        assert_eq!(body.matches("event: ").count(), 6, "{body}");
    }
}

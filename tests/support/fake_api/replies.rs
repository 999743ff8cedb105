//! What the fake writes on the wire: SSE bodies (one by one, trickled, hanging)
//! and the API's error replies.

use super::*;

/// `events` as a body that hands hyper one event at a time and yields between
/// them, so each goes out in its own chunk and write, as the real API's do.
pub(super) fn one_by_one(events: Vec<String>) -> Body {
    use futures_util::StreamExt;
    let stream = futures_util::stream::iter(events.into_iter().enumerate()).then(|(i, event)| async move {
        if i > 0 {
            // Pending once: hyper writes what it holds before the next event.
            tokio::task::yield_now().await;
        }
        Ok::<Bytes, std::io::Error>(Bytes::from(event))
    });
    Body::from_stream(stream)
}

/// `events` with an SSE `ping` every 100 ms for `delay` after the first;
/// the request counts as in flight (`ending` alive) until hyper drops the
/// body: sent whole, or its client gone.
pub(super) fn trickled(events: Vec<String>, delay: Duration, ending: Ending) -> Body {
    use futures_util::StreamExt;
    const EVERY: Duration = Duration::from_millis(100);
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned();
    let pings = (delay.as_millis() / EVERY.as_millis()) as usize;
    let mut paced: Vec<(Duration, String)> = Vec::with_capacity(events.len() + pings);
    let mut events = events.into_iter();
    paced.extend(events.next().map(|first| (Duration::ZERO, first)));
    paced.extend(std::iter::repeat_n((EVERY, ping), pings));
    paced.extend(events.map(|event| (Duration::ZERO, event)));
    let stream = futures_util::stream::iter(paced).then(move |(wait, event)| {
        let _in_flight = &ending;
        async move {
            tokio::time::sleep(wait).await;
            Ok::<Bytes, std::io::Error>(Bytes::from(event))
        }
    });
    Body::from_stream(stream)
}

/// The SSE events of one streamed message with one content block, each
/// `event: …\ndata: …\n\n`. A tool's input JSON is sent in two
/// `input_json_delta` chunks, as the real API splits it.
pub(super) fn sse_events(id: &str, model: &str, block: &Value, stop_reason: &str) -> Vec<String> {
    let mut events = vec![(
        "message_start",
        json!({
            "type": "message_start",
            "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": { "input_tokens": 5, "output_tokens": 1 },
            },
        }),
    )];
    if block["type"] == "tool_use" {
        let mut start = block.clone();
        start["input"] = json!({});
        events.push((
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": start }),
        ));
        let input = block["input"].to_string();
        let mid = (0..=input.len() / 2).rev().find(|&i| input.is_char_boundary(i)).unwrap_or(0);
        for chunk in [&input[..mid], &input[mid..]] {
            events.push((
                "content_block_delta",
                json!({
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": { "type": "input_json_delta", "partial_json": chunk },
                }),
            ));
        }
    } else {
        events.push((
            "content_block_start",
            json!({
                "type": "content_block_start",
                "index": 0,
                "content_block": { "type": "text", "text": "" },
            }),
        ));
        events.push((
            "content_block_delta",
            json!({
                "type": "content_block_delta",
                "index": 0,
                "delta": { "type": "text_delta", "text": block["text"] },
            }),
        ));
    }
    events.push(("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })));
    events.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": 5 },
        }),
    ));
    events.push(("message_stop", json!({ "type": "message_stop" })));
    events.into_iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

/// An error the SDK does not retry.
pub(super) fn error_response(status: u16, message: &str) -> Response {
    let mut response = error_body(status, message);
    response.headers_mut().insert("x-should-retry", "false".parse().expect("a header value"));
    response
}

/// An Anthropic-style error as the real API sends it, which the CLI retries
/// when the status is one it retries (429 and 5xx seen).
pub(super) fn error_body(status: u16, message: &str) -> Response {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({ "type": "error", "error": { "type": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}

/// A usage-limit refusal with the unified rate-limit headers (what a Claude
/// subscription or gateway answers), not to be retried.
pub(super) fn usage_limit(resets_at: SystemTime, limit: &str) -> Response {
    let reset = resets_at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut response =
        error_response(429, "This request would exceed your account's rate limit. Please try again later.");
    let headers = response.headers_mut();
    for (name, value) in [
        ("anthropic-ratelimit-unified-status", "rejected".to_owned()),
        ("anthropic-ratelimit-unified-reset", reset.to_string()),
        ("anthropic-ratelimit-unified-representative-claim", limit.to_owned()),
    ] {
        headers.insert(name, value.parse().expect("a header value"));
    }
    response
}

/// `200`, the SSE headers and `message_start`, then nothing until the fake is dropped.
pub(super) fn hanging_stream(req: &ApiRequest, released: &CancellationToken) -> Response {
    let start = json!({
        "type": "message_start",
        "message": {
            "id": "msg_hang", "type": "message", "role": "assistant", "model": req.model(),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": 5, "output_tokens": 1 },
        },
    });
    let first = Bytes::from(format!("event: message_start\ndata: {start}\n\n"));
    let released = released.clone();
    let stalled = futures_util::stream::once(async move {
        released.cancelled().await;
        Err::<Bytes, std::io::Error>(std::io::Error::other("the fake API stopped"))
    });
    let body = futures_util::StreamExt::chain(futures_util::stream::once(async { Ok(first) }), stalled);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .expect("SSE response")
}

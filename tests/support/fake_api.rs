//! A fake Anthropic Messages API for end-to-end tests that run the real Claude Code
//! CLI offline (`ANTHROPIC_BASE_URL=<FakeApi::base_url()>`).
//!
//! Each test supplies a [`Script`]: a closure that picks the [`Reply`] for every
//! `POST /v1/messages` from the request ([`ApiRequest`]). Every such request is
//! recorded so tests can assert what the CLI sent (history carried, tool results,
//! task notifications, subagent traffic).
//!
//! What 2.1.330 sends, as observed (see `../shared/protocol/README.md` and `docs/cli-observations.md`):
//! - `POST /v1/messages?beta=true` with `"stream": true` for every model turn;
//!   subagent turns carry the `x-claude-code-agent-id` header.
//! - The user content of a turn is an array of text blocks, often starting with a
//!   `<system-reminder>` block; `messages` also holds `role:"system"` entries (the
//!   environment block, and "The user sent a new message while you were working: …"
//!   for a message folded into a running tool turn).
//! - The follow-up turn after a background task completes has a user text block
//!   `<system-reminder>\n[SYSTEM NOTIFICATION - NOT USER INPUT]…<task-notification>…
//!   <status>completed</status>…</task-notification>\n</system-reminder>`.
//!
//! Faults ([`Reply::Error`], [`Reply::Retryable`], [`Reply::UsageLimit`],
//! [`Reply::Hang`]) answer as the real API would; [`faults`] scripts them for
//! the first requests of a message and lets the rest through.
//!
//! On the wire it answers as the real API does ([`Wire::REAL`]): a streamed
//! reply goes out event by event (one chunk, so one write, per SSE event, as
//! the API streams tokens), and every answer closes its connection, so the
//! client opens a new one per request. [`FakeApi::start_on`] takes another
//! [`Wire`] (the chat bench's `PINCER_BENCH_API_*` knobs).
#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime},
};

use axum::{
    body::{Body, Bytes},
    extract::State,
    http::{header, HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::post,
    Router,
};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Picks the reply to one `POST /v1/messages`.
#[path = "fake_api/replies.rs"]
mod replies;
#[path = "fake_api/request.rs"]
mod request;
#[path = "fake_api/scripts.rs"]
mod scripts;

use replies::*;
pub use request::ApiRequest;
pub use scripts::*;

pub type Script = Arc<dyn Fn(&ApiRequest) -> Reply + Send + Sync>;

/// Every recorded `POST /v1/messages` is kept as the request the script saw.
pub type RecordedRequest = ApiRequest;

/// Header the CLI puts on requests made by a subagent (its task id).
pub const AGENT_ID_HEADER: &str = "x-claude-code-agent-id";

/// Marker of the text the CLI injects in the turn it starts when a background
/// task ends.
pub const TASK_NOTIFICATION: &str = "<task-notification>";

/// How the fake puts its answers on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wire {
    /// A streamed reply is written one SSE event at a time (a chunk and a
    /// flush each); else the whole body at once.
    pub flush_per_event: bool,
    /// Every answer carries `Connection: close`: the client's next request
    /// opens a new connection.
    pub close: bool,
    /// `TCP_NODELAY` on accepted connections; else Nagle holds a small write
    /// while an earlier one is unacknowledged (what a server that does not
    /// set it, e.g. Python's `http.server`, does).
    pub nodelay: bool,
}

impl Wire {
    /// As the real API answers: streamed event by event, each connection
    /// closed after its answer. Nagle off, as the real API's edge has it.
    pub const REAL: Wire = Wire { flush_per_event: true, close: true, nodelay: true };
    /// The fake's old ways: a whole body in one write on a kept-alive connection.
    pub const BATCHED: Wire = Wire { flush_per_event: false, close: false, nodelay: false };
}

/// What the fake model answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// One text block, `stop_reason: end_turn`.
    Text(String),
    /// One `tool_use` block (id generated: `toolu_001`, …), `stop_reason: tool_use`.
    ToolUse { name: String, input: Value },
    /// Wait before answering at all (no headers yet), then answer `reply`. The CLI
    /// sits in "waiting for the API", which is what interrupt and queueing tests need.
    Slow { delay: Duration, reply: Box<Reply> },
    /// An Anthropic-style error response (`{"type":"error","error":{...}}`). Sent with
    /// `x-should-retry: false` so the SDK does not retry it with backoff.
    Error { status: u16, message: String },
    /// The same error as the real API sends it, which the CLI retries by itself
    /// (up to `CLAUDE_CODE_MAX_RETRIES`, 10 by default, backing off from 0.5 s);
    /// `retry_after` seconds go out as `retry-after`, which the CLI waits out.
    Retryable { status: u16, message: String, retry_after: Option<u32> },
    /// The account's usage limit: 429 with `anthropic-ratelimit-unified-status:
    /// rejected` and the reset, not retried. The CLI reports it as a usage limit
    /// only when it talks to a gateway (see [`GATEWAY_TOKEN`]); else as a 429.
    UsageLimit { resets_at: SystemTime, limit: &'static str },
    /// Sends `200` and the first SSE event at once, then an SSE `ping` every
    /// 100 ms for `delay`, then the rest of `reply`: a turn under way. As it
    /// writes all along, a client that goes away (a killed CLI) ends it at
    /// once, and [`ApiRequest::ended_us`] says when.
    Trickle { delay: Duration, reply: Box<Reply> },
    /// Never answers (`after_headers: false`), or sends `200` and the first SSE
    /// event and then nothing. Released (the connection closed) when the fake is dropped.
    Hang { after_headers: bool },
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Self {
        Reply::Text(text.into())
    }

    pub fn tool_use(name: impl Into<String>, input: Value) -> Self {
        Reply::ToolUse { name: name.into(), input }
    }

    pub fn slow(delay: Duration, reply: Reply) -> Self {
        Reply::Slow { delay, reply: Box::new(reply) }
    }

    pub fn trickle(delay: Duration, reply: Reply) -> Self {
        Reply::Trickle { delay, reply: Box::new(reply) }
    }

    /// A foreground `Bash` call.
    pub fn bash(command: &str, description: &str) -> Self {
        Reply::tool_use("Bash", json!({ "command": command, "description": description }))
    }

    pub fn retryable(status: u16, message: &str) -> Self {
        Reply::Retryable { status, message: message.into(), retry_after: None }
    }

    /// A `Bash` call with `run_in_background: true`: the CLI reports `task_started`,
    /// ends the turn, and starts a follow-up turn when the command exits.
    pub fn bash_background(command: &str, description: &str) -> Self {
        Reply::tool_use("Bash", json!({ "command": command, "description": description, "run_in_background": true }))
    }
}

/// One `POST /v1/messages` as the CLI sent it.
struct Shared {
    script: Script,
    requests: Mutex<Vec<ApiRequest>>,
    /// `METHOD path` of every request that is not `POST /v1/messages`.
    other: Mutex<Vec<String>>,
    next_message: AtomicUsize,
    next_tool: AtomicUsize,
    /// Cancelled when the fake is dropped: hanging replies end then.
    released: CancellationToken,
    wire: Wire,
}

/// A running fake API; stops serving when dropped (requests in flight finish).
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Dropping it shuts the server down.
    _shutdown: oneshot::Sender<()>,
    /// Dropping it releases hanging replies.
    _release: DropGuard,
}

impl FakeApi {
    /// Binds 127.0.0.1 on a free port and serves from a spawned task (needs a tokio
    /// runtime), answering as the real API does ([`Wire::REAL`]).
    pub async fn start(script: Script) -> FakeApi {
        Self::start_on(script, Wire::REAL).await
    }

    /// [`Self::start`], answering on `wire`.
    pub async fn start_on(script: Script, wire: Wire) -> FakeApi {
        let shared = Arc::new(Shared {
            script,
            requests: Mutex::new(Vec::new()),
            other: Mutex::new(Vec::new()),
            next_message: AtomicUsize::new(1),
            next_tool: AtomicUsize::new(1),
            released: CancellationToken::new(),
            wire,
        });
        let app = Router::new()
            // The CLI appends `?beta=true`; routing ignores the query.
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .fallback(fallback)
            .with_state(shared.clone());
        let (addr, shutdown) = super::serve::serve_loopback_with(app, "fake API", wire.nodelay).await;
        let release = shared.released.clone().drop_guard();
        FakeApi { addr, shared, _shutdown: shutdown, _release: release }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every `POST /v1/messages`, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The streaming requests of the main agent (no side requests, no subagents):
    /// one per model turn of the session.
    pub fn main_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.is_streaming() && !r.is_subagent()).collect()
    }

    /// The user text that opened each main-agent request, oldest first. A test
    /// that ends with a marker message reads what came before it here: two
    /// messages taken together share one request's text.
    pub fn user_texts(&self) -> Vec<String> {
        self.main_requests().iter().map(RecordedRequest::last_user_text).collect()
    }

    /// `METHOD path?query` of every other request (count_tokens, unknown paths).
    pub fn other_requests(&self) -> Vec<String> {
        self.shared.other.lock().unwrap().clone()
    }

    /// Polls until at least `n` `POST /v1/messages` arrived; panics after `timeout`.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(n, timeout, Self::requests).await
    }

    /// [`Self::wait_for_requests`], counting only [`Self::main_requests`].
    pub async fn wait_for_main_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_until(n, timeout, Self::main_requests).await
    }

    async fn wait_until(
        &self,
        n: usize,
        timeout: Duration,
        read: fn(&Self) -> Vec<RecordedRequest>,
    ) -> Vec<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        loop {
            let requests = read(self);
            if requests.len() >= n {
                return requests;
            }
            assert!(Instant::now() < deadline, "fake API: waited {timeout:?} for {n} requests, got {}", requests.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let mut response = answer(&shared, &headers, body).await;
    if shared.wire.close {
        response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    response
}

fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Marks request `index` ended when dropped: when its handler returns, or
/// when hyper drops the handler because the client closed its connection
/// (a killed CLI), whichever comes first.
struct Ending {
    shared: Arc<Shared>,
    index: usize,
}

impl Drop for Ending {
    fn drop(&mut self) {
        if let Some(request) = self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).get_mut(self.index) {
            request.ended_us = Some(now_us());
        }
    }
}

async fn answer(shared: &Arc<Shared>, headers: &HeaderMap, body: Bytes) -> Response {
    let arrived_us = now_us();
    let bytes = body.len();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("fake API: unparsable /v1/messages body: {e}");
            return error_response(400, &format!("invalid JSON: {e}"));
        }
    };
    let agent_id = headers.get(AGENT_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let credential = ["x-api-key", "authorization"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()).map(str::to_string));
    let req = ApiRequest { credential, arrived_us, bytes, ..ApiRequest::new(body, agent_id) };
    let index = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(req.clone());
        requests.len() - 1
    };
    let ending = Ending { shared: shared.clone(), index };

    let mut reply = (shared.script)(&req);
    while let Reply::Slow { delay, reply: inner } = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let mut trickle = None;
    if let Reply::Trickle { delay, reply: inner } = reply {
        trickle = Some(delay);
        reply = *inner;
    }
    match &reply {
        Reply::Error { status, message } => return error_response(*status, message),
        Reply::Retryable { status, message, retry_after } => {
            let mut response = error_body(*status, message);
            if let Some(secs) = retry_after {
                response.headers_mut().insert("retry-after", secs.to_string().parse().expect("a header value"));
            }
            return response;
        }
        Reply::UsageLimit { resets_at, limit } => return usage_limit(*resets_at, limit),
        Reply::Hang { after_headers: false } => {
            shared.released.cancelled().await;
            return error_response(503, "the fake API stopped");
        }
        Reply::Hang { after_headers: true } => return hanging_stream(&req, &shared.released),
        _ => {}
    }

    let id = format!("msg_{:03}", shared.next_message.fetch_add(1, Ordering::Relaxed));
    let block = match reply {
        Reply::Text(text) => json!({ "type": "text", "text": text }),
        Reply::ToolUse { name, input } => {
            // Side requests (non-streaming: titles, classifiers) never drive tools.
            if !req.is_streaming() {
                json!({ "type": "text", "text": "ok" })
            } else {
                let tool_id = format!("toolu_{:03}", shared.next_tool.fetch_add(1, Ordering::Relaxed));
                json!({ "type": "tool_use", "id": tool_id, "name": name, "input": input })
            }
        }
        Reply::Slow { .. }
        | Reply::Trickle { .. }
        | Reply::Error { .. }
        | Reply::Retryable { .. }
        | Reply::UsageLimit { .. }
        | Reply::Hang { .. } => unreachable!("answered above"),
    };
    let stop_reason = if block["type"] == "tool_use" { "tool_use" } else { "end_turn" };

    if req.is_streaming() {
        let events = sse_events(&id, req.model(), &block, stop_reason);
        let body = match trickle {
            Some(delay) => trickled(events, delay, ending),
            None if shared.wire.flush_per_event => one_by_one(events),
            None => Body::from(events.concat()),
        };
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .header("request-id", format!("req_{id}"))
            .body(body)
            .expect("SSE response")
    } else {
        let message = json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": req.model(),
            "content": [block],
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": { "input_tokens": 5, "output_tokens": 5 },
        });
        ([("request-id", format!("req_{id}"))], axum::Json(message)).into_response()
    }
}

async fn count_tokens(State(shared): State<Arc<Shared>>, uri: Uri, body: Bytes) -> Response {
    shared.other.lock().unwrap().push(format!("POST {uri}"));
    // A rough size estimate is all the CLI uses it for.
    axum::Json(json!({ "input_tokens": body.len() / 4 + 1 })).into_response()
}

async fn fallback(State(shared): State<Arc<Shared>>, method: Method, uri: Uri) -> Response {
    // Logged so a test run shows what else a new CLI version asks for.
    eprintln!("fake API: 404 for {method} {uri}");
    shared.other.lock().unwrap().push(format!("{method} {uri}"));
    error_response(404, &format!("fake API does not serve {method} {uri}"))
}

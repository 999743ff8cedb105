//! The stream-json protocol: stdout lines parsed into [`CliEvent`], and the
//! lines we write to stdin.
//!
//! Parsing is by JSON value, never by line prefix (2.1.330 reordered the keys of
//! `result`), and tolerant: unknown types and fields are kept as `Other` or
//! ignored, because the protocol drifts between CLI versions.

mod assistant;
mod task;

use serde_json::{json, Value};

use crate::domain::media::ModelImage;

pub use assistant::{ToolCall, ToolKind};
pub use task::{
    BackgroundTask, TaskEvent, TaskNotification, TaskProgress, TaskStarted, TaskStatus, TaskUpdated, TaskUsage,
};

use crate::domain::{TaskFrame, Tokens, TurnResult};

/// One stdout line, understood.
#[derive(Clone, Debug, PartialEq)]
pub enum CliEvent {
    /// `system/init`, printed at the start of every turn.
    Init { session_id: Option<String> },
    /// Any other `system` frame: task lifecycle and whatever newer CLIs add.
    /// `frame` is what the store keeps of every such frame; `task` is the
    /// typed event when the frame is one of the task lifecycle.
    System { frame: TaskFrame, task: Option<TaskEvent> },
    /// The end of a turn, and why it ended when that was not a normal stop.
    Result { result: TurnResult, end: TurnEnd },
    /// The synthetic assistant message the CLI prints when an API error ends a
    /// turn of the main thread (`is_api_error_message`), just before its `result`.
    /// It says more than the result: the CLI's category and the limit's reset.
    ApiErrorMessage(ApiErrorReport),
    /// `rate_limit_event`: the account's rate-limit state changed.
    RateLimit(RateLimitInfo),
    /// The CLI asks us something and waits for a `control_response`.
    ControlRequest { request_id: String, request: ControlRequest },
    /// The CLI answers a request of ours (e.g. `interrupt`).
    ControlResponse { request_id: Option<String>, ok: bool },
    /// The tool calls of an `assistant` line (the main thread's, or a
    /// subagent's with `parent_tool_use_id` set). A text-only line is `Other`.
    ToolCalls(Vec<ToolCall>),
    /// A user message replayed by `--replay-user-messages`: the CLI took it into a turn.
    UserReplay { uuid: String },
    /// Assistant text, tool results, stream events, and anything unknown.
    Other { kind: String },
}

/// A control request from the CLI.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlRequest {
    CanUseTool {
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    },
    /// A hook registered in `initialize` fired: for pincer's `PreToolUse`
    /// hook, a tool call about to run, whatever the CLI would decide alone.
    HookCallback {
        callback_id: String,
        /// `hook_event_name`: `PreToolUse` for pincer's only hook.
        event: String,
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
        /// The CLI's working directory, which relative file paths are resolved against.
        cwd: Option<String>,
    },
    /// A JSON-RPC message for one of our in-process MCP servers (`claude::mcp` reads it).
    McpMessage {
        server_name: String,
        message: Value,
    },
    Other {
        subtype: String,
    },
}

/// What a `result` says beyond [`TurnResult`] about how the turn ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnEnd {
    /// `terminal_reason`: `api_error`, `aborted_streaming`, `aborted_tools`, ...
    pub terminal_reason: Option<String>,
    /// Set when the API answered the turn's last request with an error.
    pub api_error: Option<ApiErrorReport>,
}

/// An API error as the CLI reports it (2.1.330: on the `result` and on the
/// synthetic assistant message before it; see `docs/cli-observations.md`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApiErrorReport {
    /// `api_error_status`: the HTTP status (absent when no answer came at all).
    pub status: Option<u16>,
    /// `api_error_type`: the API's own error type (`overloaded_error`, `rate_limit_error`, ...).
    pub error_type: Option<String>,
    /// `api_error`: the CLI's typed kind (`usage_limit_reached`, ...); absent for most errors.
    pub kind: Option<String>,
    /// `error` on the assistant message: the CLI's coarse category
    /// (`server_error`, `rate_limit`, `authentication_failed`, `billing_error`, ...).
    pub category: Option<String>,
    /// `api_error_params.rate_limit_info`: which limit refused the request and when it resets.
    pub limit: Option<RateLimitInfo>,
}

impl ApiErrorReport {
    /// Fills what `self` lacks from `other` (the same error, seen on another frame).
    pub fn merge(mut self, other: &ApiErrorReport) -> ApiErrorReport {
        self.status = self.status.or(other.status);
        self.error_type = self.error_type.or_else(|| other.error_type.clone());
        self.kind = self.kind.or_else(|| other.kind.clone());
        self.category = self.category.or_else(|| other.category.clone());
        self.limit = self.limit.or_else(|| other.limit.clone());
        self
    }
}

/// The `rate_limit_info` object of a `rate_limit_event` or an API error.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitInfo {
    /// `allowed`, `allowed_warning`, `rejected`.
    pub status: String,
    /// `resetsAt`: when the limit resets, in Unix seconds.
    pub resets_at: Option<i64>,
    /// `rateLimitType`: `five_hour`, `seven_day`, `seven_day_opus`, ...
    pub limit_type: Option<String>,
}

/// Why a line could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("a JSON line without a string `type`")]
    NoType,
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Parses one stdout line.
pub fn parse_line(line: &str) -> Result<CliEvent, ParseError> {
    let v: Value = serde_json::from_str(line)?;
    let kind = v.get("type").and_then(Value::as_str).ok_or(ParseError::NoType)?;
    Ok(match kind {
        "system" if v.get("subtype").and_then(Value::as_str) == Some("init") => {
            CliEvent::Init { session_id: str_field(&v, "session_id") }
        }
        "system" => CliEvent::System { frame: task_frame(&v), task: task::parse(&v) },
        "result" => CliEvent::Result { result: turn_result(&v), end: turn_end(&v) },
        "assistant" if is_main_api_error(&v) => CliEvent::ApiErrorMessage(api_error_report(&v)),
        // Only assistant lines pay for looking at their blocks.
        "assistant" => {
            let calls = assistant::tool_calls(&v);
            if calls.is_empty() {
                CliEvent::Other { kind: kind.to_owned() }
            } else {
                CliEvent::ToolCalls(calls)
            }
        }
        "rate_limit_event" => match v.get("rate_limit_info").and_then(rate_limit_info) {
            Some(info) => CliEvent::RateLimit(info),
            None => CliEvent::Other { kind: kind.to_owned() },
        },
        "control_request" => control_request(&v),
        "control_response" => {
            let response = v.get("response").unwrap_or(&Value::Null);
            CliEvent::ControlResponse {
                request_id: str_field(response, "request_id"),
                ok: response.get("subtype").and_then(Value::as_str) == Some("success"),
            }
        }
        "user" if is_replay(&v) => match str_field(&v, "uuid") {
            Some(uuid) => CliEvent::UserReplay { uuid },
            None => CliEvent::Other { kind: kind.to_owned() },
        },
        other => CliEvent::Other { kind: other.to_owned() },
    })
}

/// A replayed message of ours, as opposed to a tool result (also a `user` line,
/// with `parent_tool_use_id` null in the main thread, but with `tool_result` blocks).
fn is_replay(v: &Value) -> bool {
    match v.pointer("/message/content") {
        Some(Value::String(_)) => true,
        Some(Value::Array(blocks)) => {
            !blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        }
        _ => false,
    }
}

fn task_frame(v: &Value) -> TaskFrame {
    // task_updated carries its status inside `patch`.
    let status = str_field(v, "status").or_else(|| v.get("patch").and_then(|p| str_field(p, "status")));
    TaskFrame {
        subtype: str_field(v, "subtype").unwrap_or_else(|| "unknown".to_owned()),
        session_id: str_field(v, "session_id"),
        task_id: str_field(v, "task_id"),
        task_type: str_field(v, "task_type"),
        status,
        summary: str_field(v, "summary"),
        description: str_field(v, "description"),
    }
}

fn turn_result(v: &Value) -> TurnResult {
    let errors = v
        .get("errors")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    TurnResult {
        session_id: str_field(v, "session_id"),
        subtype: str_field(v, "subtype").unwrap_or_else(|| "unknown".to_owned()),
        is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        text: str_field(v, "result"),
        total_cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
        duration_ms: v.get("duration_ms").and_then(Value::as_i64),
        num_turns: v.get("num_turns").and_then(Value::as_i64),
        origin: v.get("origin").and_then(|o| str_field(o, "kind")),
        errors,
        usage: tokens(v.get("usage")),
    }
}

/// A result's `usage`; a count that is missing or not a whole number is 0.
fn tokens(usage: Option<&Value>) -> Tokens {
    let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    Tokens {
        input: count("input_tokens"),
        output: count("output_tokens"),
        cache_read: count("cache_read_input_tokens"),
        cache_creation: count("cache_creation_input_tokens"),
    }
}

fn turn_end(v: &Value) -> TurnEnd {
    let failed = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let has_api_fields =
        ["api_error_status", "api_error_type", "api_error"].iter().any(|k| v.get(k).is_some_and(|x| !x.is_null()));
    let status_in_text = status_in_result_text(v);
    let mut report = (failed && (has_api_fields || status_in_text.is_some())).then(|| api_error_report(v));
    if let Some(report) = report.as_mut() {
        // 2.1.197 leaves the status out (null) after repeated errors; its text still names it.
        report.status = report.status.or(status_in_text);
    }
    TurnEnd { terminal_reason: str_field(v, "terminal_reason"), api_error: report }
}

/// The status in a result text like `API Error: 529 …` or `API Error: Repeated
/// 529 Overloaded errors. …` (how the CLIs word a give-up).
fn status_in_result_text(v: &Value) -> Option<u16> {
    let rest = str_field(v, "result")?.strip_prefix("API Error: ")?.to_owned();
    let rest = rest.strip_prefix("Repeated ").unwrap_or(&rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (digits.len() == 3).then(|| digits.parse().ok()).flatten()
}

/// An assistant message of the main thread that stands for an API error.
fn is_main_api_error(v: &Value) -> bool {
    v.get("is_api_error_message").and_then(Value::as_bool) == Some(true)
        && v.get("parent_tool_use_id").is_none_or(Value::is_null)
}

fn api_error_report(v: &Value) -> ApiErrorReport {
    ApiErrorReport {
        status: v.get("api_error_status").and_then(Value::as_u64).and_then(|s| u16::try_from(s).ok()),
        error_type: str_field(v, "api_error_type"),
        kind: str_field(v, "api_error"),
        category: str_field(v, "error"),
        limit: v.pointer("/api_error_params/rate_limit_info").and_then(rate_limit_info),
    }
}

fn rate_limit_info(v: &Value) -> Option<RateLimitInfo> {
    Some(RateLimitInfo {
        status: str_field(v, "status")?,
        resets_at: v.get("resetsAt").and_then(Value::as_i64),
        limit_type: str_field(v, "rateLimitType"),
    })
}

fn control_request(v: &Value) -> CliEvent {
    let request_id = str_field(v, "request_id").unwrap_or_default();
    let req = v.get("request").unwrap_or(&Value::Null);
    let subtype = str_field(req, "subtype").unwrap_or_default();
    let request = match subtype.as_str() {
        "can_use_tool" => ControlRequest::CanUseTool {
            tool_name: str_field(req, "tool_name").unwrap_or_default(),
            input: req.get("input").cloned().unwrap_or(Value::Null),
            tool_use_id: str_field(req, "tool_use_id"),
        },
        "hook_callback" => {
            let hook = req.get("input").unwrap_or(&Value::Null);
            ControlRequest::HookCallback {
                callback_id: str_field(req, "callback_id").unwrap_or_default(),
                event: str_field(hook, "hook_event_name").unwrap_or_default(),
                tool_name: str_field(hook, "tool_name").unwrap_or_default(),
                input: hook.get("tool_input").cloned().unwrap_or(Value::Null),
                tool_use_id: str_field(req, "tool_use_id").or_else(|| str_field(hook, "tool_use_id")),
                cwd: str_field(hook, "cwd"),
            }
        }
        "mcp_message" => ControlRequest::McpMessage {
            server_name: str_field(req, "server_name").unwrap_or_default(),
            message: req.get("message").cloned().unwrap_or(Value::Null),
        },
        _ => ControlRequest::Other { subtype },
    };
    CliEvent::ControlRequest { request_id, request }
}

/// True when a result says `--resume` named a session the CLI does not have.
pub fn is_missing_session(r: &TurnResult) -> bool {
    r.is_error && r.errors.iter().any(|e| e.contains("No conversation found"))
}

/// A user message line. The uuid comes back in the replay when the CLI takes
/// the message into a turn. With `images`, the content is a list: the text
/// first, then one base64 image block each (the Messages API's own shape,
/// which the CLI passes on as it is: see docs/cli-observations.md); without,
/// the plain string every CLI version takes.
pub fn user_message(text: &str, images: &[ModelImage], uuid: &str) -> String {
    use base64::Engine as _;
    let content = if images.is_empty() {
        Value::String(text.to_owned())
    } else {
        let mut blocks = Vec::with_capacity(images.len() + 1);
        blocks.push(json!({"type": "text", "text": text}));
        for image in images {
            blocks.push(json!({
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": image.media_type,
                    "data": base64::engine::general_purpose::STANDARD.encode(&image.data),
                },
            }));
        }
        Value::Array(blocks)
    };
    json!({
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": null,
        "session_id": "",
        "uuid": uuid,
    })
    .to_string()
}

/// A successful answer to a control request.
pub fn control_success(request_id: &str, response: Value) -> String {
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
    .to_string()
}

/// The answer to an `mcp_message` request: the JSON-RPC response (`{}` for a notification).
pub fn mcp_response(request_id: &str, message: Value) -> String {
    control_success(request_id, json!({ "mcp_response": message }))
}

/// An error answer, for requests we cannot handle: the CLI would wait forever otherwise.
pub fn control_error(request_id: &str, error: &str) -> String {
    json!({
        "type": "control_response",
        "response": {"subtype": "error", "request_id": request_id, "error": error},
    })
    .to_string()
}

/// The `can_use_tool` allow answer. `updatedInput` is required by 2.1.197 and
/// replaces the tool's input, so it is always the original input.
pub fn allow(input: &Value) -> Value {
    json!({"behavior": "allow", "updatedInput": input})
}

pub fn deny(message: &str) -> Value {
    json!({"behavior": "deny", "message": message})
}

/// The id pincer registers its `PreToolUse` hook under.
pub const PRE_TOOL_HOOK: &str = "pincer_pre_tool_use";

/// The `initialize` request written before anything else: one `PreToolUse`
/// hook for every tool (`matcher` `*`), so every call reaches pincer's rules,
/// including those the CLI would run without asking (read-only Bash, or any
/// tool under a permission mode). A hook the host does not answer within
/// `timeout_secs` stops the call (seen on 2.1.197 and 2.1.330).
pub fn initialize_line(request_id: &str, timeout_secs: u64) -> String {
    json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {
            "subtype": "initialize",
            "hooks": {"PreToolUse": [{"matcher": "*", "hookCallbackIds": [PRE_TOOL_HOOK], "timeout": timeout_secs}]},
        },
    })
    .to_string()
}

/// What a `PreToolUse` hook answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookDecision {
    /// The call runs without `can_use_tool`.
    Allow,
    /// The call does not run; the reason reaches the model.
    Deny,
    /// The CLI asks through `can_use_tool`, even where it would not have asked.
    Ask,
}

/// The body of a `PreToolUse` hook's answer.
pub fn hook_answer(decision: HookDecision, reason: &str) -> Value {
    let decision = match decision {
        HookDecision::Allow => "allow",
        HookDecision::Deny => "deny",
        HookDecision::Ask => "ask",
    };
    json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }})
}

/// A control request of ours, e.g. `interrupt`.
pub fn control_request_line(request_id: &str, subtype: &str) -> String {
    json!({"type": "control_request", "request_id": request_id, "request": {"subtype": subtype}}).to_string()
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

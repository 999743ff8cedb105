//! What the CLI sent in one `POST /v1/messages`, as a test reads it.

use super::*;

#[derive(Clone, Debug)]
pub struct ApiRequest {
    pub(super) body: Value,
    pub(super) agent_id: Option<String>,
    /// The `x-api-key` (or `Authorization`) header the request arrived with.
    pub(super) credential: Option<String>,
    /// When it arrived (µs since the Unix epoch) and its body's size: the
    /// chat bench's breakdown tells the CLI's own time before a request from
    /// the model's.
    pub(super) arrived_us: i64,
    pub(super) bytes: usize,
    /// When its answer was handed over, or its client went away (µs since
    /// the Unix epoch); `None` while it is in flight.
    pub(super) ended_us: Option<i64>,
}

impl ApiRequest {
    pub fn new(body: Value, agent_id: Option<String>) -> Self {
        ApiRequest { body, agent_id, credential: None, arrived_us: 0, bytes: 0, ended_us: None }
    }

    /// When the request arrived, µs since the Unix epoch.
    pub fn arrived_us(&self) -> i64 {
        self.arrived_us
    }

    /// When it stopped being in flight (answered, or its client gone), µs since the Unix epoch.
    pub fn ended_us(&self) -> Option<i64> {
        self.ended_us
    }

    /// The body's size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The key the request carried (`x-api-key`, else `Authorization`).
    pub fn credential(&self) -> Option<&str> {
        self.credential.as_deref()
    }

    /// The raw JSON body.
    pub fn body(&self) -> &Value {
        &self.body
    }

    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or("claude-fake")
    }

    pub fn is_streaming(&self) -> bool {
        self.body["stream"].as_bool().unwrap_or(false)
    }

    /// Sent by a subagent (carries the `x-claude-code-agent-id` header).
    pub fn is_subagent(&self) -> bool {
        self.agent_id.is_some()
    }

    pub fn agent_id(&self) -> Option<&str> {
        self.agent_id.as_deref()
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map(Vec::as_slice).unwrap_or(&[])
    }

    /// The `role:"user"` messages after the last assistant message: what this turn
    /// answers.
    fn trailing_user_messages(&self) -> impl Iterator<Item = &Value> {
        let messages = self.messages();
        let start = messages.iter().rposition(|m| m["role"] == "assistant").map_or(0, |i| i + 1);
        messages[start..].iter().filter(|m| m["role"] == "user")
    }

    /// Text of the user content after the last assistant message: text blocks as
    /// is, `tool_result` blocks as `TOOL_RESULT(err=False):<content>` (Python-style
    /// bool, as in the recorded transcripts), joined with `\n`. Keeps the CLI's
    /// `<system-reminder>` blocks (task notifications live in one); `role:"system"`
    /// entries are left out.
    pub fn last_user_text(&self) -> String {
        let parts: Vec<String> = self.trailing_user_messages().map(|m| content_text(&m["content"])).collect();
        parts.join("\n")
    }

    /// [`Self::last_user_text`] without `<system-reminder>` blocks, trimmed: what the
    /// human (or pincer) wrote, or the tool results. Falls back to the full text when
    /// nothing else is left (a turn made only of a task notification).
    pub fn last_user_prompt(&self) -> String {
        let full = self.last_user_text();
        let stripped = strip_system_reminders(&full);
        if stripped.is_empty() {
            full
        } else {
            stripped
        }
    }

    /// The user content after the last assistant message holds a `tool_result`.
    pub fn has_tool_result(&self) -> bool {
        self.trailing_user_messages()
            .any(|m| m["content"].as_array().is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result")))
    }

    /// The `<task-notification>…</task-notification>` element of this turn, if the
    /// CLI started it because a background task ended.
    pub fn task_notification(&self) -> Option<String> {
        let text = self.last_user_text();
        let start = text.find(TASK_NOTIFICATION)?;
        let end =
            text[start..].find("</task-notification>").map_or(text.len(), |i| start + i + "</task-notification>".len());
        Some(text[start..end].to_string())
    }

    /// The whole `messages` array flattened to text (`role: text` lines, including
    /// `role:"system"` entries and `TOOL_USE(name):input` for tool calls), for
    /// asserting that history or a folded mid-turn message reached the model.
    pub fn all_text(&self) -> String {
        let lines: Vec<String> = self
            .messages()
            .iter()
            .map(|m| format!("{}: {}", m["role"].as_str().unwrap_or("?"), content_text(&m["content"])))
            .collect();
        lines.join("\n")
    }
}

/// Renders message content (a string or an array of blocks) as text.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let parts: Vec<String> = blocks.iter().filter_map(block_text).collect();
            parts.join("\n")
        }
        _ => String::new(),
    }
}

fn block_text(block: &Value) -> Option<String> {
    match block["type"].as_str()? {
        "text" => block["text"].as_str().map(str::to_string),
        "tool_result" => {
            let err = if block["is_error"].as_bool().unwrap_or(false) { "True" } else { "False" };
            Some(format!("TOOL_RESULT(err={err}):{}", content_text(&block["content"])))
        }
        "tool_use" => Some(format!("TOOL_USE({}):{}", block["name"].as_str().unwrap_or("?"), block["input"])),
        _ => None,
    }
}

fn strip_system_reminders(text: &str) -> String {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        match rest[start..].find(CLOSE) {
            Some(end) => rest = &rest[start + end + CLOSE.len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

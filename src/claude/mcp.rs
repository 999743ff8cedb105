//! The MCP wire for pincer's in-process tool server: the JSON-RPC messages the
//! CLI sends inside `mcp_message` control requests, and the answers we send back.
//!
//! The CLI runs the handshake (`initialize`, `notifications/initialized`,
//! `tools/list`) when a process starts, sometimes twice with the same JSON-RPC
//! ids, so nothing here keys on those ids: each request is answered by its
//! control `request_id`, and the JSON-RPC id is only echoed.

use serde_json::{json, Value};

/// The server's name; the model sees its tools as `mcp__pincer__<tool>`.
pub const SERVER_NAME: &str = "pincer";

/// `--mcp-config`: an `sdk` server is served by us over the control protocol,
/// so there is no file, no port and no extra process.
pub const SERVER_CONFIG: &str = r#"{"mcpServers":{"pincer":{"type":"sdk","name":"pincer"}}}"#;

/// The CLI's built-in tools that pincer's tools replace (`--disallowedTools`).
pub const REPLACED_BUILTINS: &str = "CronCreate,CronDelete,CronList";

/// The CLI's built-in tools that start a process or schedule work and that no
/// test traces yet (issue 44): withheld (`--disallowedTools`) until one does,
/// so nothing the gate has never seen runs.
pub const UNTRACED_BUILTINS: &str = "Monitor,Workflow,ScheduleWakeup,EnterWorktree,ExitWorktree";

/// `pincer doctor`'s line: which of the CLI's built-ins every agent runs without, and why.
pub fn withheld_line() -> String {
    let list = |tools: &str| tools.split(',').collect::<Vec<_>>().join(", ");
    format!(
        "withheld tools: {} (pincer's own tools replace them); {} (they start a process or schedule work \
         no test traces yet)",
        list(REPLACED_BUILTINS),
        list(UNTRACED_BUILTINS)
    )
}

/// What the model calls our tools: this prefix and the tool's name.
pub const TOOL_PREFIX: &str = "mcp__pincer__";

/// One JSON-RPC message from the CLI, understood.
#[derive(Clone, Debug, PartialEq)]
pub enum McpRequest {
    Initialize {
        protocol_version: Option<String>,
    },
    /// No answer is expected by JSON-RPC, but the control request still is.
    Notification,
    ListTools,
    CallTool {
        name: String,
        arguments: Value,
    },
    Unknown {
        method: String,
    },
}

/// A request and the JSON-RPC id to echo.
#[derive(Clone, Debug, PartialEq)]
pub struct Incoming {
    pub id: Value,
    pub request: McpRequest,
}

pub fn parse(message: &Value) -> Incoming {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let params = message.get("params").unwrap_or(&Value::Null);
    let request = match method {
        "initialize" => McpRequest::Initialize {
            protocol_version: params.get("protocolVersion").and_then(Value::as_str).map(str::to_owned),
        },
        m if m.starts_with("notifications/") => McpRequest::Notification,
        "tools/list" => McpRequest::ListTools,
        "tools/call" => McpRequest::CallTool {
            name: params.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: params.get("arguments").cloned().unwrap_or_else(|| json!({})),
        },
        other => McpRequest::Unknown { method: other.to_owned() },
    };
    Incoming { id, request }
}

/// A tool as `tools/list` describes it.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

/// What a tool call returns to the model; `is_error` marks a refusal or failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput { text: text.into(), is_error: false }
    }

    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput { text: text.into(), is_error: true }
    }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// What the CLI was answered for a notification in the recorded transcripts.
pub fn notification_ack() -> Value {
    json!({ "jsonrpc": "2.0", "result": {} })
}

/// Agrees to the client's protocol version: the server uses only `tools`,
/// which every version has.
pub fn initialize_result(protocol_version: Option<&str>) -> Value {
    json!({
        "protocolVersion": protocol_version.unwrap_or("2025-06-18"),
        "capabilities": { "tools": {} },
        "serverInfo": { "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
    })
}

pub fn tools_list(tools: &[ToolSpec]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema }))
        .collect();
    json!({ "tools": tools })
}

pub fn call_result(output: &ToolOutput) -> Value {
    json!({ "content": [{ "type": "text", "text": output.text }], "isError": output.is_error })
}

#[cfg(test)]
mod tests {
    #[test]
    fn doctor_names_every_withheld_tool() {
        let line = super::withheld_line();
        for tool in super::REPLACED_BUILTINS.split(',').chain(super::UNTRACED_BUILTINS.split(',')) {
            assert!(line.contains(tool), "{tool}: {line}");
        }
        assert!(line.contains("Monitor, Workflow"), "{line}");
    }

    use super::*;

    #[test]
    fn requests_from_the_transcripts_parse() {
        let init =
            json!({"method": "initialize", "params": {"protocolVersion": "2025-11-25"}, "jsonrpc": "2.0", "id": 0});
        assert_eq!(
            parse(&init),
            Incoming { id: json!(0), request: McpRequest::Initialize { protocol_version: Some("2025-11-25".into()) } }
        );
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(parse(&note), Incoming { id: Value::Null, request: McpRequest::Notification });
        let call = json!({"method": "tools/call", "params": {"name": "send_message", "arguments": {"text": "hi"},
                          "_meta": {"progressToken": 2}}, "jsonrpc": "2.0", "id": 2});
        assert_eq!(
            parse(&call).request,
            McpRequest::CallTool { name: "send_message".into(), arguments: json!({"text": "hi"}) }
        );
        assert_eq!(
            parse(&json!({"method": "resources/list", "id": 3})).request,
            McpRequest::Unknown { method: "resources/list".into() }
        );
    }

    #[test]
    fn answers_have_the_shape_the_cli_reads() {
        assert_eq!(
            result(&json!(2), call_result(&ToolOutput::error("no"))),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "no"}], "isError": true}})
        );
        let spec = ToolSpec { name: "t", description: "d", input_schema: json!({"type": "object"}) };
        assert_eq!(tools_list(&[spec])["tools"][0]["inputSchema"]["type"], "object");
    }
}

//! The tools pincer offers every agent, as `tools/list` describes them.

use serde_json::json;

use crate::claude::mcp::ToolSpec;
use crate::scheduler::limits::Limits;

/// Every tool, its schema stating the default limits (enough where only the names matter).
pub fn all() -> Vec<ToolSpec> {
    with_limits(&Limits::default())
}

/// Every tool, the schedule's schema stating the `limits` in force.
pub fn with_limits(limits: &Limits) -> Vec<ToolSpec> {
    let group = json!({
        "type": "string",
        "description": "Another group's name. Only the main group may target other groups; leave it out for your own group."
    });
    let mut tools = messaging(&group);
    tools.push(schedule(limits, &group));
    tools.extend(tasks());
    tools.push(ToolSpec {
        name: "list_groups",
        description: "List every registered group (main group only).",
        input_schema: json!({ "type": "object", "properties": {} }),
    });
    tools
}

/// What reaches the chat before the turn ends: a message, a file.
fn messaging(group: &serde_json::Value) -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "send_message",
            description: "Send a message to your group's chat right now, before your turn ends (progress, a heads-up).",
            input_schema: json!({
                "type": "object",
                "properties": { "text": { "type": "string" }, "group": group },
                "required": ["text"],
            }),
        },
        ToolSpec {
            name: "send_file",
            description: "Send a file from your group's folder to your group's chat: a JPEG or PNG goes as a photo, \
                          MP3 or M4A as audio, anything else as a document. The path is relative to your folder \
                          (or absolute inside it); links and files outside it are refused. The file is copied when \
                          you call this, so you may change or delete it afterwards.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "The file, e.g. \"out/chart.png\"." },
                    "caption": { "type": "string", "description": "A short text shown with the file (at most 1,000 characters)." },
                },
                "required": ["path"],
            }),
        },
    ]
}

/// `schedule_task`, its schema stating the `limits` in force.
fn schedule(limits: &Limits, group: &serde_json::Value) -> ToolSpec {
    // Said up front, so the agent does not learn the limits only from refusals.
    let limits_note = format!(
        "Runs at most once every {} (a shorter interval, or a cron expression that fires more often, is \
         refused); a group has at most {} active tasks.",
        humantime::format_duration(limits.min_interval),
        limits.max_active
    );
    ToolSpec {
        name: "schedule_task",
        description: "Schedule a prompt that pincer sends you later. schedule_type \"cron\": schedule_value is 5 \
                      fields, e.g. \"0 9 * * 1-5\" (09:00 on weekdays, in the configured time zone unless \
                      timezone is given); \"interval\": a duration such as \"2h\" or \"30m\"; \"once\": an RFC 3339 \
                      time, or a local time like \"2026-12-01T09:00\". context_mode \"group\" (default) runs it in \
                      this conversation; \"isolated\" runs it in a fresh session that does not see or change it. \
                      The result is posted to the chat.",
        input_schema: json!({
            "type": "object",
            "properties": {
                "prompt": { "type": "string", "description": "What you will be asked to do when it runs." },
                "schedule_type": { "type": "string", "enum": ["cron", "interval", "once"] },
                "schedule_value": { "type": "string", "description": limits_note },
                "context_mode": { "type": "string", "enum": ["group", "isolated"] },
                "timezone": { "type": "string", "description": "IANA zone for cron and local times, e.g. Europe/Berlin." },
                "group": group,
            },
            "required": ["prompt", "schedule_type", "schedule_value"],
        }),
    }
}

/// Listing and changing scheduled tasks.
fn tasks() -> Vec<ToolSpec> {
    let id = json!({ "type": "integer", "description": "The task's id, as list_tasks shows it." });
    vec![
        ToolSpec {
            name: "list_tasks",
            description: "List your group's scheduled tasks (the main group sees every group's).",
            input_schema: json!({ "type": "object", "properties": {} }),
        },
        ToolSpec {
            name: "pause_task",
            description: "Pause a scheduled task until it is resumed.",
            input_schema: json!({ "type": "object", "properties": { "id": id }, "required": ["id"] }),
        },
        ToolSpec {
            name: "resume_task",
            description: "Resume a paused task; its next run is computed from now.",
            input_schema: json!({ "type": "object", "properties": { "id": id }, "required": ["id"] }),
        },
        ToolSpec {
            name: "cancel_task",
            description: "Cancel a scheduled task for good.",
            input_schema: json!({ "type": "object", "properties": { "id": id }, "required": ["id"] }),
        },
    ]
}

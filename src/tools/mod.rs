//! Pincer's own tools for the agent, served in process as the MCP server
//! `pincer` over each session's control protocol: post to the chat now, send
//! a file from the group's folder, and manage scheduled prompts.
//!
//! A group's agent sees and touches only its own group's chat and schedules;
//! the main group's agent (`pincer groups add NAME --main`) may also name
//! another group and list all groups. A refused call returns an MCP error
//! result that explains the rule, and is logged.

pub(crate) mod specs;

use serde_json::Value;

use crate::claude::mcp::{self, McpRequest, ToolOutput};
use crate::domain::schedule::{ContextMode, Schedule, ScheduleId, Trigger};
use crate::domain::GroupName;
use crate::media::outgoing::{self, Outgoing, SendFileError};
use crate::outbox::Outbox;
use crate::scheduler::limits::Limits;
use crate::scheduler::manage::{self, ManageError};
use crate::scheduler::SchedulerHandle;
use crate::store::{GroupRecord, Groups, NewSchedule, Schedules, Store};

/// What the tools act on, shared by every session.
pub struct Toolbox {
    groups: Groups,
    schedules: Schedules,
    outbox: Outbox,
    scheduler: SchedulerHandle,
    /// The configured zone for cron expressions and local times.
    timezone: String,
    /// How often and how many schedules a group may have.
    limits: Limits,
    /// Where `send_file` reads the group's files and keeps its copies.
    outgoing: Outgoing,
}

/// Why a call did nothing; becomes the tool's error text.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    BadInput(String),
    #[error(transparent)]
    Manage(#[from] ManageError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    File(#[from] SendFileError),
}

type ToolResult = Result<String, ToolError>;

/// The longest caption `send_file` takes, in characters (a longer text goes
/// with `send_message`; Telegram shows 1,024 at most under a file).
const MAX_CAPTION: usize = 1000;

/// What `pause_task`, `resume_task` and `cancel_task` do.
enum Change {
    Pause,
    Resume,
    Cancel,
}

impl Toolbox {
    pub fn new(
        store: &Store,
        outbox: Outbox,
        scheduler: SchedulerHandle,
        timezone: String,
        limits: Limits,
        outgoing: Outgoing,
    ) -> Toolbox {
        Toolbox { groups: store.groups(), schedules: store.schedules(), outbox, scheduler, timezone, limits, outgoing }
    }

    /// Answers one `mcp_message` of `group`'s session with its JSON-RPC response.
    pub async fn answer(&self, group: &GroupName, server: &str, message: &Value) -> Value {
        let incoming = mcp::parse(message);
        if server != mcp::SERVER_NAME {
            return mcp::error(&incoming.id, mcp::METHOD_NOT_FOUND, &format!("no MCP server named {server:?} here"));
        }
        match incoming.request {
            McpRequest::Initialize { protocol_version } => {
                mcp::result(&incoming.id, mcp::initialize_result(protocol_version.as_deref()))
            }
            McpRequest::Notification => mcp::notification_ack(),
            McpRequest::ListTools => mcp::result(&incoming.id, mcp::tools_list(&specs::with_limits(&self.limits))),
            McpRequest::CallTool { name, arguments } => {
                let output = self.call(group, &name, &arguments).await;
                mcp::result(&incoming.id, mcp::call_result(&output))
            }
            McpRequest::Unknown { method } => {
                mcp::error(&incoming.id, mcp::METHOD_NOT_FOUND, &format!("method {method:?} is not supported"))
            }
        }
    }

    async fn call(&self, group: &GroupName, name: &str, args: &Value) -> ToolOutput {
        let caller = match self.groups.group(group.as_str()).await {
            Ok(caller) => caller,
            Err(e) => return ToolOutput::error(format!("pincer cannot read this group's settings: {e}")),
        };
        let result = match name {
            "send_message" => self.send_message(&caller, args).await,
            "send_file" => self.send_file(&caller, args).await,
            "schedule_task" => self.schedule_task(&caller, args).await,
            "list_tasks" => self.list_tasks(&caller).await,
            "pause_task" => self.change(&caller, args, Change::Pause).await,
            "resume_task" => self.change(&caller, args, Change::Resume).await,
            "cancel_task" => self.change(&caller, args, Change::Cancel).await,
            "list_groups" => self.list_groups(&caller).await,
            other => Err(ToolError::BadInput(format!("pincer has no tool named {other:?}"))),
        };
        match result {
            Ok(text) => {
                tracing::info!(%group, tool = name, "pincer tool call");
                ToolOutput::ok(text)
            }
            Err(e) => {
                if matches!(e, ToolError::Denied(_)) {
                    tracing::warn!(%group, tool = name, %e, "refused a pincer tool call");
                } else {
                    tracing::info!(%group, tool = name, %e, "a pincer tool call failed");
                }
                ToolOutput::error(e.to_string())
            }
        }
    }

    async fn send_message(&self, caller: &GroupRecord, args: &Value) -> ToolResult {
        let text = required(args, "text")?;
        let target = self.target(caller, optional(args, "group"), "send messages to").await?;
        // Stored with its outbox row, like every result: it reaches the chat even across a restart.
        self.outbox.agent_message(&target, &caller.name, text, None).await?;
        Ok(format!("sent to the chat of group {target}"))
    }

    /// A file from the caller's own folder to its own chat: copied now, sent
    /// through the outbox in order with the group's other replies.
    async fn send_file(&self, caller: &GroupRecord, args: &Value) -> ToolResult {
        let asked = required(args, "path")?.to_owned();
        let caption = optional(args, "caption").unwrap_or("");
        if caption.chars().count() > MAX_CAPTION {
            return Err(ToolError::BadInput(format!(
                "the caption is longer than {MAX_CAPTION} characters: send the file with a short caption and the \
                 rest with send_message"
            )));
        }
        let platform = self.outbox.address_of(caller).platform;
        let (outgoing, group) = (self.outgoing.clone(), caller.name.clone());
        let file = tokio::task::spawn_blocking(move || outgoing.take(&group, &asked, platform))
            .await
            .map_err(|e| ToolError::BadInput(format!("pincer could not read the file: {e}")))??;
        if let Err(e) = self.outbox.agent_message(&caller.name, &caller.name, caption, Some(&file)).await {
            outgoing::forget(&file);
            return Err(e.into());
        }
        Ok(format!(
            "queued for the chat of group {} as a {} ({}, {}); it is sent from pincer's copy, so you may change or \
             delete your file now",
            caller.name,
            file.kind.as_str(),
            file.name,
            crate::domain::media::human_bytes(file.bytes)
        ))
    }

    async fn schedule_task(&self, caller: &GroupRecord, args: &Value) -> ToolResult {
        let target = self.target(caller, optional(args, "group"), "schedule tasks for").await?;
        let tz = optional(args, "timezone").unwrap_or(&self.timezone);
        let trigger = Trigger::parse(required(args, "schedule_type")?, required(args, "schedule_value")?, tz)
            .map_err(ManageError::from)?;
        let context = match optional(args, "context_mode") {
            None => ContextMode::Group,
            Some(mode) => ContextMode::parse(mode)
                .ok_or_else(|| ToolError::BadInput(format!("context_mode {mode:?}: use \"group\" or \"isolated\"")))?,
        };
        let new = NewSchedule { group: target, prompt: required(args, "prompt")?.to_owned(), trigger, context };
        let schedule = manage::add(&self.schedules, new, &self.limits).await?;
        self.scheduler.poke();
        Ok(format!("scheduled: {}", schedule.describe()))
    }

    async fn list_tasks(&self, caller: &GroupRecord) -> ToolResult {
        let scope = (!caller.settings.main).then_some(&caller.name);
        let tasks = self.schedules.schedules(scope).await?;
        if tasks.is_empty() {
            return Ok("no scheduled tasks".into());
        }
        Ok(tasks.iter().map(Schedule::describe).collect::<Vec<_>>().join("\n"))
    }

    async fn list_groups(&self, caller: &GroupRecord) -> ToolResult {
        if !caller.settings.main {
            return Err(ToolError::Denied(format!(
                "only the main group's agent may list groups; group {} is not the main group",
                caller.name
            )));
        }
        let groups = self.groups.groups().await?;
        Ok(groups.iter().map(|g| g.name.to_string()).collect::<Vec<_>>().join("\n"))
    }

    /// pause/resume/cancel: the same ownership check, then the change.
    async fn change(&self, caller: &GroupRecord, args: &Value, change: Change) -> ToolResult {
        let id = args
            .get("id")
            .and_then(|v| v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim_start_matches('#').parse().ok())))
            .map(ScheduleId)
            .ok_or_else(|| ToolError::BadInput("give the task's id as `id` (a number from list_tasks)".into()))?;
        let schedule = self.schedules.schedule(id).await?;
        if schedule.group != caller.name && !caller.settings.main {
            return Err(ToolError::Denied(format!(
                "task #{id} belongs to another group; group {}'s agent may only change its own tasks \
                 (only the main group may change other groups' tasks)",
                caller.name
            )));
        }
        let changed = match change {
            Change::Pause => manage::pause(&self.schedules, id).await?,
            Change::Resume => manage::resume(&self.schedules, id, &self.limits).await?,
            Change::Cancel => manage::cancel(&self.schedules, id).await?,
        };
        self.scheduler.poke();
        Ok(changed.describe())
    }

    /// The group a call acts on: the caller's own, or (main group only) another by name.
    async fn target(
        &self,
        caller: &GroupRecord,
        requested: Option<&str>,
        action: &str,
    ) -> Result<GroupName, ToolError> {
        let Some(name) = requested.filter(|n| *n != caller.name.as_str()) else {
            return Ok(caller.name.clone());
        };
        if !caller.settings.main {
            return Err(ToolError::Denied(format!(
                "group {} may only {action} its own group, not {name:?}: only the main group's agent may target \
                 other groups (an operator makes a group main with `pincer groups set NAME --main`)",
                caller.name
            )));
        }
        Ok(self.groups.group(name).await?.name)
    }
}

fn optional<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

fn required<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    optional(args, key).ok_or_else(|| ToolError::BadInput(format!("`{key}` is required")))
}

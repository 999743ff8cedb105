//! The CLI's task lifecycle frames (`system` lines about background Bash
//! shells and subagents), parsed once into [`TaskEvent`].
//!
//! What the CLI sends (2.1.197 and 2.1.330; see `docs/cli-observations.md`):
//! - `task_started {task_id, tool_use_id, description, task_type, subagent_type?,
//!   is_backgrounded?, prompt?}`: also for foreground tools (`is_backgrounded: false`);
//! - `task_progress {task_id, tool_use_id, description, usage, last_tool_name}`:
//!   subagents only, while they work;
//! - `task_updated {task_id, patch: {status, end_time}}` (2.1.330);
//! - `task_notification {task_id, tool_use_id, status, output_file, summary,
//!   summary_is_report?, usage?}`: the task ended; with stdin open the CLI then
//!   starts a follow-up turn for a task that completed or failed;
//! - `background_tasks_changed {tasks: [{task_id, task_type, description, ...}]}`
//!   (2.1.330): the whole set of tasks running in the background now.
//!
//! Every field but the task id is optional: the CLI's frames drift between
//! versions, and a missing field must never cost the event. A frame without a
//! task id (or a list) is no task event at all; it is still stored raw.

use serde_json::Value;

/// One task lifecycle frame, understood.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskEvent {
    Started(TaskStarted),
    Progress(TaskProgress),
    Updated(TaskUpdated),
    Notification(TaskNotification),
    /// The tasks running in the background now (the whole set, not a change).
    BackgroundChanged(Vec<BackgroundTask>),
}

/// `task_started`: a tool call became a task.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskStarted {
    pub task_id: String,
    /// The tool call that started it (`toolu_…`).
    pub tool_use_id: Option<String>,
    /// The model's words for it ("bg sleep", "bg helper").
    pub description: Option<String>,
    /// `local_bash` or `local_agent`.
    pub task_type: Option<String>,
    /// A subagent's kind (`general-purpose`, ...).
    pub subagent_type: Option<String>,
    /// `false` for a foreground tool; absent on 2.1.197.
    pub is_backgrounded: Option<bool>,
    /// A subagent's prompt.
    pub prompt: Option<String>,
}

/// `task_progress`: a subagent is still working.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskProgress {
    pub task_id: String,
    pub tool_use_id: Option<String>,
    /// What it is doing now ("Running subagent echo").
    pub description: Option<String>,
    pub subagent_type: Option<String>,
    pub usage: Option<TaskUsage>,
    /// The tool it used last (`Bash`, `Read`, ...).
    pub last_tool_name: Option<String>,
}

/// `task_updated`: a task's state changed (2.1.330).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskUpdated {
    pub task_id: String,
    pub status: Option<TaskStatus>,
    /// `patch.end_time`, Unix milliseconds.
    pub end_time_ms: Option<i64>,
}

/// `task_notification`: a task ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskNotification {
    pub task_id: String,
    pub tool_use_id: Option<String>,
    pub status: Option<TaskStatus>,
    /// Where the CLI wrote the task's output; empty for a foreground tool.
    pub output_file: Option<String>,
    /// One line about how it ended, or a subagent's final report.
    pub summary: Option<String>,
    /// The summary is the subagent's own report rather than the CLI's line.
    pub summary_is_report: bool,
    pub usage: Option<TaskUsage>,
}

/// A task in a `background_tasks_changed` list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackgroundTask {
    pub task_id: String,
    pub task_type: Option<String>,
    pub subagent_type: Option<String>,
    pub description: Option<String>,
}

/// What a task has used so far (`usage` on progress and notification frames).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskUsage {
    pub total_tokens: Option<u64>,
    pub tool_uses: Option<u64>,
    pub duration_ms: Option<u64>,
}

/// A task's status as the CLI names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    Running,
    Completed,
    Failed,
    Killed,
    Stopped,
    /// A status this pincer does not know; kept as sent.
    Other(String),
}

impl TaskStatus {
    fn parse(s: &str) -> TaskStatus {
        match s {
            "running" => TaskStatus::Running,
            "completed" => TaskStatus::Completed,
            "failed" => TaskStatus::Failed,
            "killed" => TaskStatus::Killed,
            "stopped" => TaskStatus::Stopped,
            other => TaskStatus::Other(other.to_owned()),
        }
    }

    /// The task is over.
    pub fn is_terminal(&self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Killed | TaskStatus::Stopped)
    }

    /// With stdin open, the CLI starts a follow-up turn for a task that ended
    /// so (not for one it stopped or killed).
    pub fn starts_follow_up(&self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed)
    }
}

impl TaskEvent {
    /// The task this event is about (none for a whole-set list).
    pub fn task_id(&self) -> Option<&str> {
        match self {
            TaskEvent::Started(t) => Some(&t.task_id),
            TaskEvent::Progress(t) => Some(&t.task_id),
            TaskEvent::Updated(t) => Some(&t.task_id),
            TaskEvent::Notification(t) => Some(&t.task_id),
            TaskEvent::BackgroundChanged(_) => None,
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn status(v: &Value) -> Option<TaskStatus> {
    v.get("status").and_then(Value::as_str).map(TaskStatus::parse)
}

fn usage(v: &Value) -> Option<TaskUsage> {
    let u = v.get("usage")?.as_object()?;
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    Some(TaskUsage { total_tokens: n("total_tokens"), tool_uses: n("tool_uses"), duration_ms: n("duration_ms") })
}

/// The task event of a `system` frame, if it is one.
pub(super) fn parse(v: &Value) -> Option<TaskEvent> {
    let subtype = v.get("subtype").and_then(Value::as_str)?;
    if subtype == "background_tasks_changed" {
        let tasks = v.get("tasks")?.as_array()?;
        return Some(TaskEvent::BackgroundChanged(tasks.iter().filter_map(background_task).collect()));
    }
    let task_id = text(v, "task_id")?;
    Some(match subtype {
        "task_started" => TaskEvent::Started(TaskStarted {
            task_id,
            tool_use_id: text(v, "tool_use_id"),
            description: text(v, "description"),
            task_type: text(v, "task_type"),
            subagent_type: text(v, "subagent_type"),
            is_backgrounded: v.get("is_backgrounded").and_then(Value::as_bool),
            prompt: text(v, "prompt"),
        }),
        "task_progress" => TaskEvent::Progress(TaskProgress {
            task_id,
            tool_use_id: text(v, "tool_use_id"),
            description: text(v, "description"),
            subagent_type: text(v, "subagent_type"),
            usage: usage(v),
            last_tool_name: text(v, "last_tool_name"),
        }),
        "task_updated" => {
            let patch = v.get("patch").unwrap_or(&Value::Null);
            TaskEvent::Updated(TaskUpdated {
                task_id,
                // Older frames (and a drifting CLI) may carry it at the top.
                status: status(patch).or_else(|| status(v)),
                end_time_ms: patch.get("end_time").and_then(Value::as_i64),
            })
        }
        "task_notification" => TaskEvent::Notification(TaskNotification {
            task_id,
            tool_use_id: text(v, "tool_use_id"),
            status: status(v),
            output_file: text(v, "output_file"),
            summary: text(v, "summary"),
            summary_is_report: v.get("summary_is_report").and_then(Value::as_bool).unwrap_or(false),
            usage: usage(v),
        }),
        _ => return None,
    })
}

fn background_task(v: &Value) -> Option<BackgroundTask> {
    Some(BackgroundTask {
        task_id: text(v, "task_id")?,
        task_type: text(v, "task_type"),
        subagent_type: text(v, "subagent_type"),
        description: text(v, "description"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(line: &str) -> Option<TaskEvent> {
        parse(&serde_json::from_str(line).unwrap())
    }

    #[test]
    fn a_started_background_agent_keeps_its_description_type_and_prompt() {
        let e = event(
            r#"{"type":"system","subtype":"task_started","task_id":"a1","tool_use_id":"toolu_ag1","description":"bg helper","subagent_type":"general-purpose","is_backgrounded":true,"task_type":"local_agent","prompt":"Do the sub work"}"#,
        );
        let expected = TaskStarted {
            task_id: "a1".into(),
            tool_use_id: Some("toolu_ag1".into()),
            description: Some("bg helper".into()),
            task_type: Some("local_agent".into()),
            subagent_type: Some("general-purpose".into()),
            is_backgrounded: Some(true),
            prompt: Some("Do the sub work".into()),
        };
        assert_eq!(e, Some(TaskEvent::Started(expected)));
    }

    #[test]
    fn progress_and_notification_carry_usage_and_summary() {
        let progress = event(
            r#"{"type":"system","subtype":"task_progress","task_id":"a1","description":"Running subagent echo","usage":{"total_tokens":12,"tool_uses":1,"duration_ms":77},"last_tool_name":"Bash"}"#,
        );
        let Some(TaskEvent::Progress(p)) = progress else { panic!("{progress:?}") };
        assert_eq!(p.usage, Some(TaskUsage { total_tokens: Some(12), tool_uses: Some(1), duration_ms: Some(77) }));
        assert_eq!(
            (p.description.as_deref(), p.last_tool_name.as_deref()),
            (Some("Running subagent echo"), Some("Bash"))
        );

        let done = event(
            r#"{"type":"system","subtype":"task_notification","task_id":"a1","status":"completed","output_file":"/tmp/a1.output","summary":"SUBAGENT_FINAL","summary_is_report":true,"usage":{"total_tokens":10}}"#,
        );
        let Some(TaskEvent::Notification(n)) = done else { panic!("{done:?}") };
        assert_eq!(n.status, Some(TaskStatus::Completed));
        assert!(n.summary_is_report && n.status.as_ref().is_some_and(TaskStatus::starts_follow_up));
        assert_eq!(n.usage.and_then(|u| u.total_tokens), Some(10));
    }

    #[test]
    fn task_updated_reads_its_status_from_the_patch() {
        let e = event(
            r#"{"type":"system","subtype":"task_updated","task_id":"b1","patch":{"status":"killed","end_time":1795313907983}}"#,
        );
        let expected = TaskUpdated {
            task_id: "b1".into(),
            status: Some(TaskStatus::Killed),
            end_time_ms: Some(1_795_313_907_983),
        };
        assert_eq!(e, Some(TaskEvent::Updated(expected)));
        assert!(TaskStatus::Killed.is_terminal() && !TaskStatus::Killed.starts_follow_up());
    }

    #[test]
    fn background_tasks_changed_lists_the_running_set_and_skips_entries_without_an_id() {
        let e = event(
            r#"{"type":"system","subtype":"background_tasks_changed","tasks":[{"task_id":"b1","task_type":"local_bash","description":"bg sleep"},{"description":"no id"}]}"#,
        );
        let Some(TaskEvent::BackgroundChanged(tasks)) = e else { panic!("{e:?}") };
        assert_eq!(tasks.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), ["b1"]);
        let empty = event(r#"{"type":"system","subtype":"background_tasks_changed","tasks":[]}"#);
        assert_eq!(empty, Some(TaskEvent::BackgroundChanged(Vec::new())));
    }

    #[test]
    fn other_system_frames_and_frames_without_a_task_id_are_no_task_event() {
        for line in [
            r#"{"type":"system","subtype":"status","status":"requesting"}"#,
            r#"{"type":"system","subtype":"api_retry","attempt":1}"#,
            r#"{"type":"system","subtype":"task_started"}"#,
            r#"{"type":"system","subtype":"background_tasks_changed"}"#,
        ] {
            assert_eq!(event(line), None, "{line}");
        }
        let odd = event(r#"{"type":"system","subtype":"task_notification","task_id":"x","status":"paused"}"#);
        let Some(TaskEvent::Notification(n)) = odd else { panic!("{odd:?}") };
        assert_eq!(n.status, Some(TaskStatus::Other("paused".into())));
        assert!(!n.status.unwrap().is_terminal());
    }
}

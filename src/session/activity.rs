//! What a group's agent is doing, built without I/O from the CLI's typed
//! events: the actor feeds an [`ActivityBuilder`] ([`Fed`]) and publishes its
//! [`Activity`] when a feed changed it.
//!
//! Decisions kept here:
//! - A turn starts when its first message is written (or at `init`, for a
//!   follow-up turn the CLI starts itself) and ends at its result, which
//!   becomes [`Activity::last_done`].
//! - Main-thread tool calls are the turn's steps. A background subagent's
//!   calls (`parent_tool_use_id` naming the call that started it) only
//!   change what its [`BackgroundWork`] is doing. A *foreground* subagent's
//!   calls are steps of the turn: the turn waits for it, so what it does is
//!   what the turn does now.
//! - A task is background work when its `task_started` says
//!   `is_backgrounded`; a CLI that does not say (2.1.197) is read from the
//!   call's `run_in_background`, and failing that a subagent counts as
//!   background. `background_tasks_changed` is the authoritative set.
//! - The process's end clears everything; a turn it cut short is recorded
//!   as done, not ok.
//!
//! Bounded: at most [`MAX_BACKGROUND`] background entries and [`RECENT_CALLS`]
//! remembered calls; steps keep [`RECENT_STEPS`].

mod words;

use std::collections::VecDeque;

use tokio::time::Instant;

pub use words::{safe_text, words};

use crate::claude::protocol::{TaskEvent, TaskStarted, ToolCall, ToolKind};
use crate::domain::activity::{Activity, BackgroundWork, Step, TurnActivity, TurnDone, WorkKind, RECENT_STEPS};

/// The most background entries kept (the CLI runs far fewer).
pub const MAX_BACKGROUND: usize = 32;
/// How many backgrounded or subagent calls are remembered until their `task_started`.
const RECENT_CALLS: usize = 16;

/// One thing the builder is told.
#[derive(Clone, Copy, Debug)]
pub enum Fed<'a> {
    /// A message was written to the CLI, or a turn's `init` was read.
    TurnStarted,
    ToolCalls(&'a [ToolCall]),
    Task(&'a TaskEvent),
    /// The turn's result: whether it ended well, and its own cost.
    Result {
        ok: bool,
        cost_usd: Option<f64>,
    },
    /// The process is gone, and everything that ran in it.
    ProcessEnded,
}

/// A call remembered until its task starts: whether it asked for the
/// background, and a teammate's name.
#[derive(Debug)]
struct CallSeen {
    id: String,
    background: bool,
    name: Option<String>,
}

/// Builds one session's [`Activity`].
#[derive(Debug, Default)]
pub struct ActivityBuilder {
    activity: Activity,
    /// Turns started so far.
    turns: u64,
    /// The tool call that started each background task, and the task's id:
    /// how a subagent's calls find their [`BackgroundWork`].
    started_by: Vec<(String, String)>,
    recent_calls: VecDeque<CallSeen>,
}

impl ActivityBuilder {
    /// A builder for a session's next actor (after one ended): it starts from
    /// what was published and numbers its turns on from there, so a watcher
    /// never sees one turn number twice in a session's life.
    pub fn continuing(published: &Activity) -> ActivityBuilder {
        let last_turn = published.turn.as_ref().map(|t| t.number);
        let turns = last_turn.max(published.last_done.as_ref().map(|d| d.number)).unwrap_or(0);
        ActivityBuilder { activity: published.clone(), turns, ..ActivityBuilder::default() }
    }

    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Takes one event in; true when the activity changed.
    pub fn feed(&mut self, fed: Fed<'_>, now: Instant) -> bool {
        match fed {
            Fed::TurnStarted => self.turn_started(now),
            Fed::ToolCalls(calls) => calls.iter().fold(false, |changed, call| self.tool_call(call, now) | changed),
            Fed::Task(event) => self.task(event, now),
            Fed::Result { ok, cost_usd } => self.turn_ended(ok, cost_usd, now),
            Fed::ProcessEnded => {
                self.started_by.clear();
                self.recent_calls.clear();
                process_ended(&mut self.activity, now)
            }
        }
    }

    fn turn_started(&mut self, now: Instant) -> bool {
        if self.activity.turn.is_some() {
            return false;
        }
        self.turns += 1;
        let turn = TurnActivity { number: self.turns, started: now, steps: 0, now: None, recent: Vec::new() };
        self.activity.turn = Some(turn);
        true
    }

    fn turn_ended(&mut self, ok: bool, cost_usd: Option<f64>, now: Instant) -> bool {
        turn_ended(&mut self.activity, ok, cost_usd, now)
    }

    fn tool_call(&mut self, call: &ToolCall, now: Instant) -> bool {
        if call.background || matches!(call.tool, ToolKind::Agent { .. }) {
            self.remember(call);
        }
        let words = words(&call.tool);
        let Some(parent) = call.parent_tool_use_id.as_deref() else {
            self.turn_started(now);
            return self.step(words, now);
        };
        if let Some(work) = self.work_started_by(parent) {
            let changed = work.doing.as_deref() != Some(words.as_str());
            work.doing = Some(words);
            return changed;
        }
        // A foreground subagent: the turn waits for it. Outside any turn, a
        // subagent nobody knows of is not shown.
        self.step(words, now)
    }

    fn step(&mut self, words: String, now: Instant) -> bool {
        let Some(turn) = self.activity.turn.as_mut() else {
            return false;
        };
        let step = Step { words, at: now };
        turn.steps += 1;
        if turn.recent.len() == RECENT_STEPS {
            turn.recent.remove(0);
        }
        turn.recent.push(step.clone());
        turn.now = Some(step);
        true
    }

    fn remember(&mut self, call: &ToolCall) {
        if self.recent_calls.len() == RECENT_CALLS {
            self.recent_calls.pop_front();
        }
        let name = match &call.tool {
            ToolKind::Agent { name, .. } => name.as_deref().and_then(safe_text),
            _ => None,
        };
        self.recent_calls.push_back(CallSeen { id: call.id.clone(), background: call.background, name });
    }

    fn work_started_by(&mut self, tool_use_id: &str) -> Option<&mut BackgroundWork> {
        let (_, task_id) = self.started_by.iter().find(|(call, _)| call == tool_use_id)?;
        self.activity.background.iter_mut().find(|w| &w.id == task_id)
    }

    fn task(&mut self, event: &TaskEvent, now: Instant) -> bool {
        match event {
            TaskEvent::Started(t) => self.task_started(t, now),
            TaskEvent::Progress(p) => {
                let doing =
                    p.description.as_deref().and_then(safe_text).or_else(|| {
                        p.last_tool_name.as_deref().and_then(safe_text).map(|tool| format!("Using {tool}"))
                    });
                match (self.activity.background.iter_mut().find(|w| w.id == p.task_id), doing) {
                    (Some(work), Some(doing)) if work.doing.as_ref() != Some(&doing) => {
                        work.doing = Some(doing);
                        true
                    }
                    _ => false,
                }
            }
            TaskEvent::Updated(u) if u.status.as_ref().is_some_and(|s| s.is_terminal()) => self.remove(&u.task_id),
            TaskEvent::Updated(_) => false,
            // A notification says the task ended, whatever it calls the end
            // (unless it names a state that is no end).
            TaskEvent::Notification(n) if n.status.as_ref().is_none_or(|s| s.is_terminal()) => self.remove(&n.task_id),
            TaskEvent::Notification(_) => false,
            TaskEvent::BackgroundChanged(running) => {
                let before = self.activity.background.clone();
                let background = &mut self.activity.background;
                background.retain(|w| running.iter().any(|t| t.task_id == w.id));
                for task in running {
                    if background.len() < MAX_BACKGROUND && !background.iter().any(|w| w.id == task.task_id) {
                        let kind = kind_of(task.task_type.as_deref());
                        let label = label(kind, None, task.description.as_deref(), task.subagent_type.as_deref());
                        background.push(BackgroundWork {
                            id: task.task_id.clone(),
                            kind,
                            label,
                            started: now,
                            doing: None,
                        });
                    }
                }
                let running_ids = &self.activity.background;
                self.started_by.retain(|(_, task)| running_ids.iter().any(|w| &w.id == task));
                before != self.activity.background
            }
        }
    }

    fn task_started(&mut self, t: &TaskStarted, now: Instant) -> bool {
        let call = t.tool_use_id.as_deref().and_then(|id| self.recent_calls.iter().find(|c| c.id == id));
        let is_agent = t.task_type.as_deref() == Some("local_agent");
        let background = t.is_backgrounded.or(call.map(|c| c.background)).unwrap_or(is_agent);
        if !background {
            return false;
        }
        let kind = kind_of(t.task_type.as_deref());
        let name = call.and_then(|c| c.name.clone());
        let label = label(kind, name, t.description.as_deref(), t.subagent_type.as_deref());
        if let Some(tool_use_id) = &t.tool_use_id {
            if self.started_by.len() < MAX_BACKGROUND {
                self.started_by.push((tool_use_id.clone(), t.task_id.clone()));
            }
        }
        let background = &mut self.activity.background;
        // `background_tasks_changed` may have listed it first (2.1.330 does).
        if let Some(work) = background.iter_mut().find(|w| w.id == t.task_id) {
            let changed = work.label != label || work.kind != kind;
            (work.label, work.kind) = (label, kind);
            return changed;
        }
        if background.len() >= MAX_BACKGROUND {
            return false;
        }
        background.push(BackgroundWork { id: t.task_id.clone(), kind, label, started: now, doing: None });
        true
    }

    fn remove(&mut self, task_id: &str) -> bool {
        self.started_by.retain(|(_, task)| task != task_id);
        let before = self.activity.background.len();
        self.activity.background.retain(|w| w.id != task_id);
        before != self.activity.background.len()
    }
}

/// What a process's end leaves of `activity`: nothing running, and a turn it
/// cut short recorded as done, not ok. True when that changed anything. (The
/// supervisor uses it too, when an actor ended with its process.)
pub fn process_ended(activity: &mut Activity, now: Instant) -> bool {
    let changed = activity.working();
    turn_ended(activity, false, None, now);
    activity.background.clear();
    changed
}

fn turn_ended(activity: &mut Activity, ok: bool, cost_usd: Option<f64>, now: Instant) -> bool {
    let Some(turn) = activity.turn.take() else {
        return false;
    };
    let took = now.saturating_duration_since(turn.started);
    activity.last_done = Some(TurnDone { number: turn.number, took, steps: turn.steps, cost_usd, ok });
    true
}

fn kind_of(task_type: Option<&str>) -> WorkKind {
    match task_type {
        Some("local_agent") => WorkKind::Teammate,
        _ => WorkKind::Task,
    }
}

/// A teammate's name, or the task's description, or what kind it is.
fn label(kind: WorkKind, name: Option<String>, description: Option<&str>, subagent_type: Option<&str>) -> String {
    name.or_else(|| description.and_then(safe_text)).or_else(|| subagent_type.and_then(safe_text)).unwrap_or_else(
        || match kind {
            WorkKind::Task => "background command".to_owned(),
            WorkKind::Teammate => "subagent".to_owned(),
        },
    )
}

#[cfg(test)]
mod tests;

//! What a group's agent is doing, in words a person reads: the session builds
//! an [`Activity`] from the CLI's typed events and publishes it; the chat
//! adapters show it (one status message per slow turn, a line while
//! background work runs). No I/O here, and nothing the agent could use to
//! leak a secret: a [`Step`]'s words are already a summary (a command's first
//! words, a file's name, a URL's host), never a tool's whole input.
//!
//! Times are `tokio::time::Instant`s so the presenters' tests run under
//! paused time.

use std::time::Duration;

use tokio::time::Instant;

/// The newest state of one group's agent, as its session publishes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Activity {
    /// The turn running now, if any.
    pub turn: Option<TurnActivity>,
    /// Background tasks and teammates still running, in the order they started
    /// (in a turn or after it).
    pub background: Vec<BackgroundWork>,
    /// The last turn that ended, for a summary line.
    pub last_done: Option<TurnDone>,
}

impl Activity {
    /// Whether anything is running: a turn, or background work.
    pub fn working(&self) -> bool {
        self.turn.is_some() || !self.background.is_empty()
    }
}

/// One turn in progress.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnActivity {
    /// Counts the session's turns, so a watcher can tell a new turn from the
    /// same one changing.
    pub number: u64,
    /// When the turn started (its first message written to the CLI).
    pub started: Instant,
    /// Tool calls begun in this turn.
    pub steps: u32,
    /// The newest step, if any.
    pub now: Option<Step>,
    /// The last few steps, oldest first, newest included (at most
    /// [`RECENT_STEPS`]); what the verbose view lists.
    pub recent: Vec<Step>,
}

/// How many steps [`TurnActivity::recent`] keeps.
pub const RECENT_STEPS: usize = 5;

/// One thing the agent did, already in words ("Reading notes.md",
/// "Running `cargo test`", "Searching the web: rust lease fencing").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub words: String,
    pub at: Instant,
}

/// Work that runs beside or after a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackgroundWork {
    /// The CLI's task id: how its later frames find it.
    pub id: String,
    pub kind: WorkKind,
    /// A short name: the model's description of the task, or the teammate's name.
    pub label: String,
    pub started: Instant,
    /// What it is doing now, when its progress frames say.
    pub doing: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkKind {
    /// A backgrounded shell command (`local_bash`).
    Task,
    /// A subagent or agent-team teammate (`local_agent`).
    Teammate,
}

/// How a turn ended, for the summary line.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnDone {
    pub number: u64,
    pub took: Duration,
    pub steps: u32,
    /// This turn's own cost, when the CLI reported one.
    pub cost_usd: Option<f64>,
    /// False when the turn ended in an error or was interrupted.
    pub ok: bool,
}

/// How much a group's chat is shown of its agent's work (`[progress] mode`,
/// `pincer groups set NAME --progress`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// Nothing but the answer: no receipt reaction, no status message.
    Off,
    /// One status message per slow turn, and a line while background work runs.
    #[default]
    Status,
    /// The same, listing the last few steps too.
    Verbose,
}

/// What becomes of a turn's status message when its answer arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenDone {
    /// Deleted, so the answer itself is what notifies.
    #[default]
    Delete,
    /// Edited into one line: "Done in 2 m 14 s · 12 steps · $0.31".
    Summary,
}

pub mod wire;

//! One actor per group that owns the group's CLI child and its stdin.
//!
//! The [`SessionHandle`] is the only way in: it sends [`Command`]s over a
//! bounded channel and reads a [`SessionStatus`] the actor publishes after
//! every event. Only the actor writes to the child's stdin.
//!
//! Each actor runs under a supervisor (`supervisor`) that starts it again if
//! it ends while pincer is not stopping. The actor wires small parts that
//! decide without I/O: `lifecycle` (which process, restarts), `turn` (what
//! is owed and running), `hang` (hung turns), `hold` (usage-limit resends),
//! `approvals` (tool calls left to people), `activity` (what the chat is
//! shown of the agent's work, published on [`SessionHandle::activity`]). The
//! CLI is reached only through the port in `cli`.

mod activity;
mod actor;
mod api_error;
mod approvals;
mod budget;
mod cli;
pub mod drain;
#[cfg(test)]
pub(crate) mod fake_cli;
mod files;
mod hang;
mod hold;
mod intake;
mod lifecycle;
mod mirror;
mod pending;
mod permission;
mod provenance;
mod rights;
mod slots;
mod supervisor;
#[cfg(test)]
pub(crate) mod tests;
mod transcript;
mod trust;
mod turn;

/// How long a session with nothing to do lives on before it retires.
pub use actor::RETIRE_AFTER;
pub use cli::{CliChild, CliPort, RealCli, StartError, StartRequest, Started};
/// Where a file tool writes: public for the check against the kernel in `tests/path_kernel.rs`.
pub use files::{place, Place};
pub use slots::Slots;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::domain::activity::Activity;
use crate::domain::{ApprovalRequest, GroupName, Inbound, InboundId, Missed};
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::store::{Budgets, GroupRecord, Groups, Journal, Preparing, Queue, Transcripts};
use crate::tools::Toolbox;

/// How many commands may wait for one group's actor.
const COMMAND_QUEUE: usize = 64;

/// What every session actor needs, bundled once.
pub struct SessionDeps {
    /// The groups' inbound queue: the router stores, the sessions pull.
    pub queue: Queue,
    /// Messages whose media is still prepared (the router's side of the queue).
    pub preparing: Preparing,
    /// What sessions did besides their results: events, task frames, decisions.
    pub journal: Journal,
    pub groups: Groups,
    pub budgets: Budgets,
    pub config: Arc<Config>,
    /// What a reload changes: the budget default is read from here.
    pub live: crate::config::Live,
    /// Starts each CLI process (in its sandbox, with its environment and proxy key).
    pub cli: Arc<dyn CliPort>,
    /// Where results, notices and the agents' posts go: stored, then delivered.
    pub outbox: Outbox,
    /// The CLI transcripts a cluster node keeps for the group's next owner.
    pub transcripts: Transcripts,
    /// Tool calls waiting for a person; channel adapters show and answer them.
    pub approvals: async_channel::Sender<ApprovalRequest>,
    /// The next approval id (unique within this process).
    pub approval_ids: AtomicU64,
    /// Live CLI processes; waiting groups take turns.
    pub slots: Slots,
    pub metrics: Arc<Metrics>,
    /// Pincer's own MCP tools, served to every session.
    pub tools: Arc<Toolbox>,
    /// On a cluster node, which groups this node may run now (every group on one machine).
    pub leases: crate::store::Leases,
    /// On a cluster node, where the group's folder snapshots go.
    pub folders: crate::store::Folders,
    /// On a cluster node, where each group's activity is mirrored for the
    /// node serving its chat (`mirror`).
    pub activities: crate::store::Activities,
    pub shutdown: CancellationToken,
    /// A cluster node drains (`pincer drain`, SIGTERM): each session hands
    /// its group over at its next turn boundary (`drain`), with these waits.
    pub drain: CancellationToken,
}

/// What a session actor can be asked to do. A group's own session takes chat
/// messages from the store's queue (see [`SessionHandle::wake`]); only a
/// throwaway session is handed its one message as a command.
#[derive(Debug)]
// One command per chat message: boxing the message would buy nothing measurable.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// An inbound message, already stored under `id`, with the chat messages
    /// the agent missed before it. The session renders what the agent reads,
    /// marking admins by the group's settings it also decides tools by.
    /// `done` (a scheduled run's) hears how the turn that answers it ended.
    Message { id: InboundId, msg: Inbound, missed: Missed, done: Option<oneshot::Sender<TurnOutcome>> },
    /// Interrupt the current turn, if any.
    Interrupt,
    /// End the current CLI session; the next message starts a fresh one.
    NewSession,
    /// The group's settings changed in the store (`pincer groups set`): the
    /// tool policy applies from the next decision on.
    ReloadSettings,
}

/// How the turn that answered a message ended, for whoever waits on it (a
/// scheduled run). A dropped sender means the session stopped first.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnOutcome {
    pub is_error: bool,
    /// The result's chat text, or why pincer gave up on the message.
    pub text: String,
    /// The turn's own cost.
    pub cost_usd: Option<f64>,
}

/// A snapshot of one group's session, published by its actor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStatus {
    pub live: bool,
    pub live_since: Option<SystemTime>,
    pub session_id: Option<String>,
    /// Messages written (or about to be) that no turn has answered yet.
    pub pending: usize,
    /// Between a turn's `init` and its `result`, or a follow-up turn that a
    /// task notification is about to start.
    pub in_turn: bool,
    pub running_tasks: usize,
    /// Messages a usage limit refused go out again at this time (`/stop` cancels).
    pub resend_at: Option<SystemTime>,
    /// The group's queue is not taken now, and why. A held group is not busy.
    pub held: Option<QueueHold>,
}

/// Why a group's messages wait in its queue, and until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueHold {
    /// Its budget is reached until the period turns (or it is raised).
    Budget { until: SystemTime },
    /// Its CLI could not start; the next start is tried then.
    CannotStart { retry_at: SystemTime },
}

impl SessionStatus {
    /// Whether the session has work in flight (idle close waits for this to end).
    pub fn busy(&self) -> bool {
        self.pending > 0 || self.in_turn || self.running_tasks > 0
    }

    /// Whether `/stop` has a turn to stop: one runs, or a live CLI was
    /// written a message it has not begun its turn for yet (it reports the
    /// turn's `init` a moment after it takes the message, and an interrupt
    /// stops that turn too).
    pub fn interruptible(&self) -> bool {
        self.in_turn || (self.live && self.pending > 0)
    }
}

/// The way to reach one group's session actor.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    group: GroupName,
    commands: async_channel::Sender<Command>,
    status: watch::Receiver<SessionStatus>,
    /// What the agent is doing, as the actor publishes it.
    activity: watch::Receiver<Activity>,
    /// Commands sent but not yet taken by the actor, so "idle" is never
    /// reported while a message is still in the queue.
    queued: Arc<AtomicUsize>,
    /// The group's queue in the store: wakes, and who waits on which message.
    intake: Arc<intake::Intake>,
    /// Says whether a closed session means pincer is stopping.
    shutdown: CancellationToken,
}

/// The session took no more messages: pincer is stopping (the only time a
/// supervised session ends while someone can still send to it).
#[derive(Debug, thiserror::Error)]
pub enum SessionClosed {
    #[error("the session of group `{0}` has stopped (pincer is shutting down)")]
    ShuttingDown(GroupName),
    #[error(
        "the session of group `{0}` is not running; send the message again, and check pincer's log if this repeats"
    )]
    NotRunning(GroupName),
}

impl SessionHandle {
    /// Starts the (supervised) actor of `group` on `tracker`.
    pub fn spawn(group: &GroupRecord, deps: Arc<SessionDeps>, tracker: &TaskTracker) -> SessionHandle {
        SessionHandle::supervised(group.clone(), deps, tracker, false)
    }

    /// Starts a throwaway session for `group`: it starts fresh, never stores
    /// its session id, and ends once this handle (and its clones) is dropped
    /// and its queue is empty. Isolated scheduled runs use it.
    pub fn spawn_isolated(group: &GroupRecord, deps: Arc<SessionDeps>, tracker: &TaskTracker) -> SessionHandle {
        let fresh = GroupRecord { session_id: None, ..group.clone() };
        SessionHandle::supervised(fresh, deps, tracker, true)
    }

    fn supervised(group: GroupRecord, deps: Arc<SessionDeps>, tracker: &TaskTracker, isolated: bool) -> SessionHandle {
        let (tx, rx) = async_channel::bounded(COMMAND_QUEUE);
        let (status_tx, status_rx) =
            watch::channel(SessionStatus { session_id: group.session_id.clone(), ..SessionStatus::default() });
        let (activity_tx, activity_rx) = watch::channel(Activity::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let intake = Arc::new(intake::Intake::default());
        let shutdown = deps.shutdown.clone();
        let name = group.name.clone();
        let mirror = (deps.leases.is_cluster_node() && !isolated).then(|| {
            let node = deps.config.cluster.node_id().as_str().to_owned();
            mirror::run(name.clone(), activity_rx.clone(), deps.activities.clone(), node, shutdown.clone())
        });
        let supervised = supervisor::Supervised {
            group,
            deps,
            commands: rx,
            status: Arc::new(status_tx),
            activity: Arc::new(activity_tx),
            queued: queued.clone(),
            isolated,
            intake: intake.clone(),
        };
        tracker.spawn(supervised.run());
        if let Some(mirror) = mirror {
            tracker.spawn(mirror);
        }
        SessionHandle { group: name, commands: tx, status: status_rx, activity: activity_rx, queued, shutdown, intake }
    }

    /// A message of this group was stored `queued`: the session takes it
    /// from the store when it can. Never waits, whatever the session is doing.
    /// False when this session has retired: start a fresh one (the router's
    /// `session` does), whose first pull finds the message.
    #[must_use = "a retired session takes nothing: wake a fresh one"]
    pub fn wake(&self) -> bool {
        self.intake.wake()
    }

    /// Whether the session retired (it had nothing to do for a while): its
    /// actor is gone, and the router starts a fresh one for the group.
    pub fn is_retired(&self) -> bool {
        self.intake.is_retired()
    }

    /// Runs `store_message` (which stores a queued message of this group and
    /// returns its id) with the session's pulls held back, registers `done`
    /// for it and wakes the session: the session cannot take the message
    /// before `done` is there to hear how its turn ended. When this session
    /// has retired, nothing is stored and `done` comes back (`Ok(Err(done))`):
    /// use a fresh session.
    pub async fn store_watched<F, E>(
        &self,
        store_message: F,
        done: oneshot::Sender<TurnOutcome>,
    ) -> Result<Result<InboundId, oneshot::Sender<TurnOutcome>>, E>
    where
        F: std::future::Future<Output = Result<InboundId, E>>,
    {
        let Some(_pulls_held) = self.intake.hold_pulls().await else {
            return Ok(Err(done));
        };
        let id = store_message.await?;
        self.intake.watch(id, done);
        // Cannot be refused: no session retires while pulls are held.
        let woken = self.intake.wake();
        debug_assert!(woken, "a session retired while a watched message was registered");
        Ok(Ok(id))
    }

    pub async fn send(&self, command: Command) -> Result<(), SessionClosed> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.commands.send(command).await.map_err(|_| {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            if self.shutdown.is_cancelled() {
                SessionClosed::ShuttingDown(self.group.clone())
            } else {
                SessionClosed::NotRunning(self.group.clone())
            }
        })
    }

    pub fn status(&self) -> SessionStatus {
        self.status.borrow().clone()
    }

    /// What the group's agent is doing now (the turn's steps, background
    /// work, the last turn done), published by the actor only when it
    /// changes: `changed().await` on the receiver wakes once per change.
    pub fn activity(&self) -> watch::Receiver<Activity> {
        self.activity.clone()
    }

    /// Whether commands are queued or the session has work in flight.
    pub fn busy(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > 0 || self.intake.wakes() > 0 || self.status.borrow().busy()
    }

    /// Whether a message waits for an answer or a turn is running (background
    /// tasks alone don't count).
    pub fn turn_in_progress(&self) -> bool {
        let status = self.status.borrow();
        self.queued.load(Ordering::SeqCst) > 0 || self.intake.wakes() > 0 || status.pending > 0 || status.in_turn
    }

    /// Waits until the actor publishes a new status (or has stopped).
    pub async fn changed(&mut self) -> bool {
        self.status.changed().await.is_ok()
    }
}

#[cfg(test)]
mod status_tests {
    use super::SessionStatus;

    #[test]
    fn a_message_written_to_a_live_cli_is_a_turn_to_stop_before_its_init() {
        let idle = SessionStatus { live: true, ..SessionStatus::default() };
        assert!(!idle.interruptible());
        assert!(SessionStatus { pending: 1, ..idle.clone() }.interruptible(), "written, no init read yet");
        assert!(SessionStatus { in_turn: true, ..idle.clone() }.interruptible());
        // Waiting for a process to start: nothing runs to interrupt.
        assert!(!SessionStatus { live: false, pending: 1, ..idle }.interruptible());
    }
}

//! The session actor: a loop over one closed set of events (a command, a
//! stdout line, the child's exit, the idle deadline, a hung turn, a resend
//! after a usage limit, an approval's answer, shutdown) that owns the group's
//! CLI child. It decides nothing itself: the parts do ([`Lifecycle`],
//! [`Turn`], [`HangWatch`], [`UsageHold`], [`Approvals`],
//! [`ActivityBuilder`]); the actor feeds them events and time and does the
//! I/O they ask for (the store, the outbox, the CLI's stdin, the watches).
//!
//! The handlers live beside this file: `stdin` (starting the process and
//! writing to it), `stdout` (what the CLI prints),
//! `recovery` (exits, hangs, idle close, usage-limit resends, starts that
//! failed), `tools` (control requests and approvals), `budget` (the queue
//! held while the budget is reached), `transcript` (a cluster node's copy of
//! the CLI's transcript: captured, synced, restored).

mod budget;
mod drain;
mod folder;
mod ownership;
mod provenance;
mod recovery;
mod stdin;
mod stdout;
mod tools;
mod transcript;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::activity::ActivityBuilder;
use super::api_error::Seen;
use super::approvals::{Answered, Approvals};
use super::budget::BudgetGate;
use super::cli::CliChild;
use super::hang::HangWatch;
use super::hold::UsageHold;
use super::intake::{Intake, Puller};
use super::lifecycle::{Lifecycle, StartHold};
use super::pending::PendingMessage;
use super::turn::Turn;
use super::{Command, SessionDeps, SessionStatus, TurnOutcome};
use crate::claude::process::StdoutLine;
use crate::domain::activity::Activity;
use crate::domain::{GroupName, InboundId, ToolsFor};
use crate::sandbox::IsolatedHome;
use crate::store::{GroupRecord, GroupSettings, InboundState};

/// A live CLI process and what belongs to it.
struct Live {
    child: Box<dyn CliChild>,
    lines: mpsc::Receiver<StdoutLine>,
    last_activity: Instant,
    /// The last stdout line (or line we wrote): a turn quiet for
    /// `turn_timeout` since then is hung.
    quiet_since: Instant,
    since: SystemTime,
    /// When it started (monotonic): the bound for its hook's answer counts from here.
    started: Instant,
    /// Which process this is (counted per actor): answers meant for an earlier one are dropped.
    generation: u64,
    /// The CLI's running cost total for this process, to store each turn's own share.
    cost_so_far: f64,
    /// Held while the process lives: this is the `max_live_sessions` bound.
    _slot: super::slots::Slot,
    /// The folders as the process sees them: file tools are decided by path.
    view: crate::domain::files::FileView,
    /// Which of its frames pincer believes.
    trust: super::trust::Trust,
    /// The tools it was started without: when the group's list changes them,
    /// it closes at its next idle moment, and the next message resumes the
    /// session in a process that offers the new set.
    withheld: Vec<&'static str>,
}

/// One event the loop reacts to.
enum Event {
    Command(Command),
    /// The leases this node holds changed (a cluster node's).
    Leases,
    /// The node's deadline moved: the CLI's guard is told.
    Deadline,
    /// Messages were queued for the group in the store.
    Woken,
    Approved(Answered),
    Line(StdoutLine),
    Exited,
    IdleDeadline,
    /// A turn printed nothing for `turn_timeout`.
    HungTurn,
    /// The CLI did not answer pincer's `initialize` within `turn_timeout`.
    HookOverdue,
    /// The usage limit that held messages back has reset.
    ResendDue,
    /// A CLI that could not start is tried again.
    StartDue,
    /// Nothing to do for [`RETIRE_AFTER`]: the actor may end.
    Retire,
    /// This cluster node drains: the group goes at its next turn boundary.
    Drain,
    /// A drain's wait for the turn or the tasks is over: look again.
    DrainDue,
    Shutdown,
}

/// A session with no process and nothing to do for this long retires: its
/// actor ends and the router drops it (a message starts a fresh one).
pub const RETIRE_AFTER: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// What the group's settings decide for its session, re-read before each new process.
struct Policy {
    allowed_tools: Vec<String>,
    /// Channel ids of the people who answer approvals.
    admins: Vec<String>,
    /// Whose messages may make the agent use tools.
    tools: ToolsFor,
    /// The main group's agent writes the shared memory in `groups/global`.
    is_main: bool,
    /// Its own budget, part by part over `[budget]`.
    budget: crate::domain::budget::Budget,
    /// `[sandbox.groups.NAME] skip_permissions`: the operator lets every tool
    /// run in this group's sandbox without asking (refused unconfined).
    skip_permissions: bool,
}

impl Policy {
    fn of(settings: &GroupSettings, default_tools: &[String], skip_permissions: bool) -> Policy {
        Policy {
            skip_permissions,
            allowed_tools: settings.allowed_tools.clone().unwrap_or_else(|| default_tools.to_vec()),
            admins: settings.admins.clone(),
            tools: settings.tools,
            is_main: settings.main,
            budget: settings.budget,
        }
    }
}

/// Counts a taken command down once it is handled, or when its handler
/// panics: a supervised restart must not leave the session "busy" forever.
struct CountedDown(Arc<AtomicUsize>);

impl Drop for CountedDown {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) struct SessionActor {
    group: GroupName,
    policy: Policy,
    deps: Arc<SessionDeps>,
    commands: async_channel::Receiver<Command>,
    status: Arc<watch::Sender<SessionStatus>>,
    /// What the agent is doing: built from the CLI's events, published on change.
    activity: ActivityBuilder,
    activity_tx: Arc<watch::Sender<Activity>>,
    queued: Arc<AtomicUsize>,
    /// The group's queue: wakes from the router, and who waits on which message.
    intake: Arc<Intake>,
    /// Where this actor is in the queue.
    puller: Puller,
    /// Groups waiting for a live slot: an idle session then closes at once.
    slot_waiters: watch::Receiver<super::slots::Need>,
    live: Option<Live>,
    life: Lifecycle,
    /// Messages waiting for a CLI that could not start.
    start: StartHold,
    turn: Turn,
    hang: HangWatch,
    hold: UsageHold,
    approvals: Approvals,
    next_request: u64,
    /// A throwaway session (an isolated scheduled run): its session id is never stored.
    isolated: bool,
    /// An isolated run's CLI home, made at its first start and removed with the actor.
    own_home: Option<IsolatedHome>,
    /// What the current turn printed about an API error before its result.
    seen: Seen,
    /// Where the chat reads times (`timezone`).
    zone: chrono_tz::Tz,
    /// Whether the budget lets the queue be taken, and until when not.
    budget: BudgetGate,
    /// Whether this node held the group's lease when last looked (always on one machine).
    was_owned: bool,
    /// Changes when this node's leases do.
    leases: watch::Receiver<u64>,
    /// A cluster node's deadline, which the live CLI's guard enforces alone.
    deadline: watch::Receiver<Option<Instant>>,
    /// This node drains: what the group still waits for before it goes.
    drain: Option<super::drain::Drain>,
    /// When the drain looks again without another event.
    drain_due: Option<Instant>,
    /// The drain let the group's lease go.
    handed_over: bool,
}

impl SessionActor {
    pub(super) fn new(
        group: &GroupRecord,
        deps: Arc<SessionDeps>,
        commands: async_channel::Receiver<Command>,
        status: Arc<watch::Sender<SessionStatus>>,
        activity_tx: Arc<watch::Sender<Activity>>,
        queued: Arc<AtomicUsize>,
        intake: Arc<Intake>,
    ) -> Self {
        let skip = deps.config.sandbox.group(group.name.as_str()).skip_permissions;
        let policy = Policy::of(&group.settings, &deps.config.claude.allowed_tools, skip);
        let slot_waiters = deps.slots.waiting();
        let activity = ActivityBuilder::continuing(&activity_tx.borrow());
        // Checked at config load; UTC is only the fallback of a config built in code.
        let zone = deps.config.timezone.parse().unwrap_or(chrono_tz::UTC);
        let leases = deps.leases.changes();
        let deadline = deps.leases.deadline();
        let was_owned = deps.leases.holds_group(&group.name);
        SessionActor {
            was_owned,
            leases,
            deadline,
            group: group.name.clone(),
            policy,
            deps,
            commands,
            status,
            activity,
            activity_tx,
            queued,
            intake,
            puller: Puller::default(),
            slot_waiters,
            live: None,
            life: Lifecycle::new(group.session_id.clone()),
            start: StartHold::default(),
            turn: Turn::default(),
            hang: HangWatch::default(),
            hold: UsageHold::default(),
            approvals: Approvals::default(),
            next_request: 0,
            isolated: false,
            own_home: None,
            seen: Seen::default(),
            budget: BudgetGate::default(),
            zone,
            drain: None,
            drain_due: None,
            handed_over: false,
        }
    }

    /// Makes this a throwaway session (see `SessionHandle::spawn_isolated`):
    /// it is handed its one message, and never takes the group's queue.
    pub(super) fn isolated(mut self) -> Self {
        self.isolated = true;
        self.puller = Puller::idle();
        self
    }

    pub(super) async fn run(mut self) {
        // What waits in the queue already (after a restart) is taken first,
        // and the wakes an ended actor left unanswered are this one's now.
        self.puller.woken(self.intake.wakes());
        self.take_queued().await;
        self.publish();
        self.puller.settle(&self.intake);
        let mut last_event = Instant::now();
        loop {
            let retire_at = self.dormant().then(|| last_event + RETIRE_AFTER);
            match self.next_event(retire_at).await {
                Event::Command(cmd) => {
                    // Counted down only now: until the status below shows the
                    // message as pending, `queued` is what keeps the session "busy".
                    let counted = CountedDown(self.queued.clone());
                    self.on_command(cmd).await;
                    drop(counted);
                }
                Event::Woken => self.puller.woken(self.intake.wakes()),
                Event::Leases => self.on_ownership().await,
                Event::Deadline => self.tell_guard(),
                Event::Approved(answered) => self.on_approved(answered).await,
                Event::Line(line) => self.on_line(line).await,
                Event::Exited => self.on_exit().await,
                Event::IdleDeadline => self.on_idle().await,
                Event::HungTurn => self.on_hung().await,
                Event::HookOverdue => {
                    if let Some(live) = self.live.as_mut() {
                        live.trust.overdue();
                    }
                }
                Event::ResendDue => self.on_resend_due().await,
                Event::StartDue => self.on_start_due().await,
                Event::Retire if self.dormant() && self.intake.retire() => {
                    tracing::debug!(group = %self.group, "the session had nothing to do for a while; retiring");
                    return;
                }
                Event::Retire => {}
                Event::Drain => self.on_drain(),
                Event::DrainDue => {}
                Event::Shutdown => break,
            }
            self.end_hookless().await;
            self.after_results().await;
            self.take_queued().await;
            if self.draining() {
                self.drain_step().await;
            }
            self.publish();
            self.puller.settle(&self.intake);
            last_event = Instant::now();
        }
        self.stop_live("shutdown").await;
        self.publish();
    }

    /// No process, nothing taken or held, no prompt out, no queue to read:
    /// the actor could end without anyone noticing. Never for a throwaway
    /// session (its handle's owner decides when it ends).
    fn dormant(&self) -> bool {
        !self.isolated
            && self.live.is_none()
            && self.turn.pending.is_empty()
            && self.hold.due().is_none()
            && !self.start.holding()
            && !self.approvals.asking()
            && !self.puller.due(1)
    }

    async fn next_event(&mut self, retire_at: Option<Instant>) -> Event {
        let idle_at = self.idle_deadline();
        let hung_at = self.hang_deadline();
        let hook_at = self.hook_deadline();
        let resend_at = self.hold.due();
        let live = self.live.is_some();
        let lines = async {
            match self.live.as_mut() {
                Some(live) => live.lines.recv().await,
                None => std::future::pending().await,
            }
        };
        let waiters = self.slot_waiters.changed();
        tokio::select! {
            biased;
            _ = self.deps.shutdown.cancelled() => Event::Shutdown,
            Ok(()) = self.leases.changed() => Event::Leases,
            _ = self.deps.drain.cancelled(), if self.drain.is_none() && !self.isolated => Event::Drain,
            _ = sleep_until(self.drain_due) => Event::DrainDue,
            Ok(()) = self.deadline.changed(), if live => Event::Deadline,
            line = lines => line.map_or(Event::Exited, Event::Line),
            cmd = self.commands.recv() => cmd.map_or(Event::Shutdown, Event::Command),
            _ = self.intake.woken() => Event::Woken,
            answered = self.approvals.next() => Event::Approved(answered),
            _ = sleep_until(idle_at) => Event::IdleDeadline,
            // Before the hang: a process without the hook is stopped for that.
            _ = sleep_until(hook_at) => Event::HookOverdue,
            _ = sleep_until(hung_at) => Event::HungTurn,
            _ = sleep_until(resend_at) => Event::ResendDue,
            _ = sleep_until(self.start.due()) => Event::StartDue,
            // The budget's period turned: the queue may be taken again.
            _ = sleep_until(self.budget.reopen_at()) => Event::Woken,
            _ = sleep_until(retire_at) => Event::Retire,
            // Someone wants a slot: re-check whether this session can give its own up.
            Ok(()) = waiters, if live => Event::IdleDeadline,
        }
    }

    fn idle_deadline(&self) -> Option<Instant> {
        let live = self.live.as_ref()?;
        let idle_at = if self.slot_waiters.borrow().unclaimed() > 0 || self.tools_changed() {
            Instant::now()
        } else {
            live.last_activity + self.deps.config.claude.idle_timeout
        };
        self.turn.idle_deadline(idle_at)
    }

    /// The tools the group can never use now.
    fn withheld(&self) -> Vec<&'static str> {
        if self.policy.skip_permissions {
            return Vec::new();
        }
        super::permission::withheld(&self.policy.allowed_tools, !self.policy.admins.is_empty())
    }

    /// The live process offers another set of tools than the group's list allows now.
    fn tools_changed(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.withheld != self.withheld())
    }

    fn hang_deadline(&self) -> Option<Instant> {
        let live = self.live.as_ref()?;
        let turn_timeout = self.deps.config.claude.turn_timeout;
        self.hang.deadline(live.quiet_since, self.turn.awaiting_result(), self.approvals.asking(), turn_timeout)
    }

    /// The bound for the CLI's answer to pincer's `initialize`: as long as
    /// a turn may stay quiet, counted from the process's start.
    fn hook_deadline(&self) -> Option<Instant> {
        let live = self.live.as_ref()?;
        live.trust.hooks_pending().then(|| live.started + self.deps.config.claude.turn_timeout)
    }

    fn publish(&self) {
        let status = SessionStatus {
            live: self.live.is_some(),
            live_since: self.live.as_ref().map(|l| l.since),
            session_id: self.life.session_id().map(str::to_owned),
            pending: self.turn.pending.len(),
            in_turn: self.turn.in_turn(Instant::now()),
            running_tasks: self.turn.running_tasks(),
            resend_at: self.hold.resend_at(),
            held: self.queue_hold(),
        };
        // Always notify: a watcher may be waiting on `queued`, which is not in the status.
        self.status.send_replace(status);
    }

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Message { id, msg, missed, done } => self.take_message(id, msg, missed, Vec::new(), done).await,
            Command::Interrupt => {
                self.cancel_resend().await;
                if self.live.is_some() {
                    let line = self.interrupt_line();
                    self.write(&line).await;
                }
            }
            Command::ReloadSettings => self.reload_settings().await,
            Command::NewSession => {
                // Whatever runs in the old session ends with it; pending messages
                // (if any) go to the fresh one.
                self.stop_live("new_session").await;
                self.store_session_id(None).await;
                self.notice(
                    "Started a fresh session: the agent no longer remembers this conversation (it stays in pincer's \
                     history). Its memory file CLAUDE.md is kept.",
                )
                .await;
                if !self.turn.pending.is_empty() {
                    self.restart().await;
                }
            }
        }
    }

    /// Fails every pending message and tells the chat why.
    async fn give_up(&mut self, text: &str) {
        let ids = self.turn.pending.drain_ids();
        self.set_state(&ids, InboundState::Failed).await;
        self.tell_watchers(&ids, TurnOutcome { is_error: true, text: text.to_owned(), cost_usd: None });
        self.log_event("gave_up", self.life.session_id(), Some(text)).await;
        self.notice(text).await;
    }

    fn tell_watchers(&mut self, ids: &[InboundId], outcome: TurnOutcome) {
        self.intake.tell(ids, &outcome);
    }

    async fn notice(&self, text: impl AsRef<str>) {
        self.deps.outbox.notice(&self.group, text.as_ref()).await;
    }

    async fn set_state(&self, ids: &[InboundId], state: InboundState) {
        if let Err(e) = self.deps.queue.settle(&self.group, ids, state).await {
            tracing::error!(group = %self.group, %e, "cannot update inbound state");
        }
    }

    async fn log_event(&self, kind: &str, session_id: Option<&str>, detail: Option<&str>) {
        // A throwaway session's events must not read as the group's own session's.
        let kind = if self.isolated { format!("isolated_{kind}") } else { kind.to_owned() };
        crate::metrics::counters::counters().session_event(self.group.as_str(), &kind);
        if let Err(e) = self.deps.journal.record_session_event(&self.group, &kind, session_id, detail).await {
            tracing::error!(group = %self.group, %e, "cannot store a session event");
        }
    }
}

/// Sleeps until `at`, or forever without one (a disabled `select!` arm).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn ids(messages: &[PendingMessage]) -> Vec<InboundId> {
    messages.iter().map(|m| m.id).collect()
}

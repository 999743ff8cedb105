//! The session actor: a loop over one closed set of events (a command, a
//! stdout line, the child's exit, the idle deadline, a hung turn, a resend
//! after a usage limit, shutdown) that owns the group's CLI child, what it
//! still owes, and which tasks run in it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};

use super::api_error::{self, LimitPlan, Seen, TurnFailure, UsageLimit};
use super::intake::{Intake, Puller, Taken, TAKEN_AT_ONCE};
use super::pending::{Pending, PendingMessage};
use super::permission::{decide, summarize, Rules, Verdict};
use super::rights::{self, Voice};
use super::{Command, SessionDeps, SessionStatus, TurnOutcome};
use crate::claude::lines::LineRead;
use crate::claude::process::{CliProcess, StdoutLine};
use crate::claude::protocol::{self, CliEvent, ControlRequest, TurnEnd};
use crate::domain::{
    Approval, ApprovalAnswer, ApprovalRequest, GroupName, Inbound, InboundId, Missed, PermissionDecision, TaskFrame,
    ToolsFor, TurnResult,
};
use crate::groups;
use crate::sandbox::proxy::KeyLease;
use crate::sandbox::IsolatedHome;
use crate::store::{GroupRecord, GroupSettings, InboundState, StoreError};

/// A live CLI process and what belongs to it.
struct Live {
    process: CliProcess,
    lines: mpsc::Receiver<StdoutLine>,
    last_activity: Instant,
    /// The last stdout line (or line we wrote): a turn quiet for
    /// `turn_timeout` since then is hung.
    quiet_since: Instant,
    since: SystemTime,
    /// Which process this is (counted per actor): answers meant for an earlier one are dropped.
    generation: u64,
    /// The CLI's running cost total for this process, to store each turn's own share.
    cost_so_far: f64,
    /// Held while the process lives: this is the `max_live_sessions` bound.
    _slot: OwnedSemaphorePermit,
    /// The proxy accepts this process's placeholder key until it is dropped.
    _lease: Option<KeyLease>,
    /// A Docker container's env file, removed when the process is gone.
    _env_file: Option<crate::sandbox::docker::EnvFile>,
}

/// How long a follow-up turn is expected after a background task ends. It
/// normally starts within milliseconds; the bound keeps a CLI that never starts
/// one from holding the session busy forever.
const FOLLOW_UP_WINDOW: Duration = Duration::from_secs(30);

/// How long a hung turn gets to end after pincer's interrupt before the
/// process is stopped (at most `shutdown_grace`).
const HANG_GRACE: Duration = Duration::from_secs(5);

/// Messages held back by a usage limit go out again this long after the
/// announced reset, so a clock slightly ahead of the API's does not meet the
/// limit still in force.
const RESEND_MARGIN: Duration = Duration::from_secs(2);

/// The first restart after a crash waits this long; each crash in a row doubles it.
const FIRST_CRASH_BACKOFF: Duration = Duration::from_millis(250);

/// The longest wait before a restart, however many crashes came in a row
/// (`max_restarts` has no upper bound).
const MAX_CRASH_BACKOFF: Duration = Duration::from_secs(60);

/// How long to wait before restarting after the `crashes`-th crash in a row
/// (counted from 1): a little more on each, never more than [`MAX_CRASH_BACKOFF`].
fn crash_backoff(crashes: u32) -> Duration {
    let doublings = crashes.saturating_sub(1);
    2u32.checked_pow(doublings)
        .and_then(|factor| FIRST_CRASH_BACKOFF.checked_mul(factor))
        .map_or(MAX_CRASH_BACKOFF, |backoff| backoff.min(MAX_CRASH_BACKOFF))
}

/// Messages a usage limit refused, waiting to be written again once.
struct Held {
    messages: Vec<PendingMessage>,
    /// When they go out again, by the wall clock (what the chat was told) and the monotonic one.
    at: SystemTime,
    deadline: Instant,
}

/// One event the loop reacts to.
enum Event {
    Command(Command),
    /// Messages were queued for the group in the store.
    Woken,
    Approved(Answered),
    Line(StdoutLine),
    Exited,
    IdleDeadline,
    /// A turn printed nothing for `turn_timeout`.
    HungTurn,
    /// The usage limit that held messages back has reset.
    ResendDue,
    Shutdown,
}

/// A person's answer (or the timeout) for one `can_use_tool` request.
struct Answered {
    generation: u64,
    request_id: String,
    tool_name: String,
    tool_use_id: Option<String>,
    input: Value,
    answer: ApprovalAnswer,
}

/// How many approval answers may wait for the actor.
const ANSWER_QUEUE: usize = 16;

/// What the group's settings decide for its session, re-read before each new process.
struct Policy {
    allowed_tools: Vec<String>,
    /// Channel ids of the people who answer approvals.
    admins: Vec<String>,
    /// Whose messages may make the agent use tools.
    tools: ToolsFor,
    /// The main group's agent writes the shared memory in `groups/global`.
    is_main: bool,
}

impl Policy {
    fn of(settings: &GroupSettings, default_tools: &[String]) -> Policy {
        Policy {
            allowed_tools: settings.allowed_tools.clone().unwrap_or_else(|| default_tools.to_vec()),
            admins: settings.admins.clone(),
            tools: settings.tools,
            is_main: settings.main,
        }
    }
}

pub(super) struct SessionActor {
    group: GroupName,
    policy: Policy,
    answers_tx: mpsc::Sender<Answered>,
    answers: mpsc::Receiver<Answered>,
    generation: u64,
    deps: Arc<SessionDeps>,
    commands: async_channel::Receiver<Command>,
    status: watch::Sender<SessionStatus>,
    queued: Arc<AtomicUsize>,
    /// The group's queue: wakes from the router, and who waits on which message.
    intake: Arc<Intake>,
    /// Where this actor is in the queue.
    puller: Puller,
    /// Groups waiting for a live slot: an idle session then closes at once.
    slot_waiters: watch::Receiver<super::slots::Need>,
    live: Option<Live>,
    pending: Pending,
    tasks: HashSet<String>,
    in_turn: bool,
    /// A background task just ended, so the CLI is about to start a follow-up
    /// turn for it; until then (or this deadline) the session is not idle.
    follow_up_until: Option<Instant>,
    session_id: Option<String>,
    /// The stored session could not be resumed: the next process starts fresh.
    start_fresh: bool,
    /// Crashes since the last good result; bounded by `max_restarts`.
    crashes: u32,
    next_request: u64,
    /// A throwaway session (an isolated scheduled run): its session id is never stored.
    isolated: bool,
    /// An isolated run's CLI home, made at its first start and removed with the actor.
    own_home: Option<IsolatedHome>,
    /// What the current turn printed about an API error before its result.
    seen: Seen,
    /// Hung turns since the last good result: the second in a row gives up.
    hangs: u32,
    /// Pincer is stopping a hung turn: its interrupted result is stored, but
    /// its messages stay pending for the restart, and the chat hears why.
    stopping_hung: bool,
    /// Results read so far (a hung turn's interrupt waits for the next one).
    results_read: u64,
    /// `can_use_tool` requests waiting for a person: a turn waiting for an
    /// admin is not hung.
    approvals_waiting: usize,
    /// Messages refused by a usage limit, waiting for its reset.
    held: Option<Held>,
    /// Where the chat reads times (`timezone`).
    zone: chrono_tz::Tz,
}

impl SessionActor {
    pub(super) fn new(
        group: &GroupRecord,
        deps: Arc<SessionDeps>,
        commands: async_channel::Receiver<Command>,
        status: watch::Sender<SessionStatus>,
        queued: Arc<AtomicUsize>,
        intake: Arc<Intake>,
    ) -> Self {
        let policy = Policy::of(&group.settings, &deps.config.claude.allowed_tools);
        let slot_waiters = deps.slots.waiting();
        let (answers_tx, answers) = mpsc::channel(ANSWER_QUEUE);
        // Checked at config load; UTC is only the fallback of a config built in code.
        let zone = deps.config.timezone.parse().unwrap_or(chrono_tz::UTC);
        SessionActor {
            group: group.name.clone(),
            policy,
            answers_tx,
            answers,
            generation: 0,
            deps,
            commands,
            status,
            queued,
            intake,
            puller: Puller::default(),
            slot_waiters,
            live: None,
            pending: Pending::default(),
            tasks: HashSet::new(),
            in_turn: false,
            follow_up_until: None,
            session_id: group.session_id.clone(),
            start_fresh: false,
            crashes: 0,
            next_request: 0,
            isolated: false,
            own_home: None,
            seen: Seen::default(),
            hangs: 0,
            stopping_hung: false,
            results_read: 0,
            approvals_waiting: 0,
            held: None,
            zone,
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
        // What waits in the queue already (after a restart) is taken first.
        self.take_queued().await;
        self.publish();
        loop {
            match self.next_event().await {
                Event::Command(cmd) => {
                    self.on_command(cmd).await;
                    // Only now: until the status below shows the message as
                    // pending, `queued` is what keeps the session "busy".
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                }
                Event::Woken => self.puller.woken(self.intake.wakes()),
                Event::Approved(answered) => self.on_approved(answered).await,
                Event::Line(line) => self.on_line(line).await,
                Event::Exited => self.on_exit().await,
                Event::IdleDeadline => self.on_idle().await,
                Event::HungTurn => self.on_hung().await,
                Event::ResendDue => self.on_resend_due().await,
                Event::Shutdown => break,
            }
            self.take_queued().await;
            self.publish();
            self.puller.settle(&self.intake);
        }
        self.stop_live("shutdown").await;
        self.publish();
    }

    async fn next_event(&mut self) -> Event {
        let idle_at = self.idle_deadline();
        let hung_at = self.hang_deadline();
        let resend_at = self.held.as_ref().map(|h| h.deadline);
        let live = self.live.is_some();
        let lines = async {
            match self.live.as_mut() {
                Some(live) => live.lines.recv().await,
                None => std::future::pending().await,
            }
        };
        let idle = async {
            match idle_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let hung = async {
            match hung_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let resend = async {
            match resend_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let waiters = self.slot_waiters.changed();
        tokio::select! {
            biased;
            _ = self.deps.shutdown.cancelled() => Event::Shutdown,
            line = lines => line.map_or(Event::Exited, Event::Line),
            cmd = self.commands.recv() => cmd.map_or(Event::Shutdown, Event::Command),
            _ = self.intake.woken() => Event::Woken,
            Some(answered) = self.answers.recv() => Event::Approved(answered),
            _ = idle => Event::IdleDeadline,
            _ = hung => Event::HungTurn,
            _ = resend => Event::ResendDue,
            // Someone wants a slot: re-check whether this session can give its own up.
            Ok(()) = waiters, if live => Event::IdleDeadline,
        }
    }

    /// Work that keeps the session from being idle, the follow-up expectation aside.
    fn working(&self) -> bool {
        !self.pending.is_empty() || self.in_turn || !self.tasks.is_empty()
    }

    fn awaiting_follow_up(&self) -> bool {
        self.follow_up_until.is_some_and(|until| Instant::now() < until)
    }

    fn idle_deadline(&self) -> Option<Instant> {
        let live = self.live.as_ref()?;
        if self.working() {
            return None;
        }
        let idle_at = if self.slot_waiters.borrow().unclaimed() > 0 {
            Instant::now()
        } else {
            live.last_activity + self.deps.config.claude.idle_timeout
        };
        Some(self.follow_up_until.map_or(idle_at, |until| idle_at.max(until)))
    }

    /// When the turn in progress counts as hung: `turn_timeout` after the
    /// last line, while a message waits for its answer or a turn runs, and
    /// nobody is asked for an approval. Background tasks alone never are.
    fn hang_deadline(&self) -> Option<Instant> {
        let live = self.live.as_ref()?;
        let waiting_for_a_result = self.in_turn || !self.pending.is_empty();
        if !waiting_for_a_result || self.approvals_waiting > 0 || self.stopping_hung {
            return None;
        }
        Some(live.quiet_since + self.deps.config.claude.turn_timeout)
    }

    fn publish(&self) {
        let status = SessionStatus {
            live: self.live.is_some(),
            live_since: self.live.as_ref().map(|l| l.since),
            session_id: self.session_id.clone(),
            pending: self.pending.len(),
            in_turn: self.in_turn || self.awaiting_follow_up(),
            running_tasks: self.tasks.len(),
            resend_at: self.held.as_ref().map(|h| h.at),
        };
        // Always notify: a watcher may be waiting on `queued`, which is not in the status.
        self.status.send_replace(status);
    }

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Message { id, msg, missed, done } => {
                if let Some(done) = done {
                    self.intake.watch(id, done);
                }
                self.take_message(id, msg, missed).await;
            }
            Command::Interrupt => {
                self.cancel_resend().await;
                if self.live.is_some() {
                    self.next_request += 1;
                    let line =
                        protocol::control_request_line(&format!("pincer_interrupt_{}", self.next_request), "interrupt");
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
                if !self.pending.is_empty() {
                    self.restart().await;
                }
            }
        }
    }

    /// Takes what waits in the group's queue, while there is room: each
    /// message with the chat lines before it, in order.
    async fn take_queued(&mut self) {
        while self.puller.due(TAKEN_AT_ONCE.saturating_sub(self.pending.len())) {
            let room = TAKEN_AT_ONCE.saturating_sub(self.pending.len());
            let taken = self.puller.pull(&self.deps.store, &self.intake, &self.group, room).await;
            if taken.is_empty() {
                return;
            }
            for Taken { id, msg, missed } in taken {
                self.take_message(id, msg, missed).await;
            }
            if self.deps.shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Makes `msg` pending and writes it to a live process (starting one).
    async fn take_message(&mut self, id: InboundId, msg: Inbound, missed: Missed) {
        let voice = Voice::of(&msg, &missed, &self.policy.admins);
        let prompt = msg.prompt(&missed, &self.policy.admins);
        self.pending.push(id, prompt, msg.accepted_at, voice);
        if self.ensure_live().await {
            self.write_pending_tail().await;
        }
    }

    /// Writes the newest pending message (the one just pushed).
    async fn write_pending_tail(&mut self) {
        let Some((id, line, accepted_at)) =
            self.pending.last().map(|m| (m.id, protocol::user_message(&m.text, &m.uuid), m.accepted_at))
        else {
            return;
        };
        if self.write(&line).await {
            self.deps.metrics.record_stdin_write(accepted_at.elapsed());
        }
        self.set_state(&[id], InboundState::Sent).await;
    }

    /// Writes a line to the live process. A failed write means the process is
    /// dying: its exit is handled when stdout closes, and pending messages are
    /// written again to the next process then.
    async fn write(&mut self, line: &str) -> bool {
        let Some(live) = self.live.as_mut() else {
            return false;
        };
        live.last_activity = Instant::now();
        live.quiet_since = live.last_activity;
        match live.process.write_line(line).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "writing to the CLI failed; it will be restarted");
                false
            }
        }
    }

    /// Starts a CLI process unless one lives. Waits (FIFO) for a free slot.
    /// Returns false when no process could be started; the chat was told why.
    async fn ensure_live(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        let slot = tokio::select! {
            slot = self.deps.slots.acquire() => slot,
            _ = self.deps.shutdown.cancelled() => return false,
        };
        self.reload_settings().await;
        let resume = if self.start_fresh { None } else { self.session_id.clone() };
        let groups_dir =
            std::path::absolute(&self.deps.config.groups_dir).unwrap_or_else(|_| self.deps.config.groups_dir.clone());
        // The folder is the CLI's cwd; a missing one would read as "CLI not found".
        // Recreating it never touches existing memory.
        if let Err(e) = groups::create(&groups_dir, &self.group, &self.deps.config.assistant_name) {
            let text = format!(
                "Cannot create the group's folder in {}: {e}. Your message was not answered; \
                 fix the folder's permissions (groups_dir in pincer.toml), then send it again.",
                groups_dir.display()
            );
            self.give_up(&text).await;
            return false;
        }
        if self.isolated && self.own_home.is_none() {
            match self.deps.launcher.isolated_home(&self.group).await {
                Ok(home) => self.own_home = home,
                Err(e) => {
                    tracing::error!(group = %self.group, %e, "cannot prepare the isolated run's CLI home");
                    self.give_up(&format!("{e}. Your message was not answered; fix this, then send it again.")).await;
                    return false;
                }
            }
        }
        let own_home = self.own_home.as_ref().map(IsolatedHome::path);
        let launch =
            match self.deps.launcher.launch(&self.group, resume.as_deref(), self.policy.is_main, own_home).await {
                Ok(launch) => launch,
                Err(e) => {
                    tracing::error!(group = %self.group, %e, "cannot prepare the CLI's sandbox");
                    self.give_up(&format!("{e}. Your message was not answered; fix this, then send it again.")).await;
                    return false;
                }
            };
        let spec = launch.spec;
        match CliProcess::spawn(&spec) {
            Ok((process, lines)) => {
                self.start_fresh = false;
                let kind = if resume.is_some() { "resumed" } else { "started" };
                self.log_event(kind, resume.as_deref(), None).await;
                self.generation += 1;
                self.live = Some(Live {
                    process,
                    lines,
                    last_activity: Instant::now(),
                    quiet_since: Instant::now(),
                    since: SystemTime::now(),
                    generation: self.generation,
                    cost_so_far: 0.0,
                    _slot: slot,
                    _lease: launch.lease,
                    _env_file: launch.env_file,
                });
                true
            }
            Err(e) => {
                tracing::error!(group = %self.group, %e, "cannot start the CLI");
                let text = format!(
                    "{e}. Your message was not answered. Fix `[claude] command` in pincer.toml \
                     (or PINCER_CLAUDE__COMMAND), or run `pincer setup`, then send it again."
                );
                self.give_up(&text).await;
                false
            }
        }
    }

    /// Re-reads the group's tool policy, so `pincer groups set` applies from
    /// the next process on without restarting pincer.
    async fn reload_settings(&mut self) {
        match self.deps.store.group(self.group.as_str()).await {
            Ok(record) => self.policy = Policy::of(&record.settings, &self.deps.config.claude.allowed_tools),
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "cannot re-read the group's settings; keeping the old ones")
            }
        }
    }

    async fn on_line(&mut self, line: StdoutLine) {
        if let Some(live) = self.live.as_mut() {
            live.last_activity = Instant::now();
            live.quiet_since = live.last_activity;
        }
        let text = match line.line {
            LineRead::Line(text) => text,
            other => {
                self.deps.metrics.count_skipped_line();
                tracing::warn!(group = %self.group, ?other, "skipped an unreadable stdout line");
                return;
            }
        };
        if text.trim().is_empty() {
            return;
        }
        let event = match protocol::parse_line(&text) {
            Ok(event) => event,
            Err(e) => {
                self.deps.metrics.count_skipped_line();
                let head: String = text.chars().take(200).collect();
                tracing::warn!(group = %self.group, %e, line = %head, "skipped a stdout line that is not a protocol frame");
                return;
            }
        };
        match event {
            CliEvent::Init { session_id } => {
                self.in_turn = true;
                self.note_session_id(session_id).await;
            }
            CliEvent::System(frame) => self.on_system(frame, &text).await,
            CliEvent::Result { result, end } => self.on_result(result, end, &text, line.read_at).await,
            CliEvent::ApiErrorMessage(report) => self.seen.error_message(report),
            CliEvent::RateLimit(info) => self.seen.rate_limit(info),
            CliEvent::ControlRequest { request_id, request } => self.on_control_request(request_id, request).await,
            CliEvent::ControlResponse { request_id, ok } => {
                tracing::debug!(group = %self.group, ?request_id, ok, "the CLI answered a control request");
            }
            CliEvent::UserReplay { uuid } => self.pending.mark_taken(&uuid),
            CliEvent::Other { kind } => tracing::trace!(group = %self.group, %kind, "stdout frame"),
        }
    }

    /// Adopts the session id the CLI reports, if it is new.
    async fn note_session_id(&mut self, session_id: Option<String>) {
        if session_id.is_some() && session_id != self.session_id {
            self.store_session_id(session_id).await;
        }
    }

    /// Sets the session id the next process resumes, here and in the store.
    async fn store_session_id(&mut self, session_id: Option<String>) {
        self.session_id = session_id;
        if self.isolated {
            return;
        }
        if let Err(e) = self.deps.store.set_session_id(&self.group, self.session_id.as_deref()).await {
            tracing::error!(group = %self.group, %e, "cannot store the session id");
        }
    }

    /// Task frames (and any other `system` frame) are stored first, then tracked.
    async fn on_system(&mut self, frame: TaskFrame, raw: &str) {
        if let Err(e) = self.deps.store.record_task_frame(&self.group, &frame, raw).await {
            tracing::error!(group = %self.group, %e, "cannot store a task frame");
        }
        let id = frame.task_id.clone();
        match (frame.subtype.as_str(), id) {
            ("task_started", Some(id)) => {
                self.tasks.insert(id);
            }
            ("task_notification" | "task_updated", Some(id)) if is_terminal(frame.status.as_deref()) => {
                // With stdin open the CLI starts a follow-up turn for a task that
                // completed or failed (not for one it stopped). Between this frame
                // and that turn's `init` the session must not look idle.
                let was_running = self.tasks.remove(&id);
                if was_running && matches!(frame.status.as_deref(), Some("completed" | "failed")) {
                    self.follow_up_until = Some(Instant::now() + FOLLOW_UP_WINDOW);
                }
            }
            ("background_tasks_changed", _) => {
                if let Some(running) = running_tasks(raw) {
                    self.tasks = running;
                }
            }
            _ => {}
        }
    }

    async fn on_result(&mut self, result: TurnResult, end: TurnEnd, raw: &str, read_at: Instant) {
        self.results_read += 1;
        let cost = result.total_cost_usd.map(|total| match self.live.as_mut() {
            Some(live) => {
                // The total only grows within a process; anything else means it restarted counting.
                let own = if total >= live.cost_so_far { total - live.cost_so_far } else { total };
                live.cost_so_far = total;
                own
            }
            None => total,
        });
        let seen = self.seen.take();
        // A vanished session's result, and the interrupted result of a turn
        // pincer stops because it hung, are only stored: the chat hears about
        // the fresh start or the restart instead, and the messages stay pending.
        let missing_session = protocol::is_missing_session(&result);
        if missing_session || (self.stopping_hung && result.is_error) {
            self.store_result(&result, cost, raw, None, &[]).await;
            self.in_turn = false;
            self.follow_up_until = None;
            if missing_session {
                // The process exits by itself; on_exit starts a fresh one for what is pending.
                tracing::warn!(group = %self.group, session = ?self.session_id, "the stored session no longer exists; starting fresh");
                self.log_event("resume_failed", self.session_id.as_deref(), Some(&result.errors.join("; "))).await;
                self.store_session_id(None).await;
                self.start_fresh = true;
            }
            return;
        }
        let taken = self.pending.answer();
        let (text, answered, failed) = match api_error::classify(&result, &end, seen.as_ref()) {
            Some(TurnFailure::UsageLimit(limit)) => {
                let (text, failed) = self.hold_for_limit(&limit, taken);
                (text, Vec::new(), failed)
            }
            Some(failure) => (failure.chat_text(&result, taken.len(), self.zone), ids(&taken), Vec::new()),
            None => (result.chat_text(), ids(&taken), Vec::new()),
        };
        let settles: Vec<(InboundId, InboundState)> = (answered.iter().map(|id| (*id, InboundState::Answered)))
            .chain(failed.iter().map(|id| (*id, InboundState::Failed)))
            .collect();
        self.store_result(&result, cost, raw, Some(&text), &settles).await;
        self.in_turn = false;
        self.follow_up_until = None;
        self.crashes = 0;
        self.hangs = 0;
        self.note_session_id(result.session_id.clone()).await;
        let outcome = TurnOutcome { is_error: result.is_error, text, cost_usd: cost };
        self.tell_watchers(&[answered, failed].concat(), outcome);
        self.deps.metrics.record_result_delivery(read_at.elapsed());
    }

    /// Stores a result with its chat text (if any) in one transaction. While
    /// the database refuses writes (disk full, locked), it tries again, pauses
    /// doubling to 10 s: the result is never dropped, and the CLI waits (its
    /// output queues up) until the store takes it or pincer shuts down (then
    /// the message is sent again at the next start).
    async fn store_result(
        &self,
        result: &TurnResult,
        cost: Option<f64>,
        raw: &str,
        chat_text: Option<&str>,
        settles: &[(InboundId, InboundState)],
    ) {
        let mut pause = Duration::from_millis(200);
        let mut failing = false;
        loop {
            let e = match self.deps.outbox.result(&self.group, result, cost, raw, chat_text, settles).await {
                Ok(_) if failing => {
                    tracing::info!(group = %self.group, "the store takes results again; the waiting one is stored");
                    return;
                }
                Ok(_) => return,
                Err(e @ StoreError::Sql(_)) => e,
                Err(e) => {
                    tracing::error!(group = %self.group, %e, "cannot store a result");
                    return;
                }
            };
            if !failing {
                tracing::error!(
                    group = %self.group, %e,
                    "cannot store a result; trying again until the database can be written (check the disk)"
                );
                failing = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.deps.shutdown.cancelled() => {
                    tracing::error!(
                        group = %self.group,
                        "a result could not be stored before shutdown; its message is sent again at the next start"
                    );
                    return;
                }
            }
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }

    /// A usage limit refused these messages. Each is held back to be written
    /// again once after the reset, unless it already was, the reset time is
    /// unknown, or a scheduled run waits for it (the scheduler retries runs by
    /// its own rule); those are given up on. Returns the chat's line and the
    /// ids given up on. Held messages stay `sent` in the store, so a pincer
    /// that restarts meanwhile sends them again at its start.
    fn hold_for_limit(&mut self, limit: &UsageLimit, refused: Vec<PendingMessage>) -> (String, Vec<InboundId>) {
        let now = SystemTime::now();
        let (mut hold, mut again, mut not_resent) = (Vec::new(), Vec::new(), Vec::new());
        // Checked: the reset time is the CLI's word, and may be anything.
        let resend = limit.resets_at.and_then(|reset| {
            let (at, wait) = api_error::resend_at(reset, now, RESEND_MARGIN)?;
            Some((reset.max(now), at, Instant::now().checked_add(wait)?))
        });
        for m in refused {
            if m.after_limit {
                again.push(m.id);
            } else if resend.is_none() || self.intake.is_watched(m.id) {
                not_resent.push(m.id);
            } else {
                hold.push(m);
            }
        }
        let mut lines = Vec::new();
        if let (false, Some((reset, at, deadline))) = (hold.is_empty(), resend) {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::ResendAt(reset), hold.len(), self.zone, now));
            tracing::info!(group = %self.group, messages = hold.len(), at = %humantime::format_rfc3339_seconds(at), "usage limit reached; holding messages until it resets");
            match self.held.as_mut() {
                Some(held) => {
                    held.messages.extend(hold);
                    if deadline > held.deadline {
                        (held.at, held.deadline) = (at, deadline);
                    }
                }
                None => self.held = Some(Held { messages: hold, at, deadline }),
            }
        }
        if !again.is_empty() {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::GaveUp, again.len(), self.zone, now));
        }
        if !not_resent.is_empty() || lines.is_empty() {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::NotResent, not_resent.len(), self.zone, now));
        }
        (lines.join("\n"), [again, not_resent].concat())
    }

    /// The usage limit has reset: the held messages are written again, once.
    async fn on_resend_due(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        tracing::info!(group = %self.group, messages = held.messages.len(), "the usage limit has reset; sending held messages again");
        self.log_event("resent_after_limit", self.session_id.as_deref(), None).await;
        let mut lines = Vec::new();
        let mut ids = Vec::new();
        for mut m in held.messages {
            m.after_limit = true;
            let m = self.pending.requeue(m);
            lines.push(protocol::user_message(&m.text, &m.uuid));
            ids.push(m.id);
        }
        // Without a process (it idled out meanwhile) the new one resumes the session.
        if self.ensure_live().await {
            for line in lines {
                self.write(&line).await;
            }
        }
        self.set_state(&ids, InboundState::Sent).await;
    }

    /// `/stop` also cancels a planned resend: the held messages are given up on.
    async fn cancel_resend(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        let ids: Vec<InboundId> = held.messages.iter().map(|m| m.id).collect();
        self.set_state(&ids, InboundState::Failed).await;
        self.log_event("resend_cancelled", self.session_id.as_deref(), None).await;
        let which = if ids.len() == 1 { "your message" } else { "your messages" };
        self.notice(format!(
            "Cancelled: pincer will not send {which} again when the usage limit resets (the history keeps {}).",
            if ids.len() == 1 { "it" } else { "them" }
        ))
        .await;
    }

    async fn on_control_request(&mut self, request_id: String, request: ControlRequest) {
        let line = match request {
            ControlRequest::CanUseTool { tool_name, input, tool_use_id } => {
                let member_tools = &self.deps.config.claude.member_tools;
                let rules = Rules {
                    allowed: &self.policy.allowed_tools,
                    has_admins: !self.policy.admins.is_empty(),
                    member_bound: rights::member_bound(self.policy.tools, member_tools, self.pending.voices()),
                };
                if rules.member_bound.is_some() {
                    tracing::debug!(group = %self.group, tool = %tool_name, "a member's message is in the turn: read-only tools");
                }
                match decide(&self.group, &tool_name, &input, rules) {
                    Verdict::Allow => {
                        let answer = ApprovalAnswer { verdict: Approval::Allow, by: "policy".into() };
                        self.answer_tool(&request_id, tool_name, tool_use_id, &input, answer, None).await
                    }
                    Verdict::Deny(why) => {
                        let answer = ApprovalAnswer { verdict: Approval::Deny, by: "policy".into() };
                        self.answer_tool(&request_id, tool_name, tool_use_id, &input, answer, Some(why)).await
                    }
                    Verdict::Ask => {
                        self.ask_admins(request_id, tool_name, tool_use_id, input);
                        return;
                    }
                }
            }
            ControlRequest::McpMessage { server_name, message } => {
                let response = self.deps.tools.answer(&self.group, &server_name, &message).await;
                protocol::mcp_response(&request_id, response)
            }
            ControlRequest::Other { subtype } => {
                tracing::warn!(group = %self.group, %subtype, "answering an unsupported control request with an error");
                protocol::control_error(&request_id, &format!("Unsupported control request subtype: {subtype}"))
            }
        };
        self.write(&line).await;
    }

    /// Hands a tool call to the group's admins through the approvals channel,
    /// without blocking the loop: the CLI keeps printing (and the actor keeps
    /// storing) while people decide. The answer, or a denial when nobody
    /// answers in time, comes back as an event.
    fn ask_admins(&mut self, request_id: String, tool_name: String, tool_use_id: Option<String>, input: Value) {
        let Some(generation) = self.live.as_ref().map(|l| l.generation) else {
            return;
        };
        self.approvals_waiting += 1;
        let id = self.deps.approval_ids.fetch_add(1, Ordering::Relaxed) + 1;
        let (respond, answer) = tokio::sync::oneshot::channel();
        let request = ApprovalRequest {
            id,
            group: self.group.clone(),
            tool_name: tool_name.clone(),
            summary: summarize(&tool_name, &input),
            timeout: self.deps.config.claude.approval_timeout,
            respond,
        };
        let approvals = self.deps.approvals.clone();
        let answers = self.answers_tx.clone();
        let timeout = request.timeout;
        let group = self.group.clone();
        tracing::info!(%group, tool = %tool_name, approval = id, "asking the group's admins");
        tokio::spawn(async move {
            let unanswered = |why: &str| ApprovalAnswer { verdict: Approval::Deny, by: why.to_owned() };
            let answer = if approvals.try_send(request).is_err() {
                tracing::warn!(%group, "too many approvals waiting; denying");
                unanswered("pincer (too many approvals waiting)")
            } else {
                match tokio::time::timeout(timeout, answer).await {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(_)) => unanswered("pincer (no channel could ask)"),
                    Err(_) => unanswered("timeout"),
                }
            };
            let answered = Answered { generation, request_id, tool_name, tool_use_id, input, answer };
            // The actor is gone only when pincer stops; the CLI is stopping too then.
            let _ = answers.send(answered).await;
        });
    }

    async fn on_approved(&mut self, answered: Answered) {
        let Answered { generation, request_id, tool_name, tool_use_id, input, answer } = answered;
        if self.live.as_ref().map(|l| l.generation) != Some(generation) {
            tracing::info!(group = %self.group, tool = %tool_name, "an approval came after its CLI process ended; dropped");
            return;
        }
        self.approvals_waiting = self.approvals_waiting.saturating_sub(1);
        if answer.verdict == Approval::AlwaysAllow {
            self.policy.allowed_tools.push(tool_name.clone());
            let default = &self.deps.config.claude.allowed_tools;
            if let Err(e) = self.deps.store.allow_tool(&self.group, &tool_name, default).await {
                tracing::error!(group = %self.group, %e, "cannot store an always-allowed tool");
            }
        }
        let why = match (answer.verdict, answer.by.as_str()) {
            (Approval::Deny, "timeout") => Some(format!(
                "pincer: nobody approved `{tool_name}` within {}, so it was denied. Ask again, or have an admin allow it.",
                humantime::format_duration(self.deps.config.claude.approval_timeout)
            )),
            (Approval::Deny, by) => Some(format!("pincer: the use of `{tool_name}` was denied ({by}).")),
            _ => None,
        };
        let line = self.answer_tool(&request_id, tool_name, tool_use_id, &input, answer, why).await;
        self.write(&line).await;
    }

    /// Stores the decision on a tool call and returns the control response.
    async fn answer_tool(
        &self,
        request_id: &str,
        tool_name: String,
        tool_use_id: Option<String>,
        input: &Value,
        answer: ApprovalAnswer,
        deny_message: Option<String>,
    ) -> String {
        let allowed = answer.verdict != Approval::Deny;
        let response =
            if allowed { protocol::allow(input) } else { protocol::deny(deny_message.as_deref().unwrap_or("denied")) };
        let decision = PermissionDecision {
            tool_name,
            tool_use_id,
            input: input.to_string(),
            allowed,
            message: deny_message,
            decided_by: answer.by,
        };
        if let Err(e) = self.deps.store.record_decision(&self.group, &decision).await {
            tracing::error!(group = %self.group, %e, "cannot store a permission decision");
        }
        tracing::info!(group = %self.group, tool = %decision.tool_name, allowed, by = %decision.decided_by, "answered can_use_tool");
        protocol::control_success(request_id, response)
    }

    /// stdout closed: the process is gone or going.
    async fn on_exit(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let status = live.process.stop(self.deps.config.claude.shutdown_grace).await;
        drop(live);
        let status_text = status.map_or_else(|| "unknown status".to_owned(), |s| s.to_string());
        let tasks_lost = !self.tasks.is_empty();
        self.forget_process_state();
        if self.deps.shutdown.is_cancelled() {
            return;
        }
        if self.start_fresh {
            self.log_event("fresh", None, None).await;
            self.notice("The previous conversation could not be found, so a fresh session was started.").await;
            if !self.pending.is_empty() {
                self.restart().await;
            }
            return;
        }
        if self.pending.is_empty() {
            let kind = if tasks_lost { "crashed" } else { "exited" };
            self.log_event(kind, self.session_id.as_deref(), Some(&status_text)).await;
            if tasks_lost {
                self.notice(format!("The agent stopped unexpectedly ({status_text}) while background work was running; that work is lost."),
                )
                .await;
            }
            return;
        }
        self.crashes += 1;
        self.log_event("crashed", self.session_id.as_deref(), Some(&status_text)).await;
        if self.crashes > self.deps.config.claude.max_restarts {
            let text = format!(
                "The agent stopped unexpectedly ({status_text}) {} times in a row, so pincer gave up on the unanswered \
                 messages (they stay in the history). Check pincer's log, then send them again.",
                self.crashes
            );
            self.give_up(&text).await;
            self.crashes = 0;
            return;
        }
        self.notice(format!(
            "The agent stopped unexpectedly ({status_text}); restarting it and resending your message."
        ))
        .await;
        let backoff = crash_backoff(self.crashes);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => self.restart().await,
            _ = self.deps.shutdown.cancelled() => {}
        }
    }

    /// Starts a new process and writes every pending message to it again.
    async fn restart(&mut self) {
        if !self.ensure_live().await {
            return;
        }
        let lines: Vec<String> =
            self.pending.prepare_resend().map(|m| protocol::user_message(&m.text, &m.uuid)).collect();
        for line in lines {
            self.write(&line).await;
        }
    }

    /// A turn printed nothing for `turn_timeout`: interrupt it, give the CLI
    /// a moment to end it, stop the process, and send the unanswered messages
    /// again to a process that resumes the session. A second hang in a row
    /// (no good result between) gives up on them instead of looping.
    async fn on_hung(&mut self) {
        if self.hang_deadline().is_none_or(|at| at > Instant::now()) {
            return;
        }
        let waited = humantime::format_duration(self.deps.config.claude.turn_timeout).to_string();
        tracing::warn!(group = %self.group, %waited, pending = self.pending.len(), "the turn printed nothing for turn_timeout; interrupting and restarting the CLI");
        self.stopping_hung = true;
        self.next_request += 1;
        let interrupt = protocol::control_request_line(&format!("pincer_interrupt_{}", self.next_request), "interrupt");
        self.write(&interrupt).await;
        self.await_result(HANG_GRACE.min(self.deps.config.claude.shutdown_grace)).await;
        let tasks_lost = !self.tasks.is_empty();
        self.stop_live("hung").await;
        self.stopping_hung = false;
        self.hangs += 1;
        let lost = if tasks_lost { " Background work that was running in it was stopped." } else { "" };
        if self.pending.is_empty() {
            self.notice(format!(
                "The agent's turn gave no sign of life for {waited}, so pincer interrupted it and restarted the \
                 session (the conversation is kept).{lost}"
            ))
            .await;
            return;
        }
        if self.hangs > 1 {
            self.hangs = 0;
            let which = if self.pending.len() == 1 { "your message" } else { "your messages" };
            let text = format!(
                "The agent gave no sign of life for {waited} again after a restart, so pincer gave up on {which} \
                 (the history keeps them).{lost} Send again later; if this keeps happening, check pincer's log \
                 and the API's status."
            );
            self.give_up(&text).await;
            return;
        }
        let which = if self.pending.len() == 1 { "your message" } else { "your messages" };
        self.notice(format!(
            "The agent gave no sign of life for {waited}, so pincer interrupted its turn and restarted the session \
             (the conversation is kept); sending {which} again.{lost}"
        ))
        .await;
        self.restart().await;
    }

    /// Handles stdout until the next result is read, the process ends, or `grace` passes.
    async fn await_result(&mut self, grace: Duration) {
        let before = self.results_read;
        let deadline = tokio::time::Instant::now() + grace;
        while self.results_read == before {
            let Some(live) = self.live.as_mut() else {
                return;
            };
            match tokio::time::timeout_at(deadline, live.lines.recv()).await {
                Ok(Some(line)) => self.on_line(line).await,
                Ok(None) | Err(_) => return,
            }
        }
    }

    async fn on_idle(&mut self) {
        if self.idle_deadline().is_none_or(|at| at > Instant::now()) {
            return;
        }
        let timeout = self.deps.config.claude.idle_timeout;
        let timed_out = self.live.as_ref().is_some_and(|live| live.last_activity + timeout <= Instant::now());
        // Closing early for a waiting group: only if no other idle session already does.
        let yielding = !timed_out && self.deps.slots.claim_yield();
        if timed_out || yielding {
            tracing::info!(group = %self.group, yielding, "closing the idle session");
            self.stop_live(if yielding { "yielded" } else { "idle_closed" }).await;
        }
    }

    /// Closes stdin and keeps handling what the CLI still prints (a final
    /// result must be stored too) until it exits, then escalates.
    async fn stop_live(&mut self, reason: &str) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        live.process.close_stdin();
        let deadline = tokio::time::Instant::now() + self.deps.config.claude.shutdown_grace;
        while let Some(live) = self.live.as_mut() {
            match tokio::time::timeout_at(deadline, live.lines.recv()).await {
                Ok(Some(line)) => self.on_line(line).await,
                Ok(None) | Err(_) => break,
            }
        }
        if let Some(mut live) = self.live.take() {
            live.process.stop(self.deps.config.claude.shutdown_grace).await;
        }
        self.forget_process_state();
        self.log_event(reason, self.session_id.as_deref(), None).await;
    }

    /// What belonged to a process that is gone: its turn and its tasks.
    /// Pending messages are kept; they go to the next process.
    fn forget_process_state(&mut self) {
        self.tasks.clear();
        self.in_turn = false;
        self.follow_up_until = None;
        self.approvals_waiting = 0;
        self.seen = Seen::default();
    }

    /// Fails every pending message and tells the chat why.
    async fn give_up(&mut self, text: &str) {
        let ids = self.pending.drain_ids();
        self.set_state(&ids, InboundState::Failed).await;
        self.tell_watchers(&ids, TurnOutcome { is_error: true, text: text.to_owned(), cost_usd: None });
        self.log_event("gave_up", self.session_id.as_deref(), Some(text)).await;
        self.notice(text).await;
    }

    fn tell_watchers(&mut self, ids: &[InboundId], outcome: TurnOutcome) {
        self.intake.tell(ids, &outcome);
    }

    async fn notice(&self, text: impl AsRef<str>) {
        self.deps.outbox.notice(&self.group, text.as_ref()).await;
    }

    async fn set_state(&self, ids: &[InboundId], state: InboundState) {
        if let Err(e) = self.deps.store.set_inbound_state(ids, state).await {
            tracing::error!(group = %self.group, %e, "cannot update inbound state");
        }
    }

    async fn log_event(&self, kind: &str, session_id: Option<&str>, detail: Option<&str>) {
        // A throwaway session's events must not read as the group's own session's.
        let kind = if self.isolated { format!("isolated_{kind}") } else { kind.to_owned() };
        if let Err(e) = self.deps.store.record_session_event(&self.group, &kind, session_id, detail).await {
            tracing::error!(group = %self.group, %e, "cannot store a session event");
        }
    }
}

fn ids(messages: &[PendingMessage]) -> Vec<InboundId> {
    messages.iter().map(|m| m.id).collect()
}

fn is_terminal(status: Option<&str>) -> bool {
    matches!(status, Some("completed" | "failed" | "killed" | "stopped"))
}

/// The task ids of a `background_tasks_changed` frame.
fn running_tasks(raw: &str) -> Option<HashSet<String>> {
    let v: Value = serde_json::from_str(raw).ok()?;
    let tasks = v.get("tasks")?.as_array()?;
    Some(tasks.iter().filter_map(|t| t.get("task_id")?.as_str().map(str::to_owned)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crash_backoff_doubles_from_a_quarter_second_up_to_its_cap() {
        let waits: Vec<Duration> = (1..=4).map(crash_backoff).collect();
        assert_eq!(waits, [250, 500, 1000, 2000].map(Duration::from_millis));
        assert_eq!(crash_backoff(9), MAX_CRASH_BACKOFF, "250 ms × 256 is past the cap");
    }

    #[test]
    fn any_number_of_crashes_in_a_row_gets_the_capped_backoff() {
        // `max_restarts` above 32 lets the count pass what 2^(n-1) fits in a u32.
        for crashes in [32, 33, 34, 1000, u32::MAX] {
            assert_eq!(crash_backoff(crashes), MAX_CRASH_BACKOFF, "after {crashes} crashes");
        }
        assert_eq!(crash_backoff(0), FIRST_CRASH_BACKOFF, "never called so, but no underflow either");
    }
}

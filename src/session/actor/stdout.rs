//! What the CLI prints: each stdout line parsed once, stored where it must be
//! (task frames raw and first, results with their chat text in one
//! transaction), then fed to the parts that track it, the activity the
//! chat shows among them.

use std::time::Duration;

use super::stdin::INIT_REQUEST;
use super::{ids, SessionActor};
use crate::claude::lines::LineRead;
use crate::claude::mcp::{self, McpRequest};
use crate::claude::process::StdoutLine;
use crate::claude::protocol::{self, CliEvent, ControlRequest, TaskEvent, TurnEnd};
use crate::domain::{InboundId, TaskFrame, TurnResult};
use crate::retry::{Backoff, RetryPolicy};
use crate::session::activity::Fed;
use crate::session::api_error::{self, TurnFailure};
use crate::session::cli::StartError;
use crate::session::trust::{Heard, Hooks, Untrusted};
use crate::session::TurnOutcome;
use crate::store::{Carried, InboundState, StoreError};

/// How much of an untrusted line is kept as evidence.
const EVIDENCE_CHARS: usize = 2000;

/// What a frame is to the gate (`trust::Heard`).
fn heard(event: &CliEvent) -> Heard {
    match event {
        CliEvent::ControlResponse { .. } => Heard::Answer,
        CliEvent::Result { result, .. } if protocol::is_missing_session(result) => Heard::ResumeRefused,
        CliEvent::ControlRequest { request: ControlRequest::McpMessage { message, .. }, .. }
            if !matches!(mcp::parse(message).request, McpRequest::CallTool { .. }) =>
        {
            Heard::Setup
        }
        CliEvent::ControlRequest { .. } => Heard::Request,
        _ => Heard::Turn,
    }
}

/// How a result the store refuses is tried again: until it is stored.
const STORE_RETRY: RetryPolicy = RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(10));

impl SessionActor {
    pub(super) async fn on_line(&mut self, line: StdoutLine) {
        if let Some(live) = self.live.as_mut() {
            live.last_activity = tokio::time::Instant::now();
            live.quiet_since = live.last_activity;
        }
        let Some((text, event)) = self.frame(line.line) else {
            return;
        };
        if let Err(why) = self.believe(&event) {
            self.keep_as_evidence(why, &text).await;
            if let CliEvent::ControlRequest { request_id, request } = event {
                // Still answered, or the CLI would wait forever: refused.
                self.refuse_request(request_id, request).await;
            }
            return;
        }
        match event {
            CliEvent::Init { session_id } => {
                self.turn.started();
                self.feed_activity(Fed::TurnStarted);
                self.note_session_id(session_id).await;
            }
            CliEvent::System { frame, task } => self.on_system(frame, task, &text).await,
            CliEvent::Result { result, end } => self.on_result(result, end, &text, line.read_at).await,
            CliEvent::ApiErrorMessage(report) => self.seen.error_message(report),
            CliEvent::RateLimit(info) => self.seen.rate_limit(info),
            CliEvent::ControlRequest { request_id, request } => {
                self.on_control_request(request_id, request, &text).await
            }
            CliEvent::ControlResponse { request_id, ok } => {
                tracing::debug!(group = %self.group, ?request_id, ok, "the CLI answered a control request");
                if request_id.as_deref() == Some(INIT_REQUEST) {
                    self.hooks_taken(ok).await;
                }
            }
            CliEvent::ToolCalls(calls) => self.feed_activity(Fed::ToolCalls(&calls)),
            CliEvent::UserReplay { uuid } => self.turn.pending.mark_taken(&uuid),
            CliEvent::Other { kind } => tracing::trace!(group = %self.group, %kind, "stdout frame"),
        }
    }

    /// Whether a frame is believed (`trust.rs`): nothing of a turn before
    /// the CLI took pincer's hook, a result needs a turn, a frame the
    /// session's own id. A `can_use_tool` is judged where it is answered
    /// (`tools.rs`).
    fn believe(&mut self, event: &CliEvent) -> Result<(), Untrusted> {
        let expected = self.turn.awaiting_result() || self.turn.in_turn(tokio::time::Instant::now());
        // Lines come from the live process only; without one nothing is believed.
        let Some(live) = self.live.as_mut() else { return Err(Untrusted::NoHook) };
        live.trust.gate(heard(event))?;
        match event {
            CliEvent::Init { session_id } => live.trust.init(session_id.as_deref()),
            CliEvent::System { frame, .. } => live.trust.own_session(frame.session_id.as_deref()),
            CliEvent::Result { result, .. } => live.trust.result(result.session_id.as_deref(), expected),
            _ => Ok(()),
        }
    }

    /// A frame pincer does not believe: logged, stored among the session's
    /// events (`untrusted_frame`, with its head), and otherwise ignored.
    pub(super) async fn keep_as_evidence(&self, why: Untrusted, raw: &str) {
        let head: String = raw.chars().take(EVIDENCE_CHARS).collect();
        tracing::warn!(group = %self.group, why = why.as_str(), line = %head, "ignored a frame pincer does not believe");
        self.log_event("untrusted_frame", self.life.session_id(), Some(&format!("{}: {head}", why.as_str()))).await;
    }

    /// The CLI answered pincer's `initialize`. Taken: the start counts as
    /// done, and the messages held for it are written now. Refused: the
    /// process is stopped after this event (`end_hookless`), its messages
    /// never written to it.
    async fn hooks_taken(&mut self, ok: bool) {
        let Some(live) = self.live.as_mut() else { return };
        if live.trust.initialized(ok) == Hooks::Active {
            let held = live.trust.release_held();
            self.start.started();
            self.write_messages(held).await;
        }
    }

    /// A process whose hook failed (refused, or not answered within
    /// `turn_timeout`) is stopped; its messages wait in the start hold, the
    /// chat told once per reason, and the start is tried again with backoff.
    pub(super) async fn end_hookless(&mut self) {
        let Some(Hooks::Failed(failure)) = self.live.as_ref().map(|live| live.trust.hooks()) else { return };
        self.stop_live("hook_refused").await;
        self.start_failed(StartError::Hook(failure)).await;
    }

    /// Feeds the activity builder and publishes what changed; a feed that
    /// changed nothing wakes no watcher (and clones nothing).
    pub(super) fn feed_activity(&mut self, fed: Fed<'_>) {
        if self.activity.feed(fed, tokio::time::Instant::now()) {
            let now = self.activity.activity();
            self.activity_tx.send_if_modified(|published| {
                let modified = published != now;
                if modified {
                    published.clone_from(now);
                }
                modified
            });
        }
    }

    /// Adopts the session id the CLI reports, if it is new.
    async fn note_session_id(&mut self, session_id: Option<String>) {
        if session_id.is_some() && session_id.as_deref() != self.life.session_id() {
            self.store_session_id(session_id).await;
        }
    }

    /// Sets the session id the next process resumes, here and in the store.
    pub(super) async fn store_session_id(&mut self, session_id: Option<String>) {
        self.life.adopt(session_id);
        self.save_session_id().await;
    }

    async fn save_session_id(&self) {
        if self.isolated {
            return;
        }
        if let Err(e) = self.deps.groups.set_session_id(&self.group, self.life.session_id()).await {
            tracing::error!(group = %self.group, %e, "cannot store the session id");
        }
    }

    /// Task frames (and any other `system` frame) are stored first, then tracked.
    async fn on_system(&mut self, frame: TaskFrame, task: Option<TaskEvent>, raw: &str) {
        if let Err(e) = self.deps.journal.record_task_frame(&self.group, &frame, raw).await {
            tracing::error!(group = %self.group, %e, "cannot store a task frame");
        }
        if let Some(task) = task {
            self.turn.on_task(&task, tokio::time::Instant::now());
            self.feed_activity(Fed::Task(&task));
        }
    }

    /// A stdout line as a protocol frame, with its text; `None` (counted and
    /// logged) for a line that is not one.
    fn frame(&self, line: LineRead) -> Option<(String, CliEvent)> {
        let text = match line {
            LineRead::Line(text) => text,
            other => {
                self.deps.metrics.count_skipped_line();
                tracing::warn!(group = %self.group, ?other, "skipped an unreadable stdout line");
                return None;
            }
        };
        if text.trim().is_empty() {
            return None;
        }
        match protocol::parse_line(&text) {
            Ok(event) => Some((text, event)),
            Err(e) => {
                self.deps.metrics.count_skipped_line();
                let head: String = text.chars().take(200).collect();
                tracing::warn!(group = %self.group, %e, line = %head, "skipped a stdout line that is not a protocol frame");
                None
            }
        }
    }

    /// This process's share of a result's `total_cost_usd`.
    fn own_cost(&mut self, total: f64) -> f64 {
        match self.live.as_mut() {
            Some(live) => {
                // The total only grows within a process; anything else means it restarted counting.
                let own = if total >= live.cost_so_far { total - live.cost_so_far } else { total };
                live.cost_so_far = total;
                own
            }
            None => total,
        }
    }

    /// A vanished session's result, or the interrupted result of a hung turn:
    /// stored only. The chat hears about the fresh start or the restart
    /// instead, and the messages stay pending.
    async fn store_only(&mut self, result: &TurnResult, cost: Option<f64>, raw: &str, missing_session: bool) {
        self.store_result(result, cost, raw, None, &[]).await;
        self.turn.ended();
        if missing_session {
            // The process exits by itself; on_exit starts a fresh one for what is pending.
            tracing::warn!(group = %self.group, session = ?self.life.session_id(), "the stored session no longer exists; starting fresh");
            let errors = result.errors.join("; ");
            self.log_event("resume_failed", self.life.session_id(), Some(&errors)).await;
            self.life.session_vanished();
            self.save_session_id().await;
        }
    }

    async fn on_result(&mut self, result: TurnResult, end: TurnEnd, raw: &str, read_at: std::time::Instant) {
        self.turn.result_read();
        let cost = result.total_cost_usd.map(|total| self.own_cost(total));
        self.feed_activity(Fed::Result { ok: !result.is_error, cost_usd: cost });
        let seen = self.seen.take();
        let missing_session = protocol::is_missing_session(&result);
        if missing_session || (self.hang.is_stopping() && result.is_error) {
            return self.store_only(&result, cost, raw, missing_session).await;
        }
        let taken = self.turn.pending.answer();
        let failure = api_error::classify(&result, &end, seen.as_ref());
        let seconds = result.duration_ms.map(|ms| ms as f64 / 1000.0);
        let outcome = failure.as_ref().map_or("ok", TurnFailure::kind);
        let counters = crate::metrics::counters::counters();
        counters.turn(self.group.as_str(), outcome, seconds, cost);
        counters.tokens(self.group.as_str(), &result.usage);
        let (text, answered, failed) = match failure {
            Some(TurnFailure::UsageLimit(limit)) => {
                let intake = &self.intake;
                let now = (std::time::SystemTime::now(), tokio::time::Instant::now());
                let out = self.hold.hold(&self.group, &limit, taken, |id| intake.is_watched(id), now, self.zone);
                (out.text, Vec::new(), out.failed)
            }
            Some(failure) => (failure.chat_text(&result, taken.len(), self.zone), ids(&taken), Vec::new()),
            None => (result.chat_text(), ids(&taken), Vec::new()),
        };
        let settles: Vec<(InboundId, InboundState)> = (answered.iter().map(|id| (*id, InboundState::Answered)))
            .chain(failed.iter().map(|id| (*id, InboundState::Failed)))
            .collect();
        self.store_result(&result, cost, raw, Some(&text), &settles).await;
        self.turn.ended();
        self.life.answered();
        self.hang.answered();
        self.note_session_id(result.session_id.clone()).await;
        let outcome = TurnOutcome { is_error: result.is_error, text, cost_usd: cost };
        self.tell_watchers(&[answered, failed].concat(), outcome);
        self.deps.metrics.record_result_delivery(read_at.elapsed());
    }

    /// Stores a result with its chat text (if any) in one transaction, and
    /// on a cluster node with what the turn appended to the CLI's transcript
    /// (`transcript.rs`). While the database refuses writes (disk full,
    /// locked), it tries again ([`STORE_RETRY`]: 200 ms doubling to 10 s,
    /// jittered; without the transcript's bytes, which the next capture
    /// reads again): the result is never dropped, and the CLI waits (its
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
        let mut backoff = Backoff::new(STORE_RETRY);
        let transcript = self.turn_transcript(result.session_id.as_deref()).await;
        loop {
            let transcript = transcript.as_ref().filter(|_| backoff.failures() == 0);
            let carried = Carried { settles, transcript };
            let e = match self.deps.outbox.result(&self.group, result, cost, raw, chat_text, carried).await {
                Ok(_) if backoff.failures() > 0 => {
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
            if backoff.failures() == 0 {
                tracing::error!(
                    group = %self.group, %e,
                    "cannot store a result; trying again until the database can be written (check the disk)"
                );
            }
            if !backoff.wait(None, &self.deps.shutdown).await {
                tracing::error!(
                    group = %self.group,
                    "a result could not be stored before shutdown; its message is sent again at the next start"
                );
                return;
            }
        }
    }
}

//! When a process ends or must: its exit (a crash restarts with backoff), a
//! hung turn (interrupted, stopped, its messages sent again), an idle close
//! (or yielding the slot to a waiting group), the resend after a usage
//! limit, and a process that cannot start (its messages wait, the chat told
//! once, the start tried again with backoff). What to do is the parts'
//! decision; this is the I/O it takes.

use std::time::Duration;

use tokio::time::Instant;

use super::{Live, SessionActor};
use crate::domain::InboundId;
use crate::session::activity::Fed;
use crate::session::cli::StartError;
use crate::session::hang::{AfterHang, HANG_GRACE};
use crate::session::lifecycle::AfterExit;
use crate::session::trust::UserLine;
use crate::store::InboundState;

impl SessionActor {
    /// stdout closed: the process is gone or going.
    pub(super) async fn on_exit(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let status = live.child.stop(self.deps.config.claude.shutdown_grace).await;
        self.sync_transcript(Some(&live)).await;
        let status_text = status.map_or_else(|| "unknown status".to_owned(), |s| s.to_string());
        let tasks_lost = self.forget_process_state();
        let (stopping, waiting) = (self.deps.shutdown.is_cancelled(), !self.turn.pending.is_empty());
        let max_restarts = self.deps.config.claude.max_restarts;
        let after = self.life.after_exit(stopping, waiting, tasks_lost, max_restarts);
        let (live, session, detail) = (Some(live), self.life.session_id(), Some(status_text.as_str()));
        match after {
            AfterExit::Stopping => drop(live),
            AfterExit::Fresh { .. } => self.release(live, "fresh", None, None).await,
            AfterExit::Ended { tasks_lost: false } => self.release(live, "exited", session, detail).await,
            AfterExit::Ended { tasks_lost: true } | AfterExit::GiveUp { .. } | AfterExit::Restart { .. } => {
                self.release(live, "crashed", session, detail).await
            }
        }
        self.act_after_exit(after, &status_text).await;
    }

    /// What the chat hears after an exit, and the restart if one is due.
    async fn act_after_exit(&mut self, after: AfterExit, status_text: &str) {
        match after {
            AfterExit::Stopping => {}
            AfterExit::Fresh { restart } => {
                self.notice("The previous conversation could not be found, so a fresh session was started.").await;
                if restart {
                    self.restart().await;
                }
            }
            AfterExit::Ended { tasks_lost } => {
                if tasks_lost {
                    self.notice(format!(
                        "The agent stopped unexpectedly ({status_text}) while background work was running; that \
                         work is lost."
                    ))
                    .await;
                }
            }
            AfterExit::GiveUp { crashes } => {
                let text = format!(
                    "The agent stopped unexpectedly ({status_text}) {crashes} times in a row, so pincer gave up on \
                     the unanswered messages (they stay in the history). Check pincer's log, then send them again."
                );
                self.give_up(&text).await;
            }
            AfterExit::Restart { backoff } => {
                self.notice(format!(
                    "The agent stopped unexpectedly ({status_text}); restarting it and resending your message."
                ))
                .await;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => self.restart().await,
                    _ = self.deps.shutdown.cancelled() => {}
                }
            }
        }
    }

    /// Starts a new process and writes every pending message to it again.
    pub(super) async fn restart(&mut self) {
        if !self.ensure_live().await {
            return;
        }
        self.send_all_pending().await;
    }

    /// A turn printed nothing for `turn_timeout`: interrupt it, give the CLI
    /// a moment to end it, stop the process, and send the unanswered messages
    /// again to a process that resumes the session. A second hang in a row
    /// (no good result between) gives up on them instead of looping.
    pub(super) async fn on_hung(&mut self) {
        if self.hang_deadline().is_none_or(|at| at > Instant::now()) {
            return;
        }
        let waited = humantime::format_duration(self.deps.config.claude.turn_timeout).to_string();
        tracing::warn!(group = %self.group, %waited, pending = self.turn.pending.len(), "the turn printed nothing for turn_timeout; interrupting and restarting the CLI");
        self.hang.stopping_hung();
        let interrupt = self.interrupt_line();
        self.write(&interrupt).await;
        self.await_result(HANG_GRACE.min(self.deps.config.claude.shutdown_grace)).await;
        let tasks_lost = self.turn.tasks_running();
        self.stop_live("hung").await;
        let lost = if tasks_lost { " Background work that was running in it was stopped." } else { "" };
        let which = if self.turn.pending.len() == 1 { "your message" } else { "your messages" };
        match self.hang.stopped(!self.turn.pending.is_empty()) {
            AfterHang::Told => {
                self.notice(format!(
                    "The agent's turn gave no sign of life for {waited}, so pincer interrupted it and restarted the \
                     session (the conversation is kept).{lost}"
                ))
                .await;
            }
            AfterHang::GiveUp => {
                let text = format!(
                    "The agent gave no sign of life for {waited} again after a restart, so pincer gave up on {which} \
                     (the history keeps them).{lost} Send again later; if this keeps happening, check pincer's log \
                     and the API's status."
                );
                self.give_up(&text).await;
            }
            AfterHang::Resend => {
                self.notice(format!(
                    "The agent gave no sign of life for {waited}, so pincer interrupted its turn and restarted the \
                     session (the conversation is kept); sending {which} again.{lost}"
                ))
                .await;
                self.restart().await;
            }
        }
    }

    /// Handles stdout until the next result is read, the process ends, or `grace` passes.
    async fn await_result(&mut self, grace: Duration) {
        let before = self.turn.results_read();
        let deadline = Instant::now() + grace;
        while self.turn.results_read() == before {
            let Some(live) = self.live.as_mut() else {
                return;
            };
            match tokio::time::timeout_at(deadline, live.lines.recv()).await {
                Ok(Some(line)) => self.on_line(line).await,
                Ok(None) | Err(_) => return,
            }
        }
    }

    pub(super) async fn on_idle(&mut self) {
        if self.idle_deadline().is_none_or(|at| at > Instant::now()) {
            return;
        }
        if self.tools_changed() {
            tracing::info!(group = %self.group, "the group's tools changed; the session resumes in a new process");
            self.stop_live("tools_changed").await;
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
    pub(super) async fn stop_live(&mut self, reason: &str) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        live.child.close_stdin();
        let deadline = Instant::now() + self.deps.config.claude.shutdown_grace;
        while let Some(live) = self.live.as_mut() {
            match tokio::time::timeout_at(deadline, live.lines.recv()).await {
                Ok(Some(line)) => self.on_line(line).await,
                Ok(None) | Err(_) => break,
            }
        }
        let mut stopped = self.live.take();
        if let Some(live) = stopped.as_mut() {
            live.child.stop(self.deps.config.claude.shutdown_grace).await;
        }
        // What the CLI flushed after its last result, now that it is gone,
        // and the folder as it left it.
        self.sync_transcript(stopped.as_ref()).await;
        self.snapshot_folder().await;
        self.forget_process_state();
        self.release(stopped, reason, self.life.session_id(), None).await;
    }

    /// Records how a process ended, then lets its slot go: a group waiting
    /// for the slot starts only after the end is on record, so the session
    /// events read in the order things happened.
    async fn release(&self, live: Option<Live>, kind: &str, session_id: Option<&str>, detail: Option<&str>) {
        self.log_event(kind, session_id, detail).await;
        drop(live);
    }

    /// What belonged to a process that is gone: its turn, its tasks, its
    /// approvals, what it printed about errors. Returns whether tasks ran in it.
    /// Pending messages are kept; they go to the next process.
    pub(super) fn forget_process_state(&mut self) -> bool {
        self.approvals.forget_process();
        self.seen = Default::default();
        self.feed_activity(Fed::ProcessEnded);
        self.turn.forget_process()
    }

    /// The usage limit has reset: the held messages are written again,
    /// once, unless the group's budget is reached (they go when it opens).
    pub(super) async fn on_resend_due(&mut self) {
        let Some(held) = self.hold.take() else {
            return;
        };
        if !self.budget_open().await {
            if let Some(opens) = self.budget_opens() {
                tracing::info!(group = %self.group, "the usage limit has reset, but the budget is reached; the resend waits for it");
                self.hold.postpone(held, opens);
                return;
            }
        }
        tracing::info!(group = %self.group, messages = held.messages.len(), "the usage limit has reset; sending held messages again");
        self.log_event("resent_after_limit", self.life.session_id(), None).await;
        let mut lines = Vec::new();
        for mut m in held.messages {
            m.after_limit = true;
            let m = self.turn.pending.requeue(m);
            lines.push(UserLine { id: m.id, line: m.line(), accepted_at: None });
        }
        // Without a process (it idled out meanwhile) the new one resumes the session.
        if self.ensure_live().await {
            self.send_messages(lines).await;
        }
    }

    /// No process could be started. A scheduled run's messages are given up
    /// on (the scheduler retries runs by its own rule); the others wait for
    /// the next try, and the chat is told once, not once per message (again
    /// only when the start fails for another reason after one succeeded or
    /// failed differently). The group's queue waits meanwhile.
    pub(super) async fn start_failed(&mut self, e: StartError) {
        if let Some(what) = e.log_line() {
            tracing::error!(group = %self.group, %e, "{what}");
        }
        let (watched, waiting): (Vec<_>, Vec<_>) =
            self.turn.pending.take_all().into_iter().partition(|m| self.intake.is_watched(m.id));
        if !watched.is_empty() {
            for m in watched {
                self.turn.pending.requeue(m);
            }
            self.give_up(&e.chat_text()).await;
        }
        // A CLI without pincer's hook is held even when nothing waits (it
        // may have stopped between turns): the next message must not start
        // one again at once, and the chat hears of it once.
        if waiting.is_empty() && !matches!(e, StartError::Hook(_)) {
            return;
        }
        let reason = e.to_string();
        let now = (std::time::SystemTime::now(), Instant::now());
        if let Some(retry_in) = self.start.failed(waiting, &reason, now) {
            self.log_event("start_failed", self.life.session_id(), Some(&reason)).await;
            self.notice(e.waiting_text(retry_in)).await;
        }
    }

    /// A CLI that could not start is tried again; its waiting messages are
    /// written to it when it starts (or wait for the next try).
    pub(super) async fn on_start_due(&mut self) {
        let waiting = self.start.take();
        if waiting.is_empty() {
            return;
        }
        for m in waiting {
            self.turn.pending.requeue(m);
        }
        // The start counts as done once the CLI takes pincer's hook (`hooks_taken`).
        if !self.ensure_live().await {
            return;
        }
        tracing::info!(group = %self.group, messages = self.turn.pending.len(), "the CLI starts again; writing the messages that waited for it");
        self.send_all_pending().await;
    }

    /// `/stop` also cancels a planned resend: the held messages are given up on.
    pub(super) async fn cancel_resend(&mut self) {
        let Some(held) = self.hold.take() else {
            return;
        };
        let ids: Vec<InboundId> = held.messages.iter().map(|m| m.id).collect();
        self.set_state(&ids, InboundState::Failed).await;
        self.log_event("resend_cancelled", self.life.session_id(), None).await;
        let which = if ids.len() == 1 { "your message" } else { "your messages" };
        self.notice(format!(
            "Cancelled: pincer will not send {which} again when the usage limit resets (the history keeps {}).",
            if ids.len() == 1 { "it" } else { "them" }
        ))
        .await;
    }
}

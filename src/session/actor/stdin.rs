//! The messages taken from the group's queue, the live process started when
//! a message needs one (after waiting for a slot), and the lines written to it.

use std::time::SystemTime;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Live, Policy, SessionActor};
use crate::claude::protocol;
use crate::domain::media::ModelImage;
use crate::domain::{Inbound, InboundId, Missed};
use crate::session::activity::Fed;
use crate::session::cli::{StartRequest, Started};
use crate::session::intake::{self, TAKEN_AT_ONCE};
use crate::session::rights::{self, Voice};
use crate::session::slots::Slot;
use crate::session::trust::UserLine;
use crate::session::TurnOutcome;
use crate::store::InboundState;

/// The request id of pincer's `initialize` (one per process).
pub(super) const INIT_REQUEST: &str = "pincer_initialize";

/// How long the CLI waits for pincer's answer to the hook before it stops
/// the call. pincer answers at once (admins are asked through
/// `can_use_tool`), so only a stalled actor (a store that refuses writes)
/// makes it run out, and then the call fails closed.
const HOOK_TIMEOUT_SECS: u64 = 120;

impl SessionActor {
    /// Takes what waits in the group's queue, while there is room: each
    /// message with the chat lines before it, in order.
    pub(super) async fn take_queued(&mut self) {
        loop {
            let room = TAKEN_AT_ONCE.saturating_sub(self.turn.pending.len());
            if !self.puller.due(room) {
                return;
            }
            if !self.queue_open().await {
                // Held: quiet, not busy; the queue is read when the hold ends.
                self.puller.held(&self.intake);
                return;
            }
            let taken = self.puller.pull(&self.deps.queue, &self.intake, &self.group, room).await;
            if taken.is_empty() {
                return;
            }
            for intake::Taken { id, msg, missed, images } in taken {
                self.take_message(id, msg, missed, images, None).await;
            }
            if self.deps.shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Takes one stored message: it becomes pending, a process is started if
    /// none lives, and the message is written to it.
    pub(super) async fn take_message(
        &mut self,
        id: InboundId,
        msg: Inbound,
        missed: Missed,
        images: Vec<ModelImage>,
        done: Option<oneshot::Sender<TurnOutcome>>,
    ) {
        if let Some(done) = done {
            self.intake.watch(id, done);
        }
        let voice = Voice::of(&msg, &missed, &self.policy.admins);
        let prompt = msg.prompt(&missed, &self.policy.admins);
        let steered_by = rights::member_senders(&msg, &missed, &self.policy.admins);
        self.note_member_files(rights::member_files(&msg, &missed, &self.policy.admins)).await;
        let pending = self.turn.pending.push(id, prompt, msg.accepted_at, voice);
        pending.images = images;
        pending.steered_by = steered_by;
        if self.ensure_live().await {
            self.write_pending_tail().await;
        }
    }

    pub(super) fn interrupt_line(&mut self) -> String {
        self.next_request += 1;
        protocol::control_request_line(&format!("pincer_interrupt_{}", self.next_request), "interrupt")
    }

    /// Writes the newest pending message (the one just pushed).
    pub(super) async fn write_pending_tail(&mut self) {
        let Some(m) = self.turn.pending.last() else {
            return;
        };
        let message = UserLine { id: m.id, line: m.line(), accepted_at: Some(m.accepted_at) };
        self.send_messages(vec![message]).await;
    }

    /// Every pending message, with new uuids, for a process that just started.
    pub(super) async fn send_all_pending(&mut self) {
        let lines =
            self.turn.pending.prepare_resend().map(|m| UserLine { id: m.id, line: m.line(), accepted_at: None });
        let lines = lines.collect();
        self.send_messages(lines).await;
    }

    /// User messages for the live process: written now if it took pincer's
    /// hook, else held until it does (`trust.rs`). None goes to a process
    /// whose gate is not closed yet; a process that never takes the hook is
    /// stopped, and its messages stay pending here for the next one.
    pub(super) async fn send_messages(&mut self, messages: Vec<UserLine>) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let now: Vec<UserLine> = messages.into_iter().filter_map(|m| live.trust.user_message(m)).collect();
        self.write_messages(now).await;
    }

    /// Writes user messages; those written are `sent` in the store.
    pub(super) async fn write_messages(&mut self, messages: Vec<UserLine>) {
        let mut sent = Vec::with_capacity(messages.len());
        for m in messages {
            if self.write(&m.line).await {
                if let Some(accepted_at) = m.accepted_at {
                    self.deps.metrics.record_stdin_write(accepted_at.elapsed());
                }
                self.feed_activity(Fed::TurnStarted);
                sent.push(m.id);
            }
        }
        if !sent.is_empty() {
            self.set_state(&sent, InboundState::Sent).await;
        }
    }

    /// Writes a line to the live process. A failed write means the process is
    /// dying: its exit is handled when stdout closes, and pending messages are
    /// written again to the next process then.
    pub(super) async fn write(&mut self, line: &str) -> bool {
        let Some(live) = self.live.as_mut() else {
            return false;
        };
        live.last_activity = Instant::now();
        live.quiet_since = live.last_activity;
        match live.child.write_line(line).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "writing to the CLI failed; it will be restarted");
                false
            }
        }
    }

    /// Starts a CLI process unless one lives. Waits (FIFO) for a free slot.
    /// Returns false when no process could be started: the pending messages
    /// then wait for the next try (see `start_failed`).
    pub(super) async fn ensure_live(&mut self) -> bool {
        if self.live.is_some() {
            return true;
        }
        if self.start.holding() {
            // A start failed a moment ago: these wait for the next try with the others.
            let waiting = self.turn.pending.take_all();
            self.start.wait(waiting);
            return false;
        }
        let slot = tokio::select! {
            slot = self.deps.slots.acquire() => slot,
            _ = self.deps.shutdown.cancelled() => return false,
        };
        self.reload_settings().await;
        // The group may have moved here from another node: its folder first.
        self.folder_in_place().await;
        let resume = self.life.resume();
        if let Some(session) = resume.as_deref() {
            // The group may have moved here from another node: its transcript too.
            self.restore_transcript(session).await;
        }
        let withheld = self.withheld();
        let request = StartRequest {
            group: &self.group,
            resume: resume.as_deref(),
            main: self.policy.is_main,
            isolated: self.isolated,
            home: &mut self.own_home,
            withheld: withheld.clone(),
        };
        match self.deps.cli.start(request).await {
            Ok(started) => {
                self.went_live(started, slot, resume.as_deref(), withheld).await;
                true
            }
            Err(e) => {
                self.start_failed(e).await;
                false
            }
        }
    }

    /// A started process becomes the live one; its first line registers pincer's hook.
    async fn went_live(&mut self, started: Started, slot: Slot, resume: Option<&str>, withheld: Vec<&'static str>) {
        let kind = if resume.is_some() { "resumed" } else { "started" };
        self.log_event(kind, resume, None).await;
        let generation = self.life.started();
        self.live = Some(Live {
            child: started.child,
            lines: started.lines,
            last_activity: Instant::now(),
            quiet_since: Instant::now(),
            since: SystemTime::now(),
            started: Instant::now(),
            generation,
            cost_so_far: 0.0,
            _slot: slot,
            view: started.view,
            trust: Default::default(),
            withheld,
        });
        // On a cluster node, its guard kills it at the node's deadline by itself.
        self.tell_guard();
        // Before any message: pincer's hook sees every tool call from the first.
        let init = protocol::initialize_line(INIT_REQUEST, HOOK_TIMEOUT_SECS);
        self.write(&init).await;
    }

    /// Re-reads the group's tool policy, so `pincer groups set` applies from
    /// the next process on without restarting pincer.
    pub(super) async fn reload_settings(&mut self) {
        match self.deps.groups.group(self.group.as_str()).await {
            Ok(record) => {
                let skip = self.deps.config.sandbox.group(self.group.as_str()).skip_permissions;
                self.policy = Policy::of(&record.settings, &self.deps.config.claude.allowed_tools, skip);
                self.budget.forget();
            }
            Err(e) => {
                tracing::warn!(group = %self.group, %e, "cannot re-read the group's settings; keeping the old ones")
            }
        }
    }
}

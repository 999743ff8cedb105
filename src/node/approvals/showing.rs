//! The gateway side of approvals across cluster nodes: while this node
//! holds a platform's gateway lease (one `Gateway::serve` round), a task
//! looks at the platform's unanswered rows (every [`LOOK`], or sooner on a
//! hint), marks those no live gateway shows as shown by itself, hands each
//! to the round's adapter as an [`ApprovalAsk`], and writes the person's
//! verdict back (the first answer wins). A prompt whose row another gateway
//! shows now is withdrawn (`ApprovalAsk::withdrawn`: its adapter leaves the
//! message to the gateway that settles it); so is every prompt when the
//! round ends (the lease lost, handed over, or shutdown). One whose row
//! expired or is gone is ended (its answer channel dropped: the prompt says
//! it was denied). Touches the store's `approvals` rows and reads the
//! groups' settings.

use std::collections::{HashMap, HashSet};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::plan::{show_plan, LOOK};
use crate::channel::approvals::PROMPTS_IN_FLIGHT;
use crate::channel::{ApprovalAsk, Directory};
use crate::cluster::LeaseName;
use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest, Platform};
use crate::outbox::Outbox;
use crate::store::{Approvals, StoreError, ToShow};

/// Set in the ids of prompts shown for another node's rows: apart from
/// this process's own request ids (counted up from 1), so an adapter's
/// prompts never share an id.
const ROW_IDS: u64 = 1 << 62;

/// Who denied a request the adapter could not show.
const NOT_SHOWN: &str = "pincer (no channel could ask)";

/// What a gateway shows approvals with.
#[derive(Clone)]
pub struct Shower {
    pub store: Approvals,
    pub directory: Directory,
    pub outbox: Outbox,
    pub platform: Platform,
    pub lease: LeaseName,
    /// Bumped when a node stored a request (`node::hints`).
    pub hints: watch::Receiver<u64>,
}

/// One round's showing task; [`Showing::stop`] ends it and its prompts.
pub struct Showing {
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
}

impl Showing {
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

impl Shower {
    /// Shows rows into `asks` (the round's adapter queue) until `stop` or [`Showing::stop`].
    pub fn start(&self, asks: mpsc::Sender<ApprovalAsk>, stop: &CancellationToken) -> Showing {
        let stop = stop.child_token();
        let round =
            Round { shower: self.clone(), asks, stop: stop.clone(), prompts: HashMap::new(), answers: JoinSet::new() };
        Showing { task: tokio::spawn(round.run()), stop }
    }
}

/// A prompt on screen: its answer's task, and its withdrawal.
struct Prompt {
    waiting: AbortHandle,
    withdrawn: CancellationToken,
}

/// The state of one round: the prompts shown, and their answers to come.
struct Round {
    shower: Shower,
    asks: mpsc::Sender<ApprovalAsk>,
    /// The round's end; each prompt's withdrawal is its child, so every
    /// prompt is withdrawn, not timed out, when the round ends.
    stop: CancellationToken,
    prompts: HashMap<i64, Prompt>,
    /// Each prompt's answer (`None`: the adapter dropped it unanswered).
    answers: JoinSet<(i64, Option<ApprovalAnswer>)>,
}

impl Round {
    async fn run(mut self) {
        let stop = self.stop.clone();
        let mut tick = tokio::time::interval(LOOK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut hints = self.shower.hints.clone();
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                Some(Ok((id, answer))) = self.answers.join_next(), if !self.answers.is_empty() => {
                    self.answered(id, answer).await
                }
                Ok(()) = hints.changed() => self.look().await,
                _ = tick.tick() => self.look().await,
            }
        }
    }

    /// Writes a prompt's answer back; one the adapter could not show is
    /// denied. Nothing for a prompt this round ended or withdrew already:
    /// its adapter let go of it because of that.
    async fn answered(&mut self, id: i64, answer: Option<ApprovalAnswer>) {
        if self.prompts.remove(&id).is_some() {
            self.write(id, answer).await;
        }
    }

    /// Writes `answer` (none: denied, not shown) to row `id`.
    async fn write(&self, id: i64, answer: Option<ApprovalAnswer>) {
        let answer = answer.unwrap_or_else(|| ApprovalAnswer { verdict: Approval::Deny, by: NOT_SHOWN.to_owned() });
        match self.shower.store.answer(id, &answer).await {
            Ok(true) => tracing::info!(approval = id, by = %answer.by, "a tool request was answered"),
            Ok(false) => tracing::info!(approval = id, "a tool request was answered elsewhere first"),
            Err(e) => tracing::warn!(approval = id, %e, "cannot write an approval's verdict back; it times out"),
        }
    }

    /// Shows what no live gateway shows, and ends what need not be shown any more.
    async fn look(&mut self) {
        let Shower { store, platform, lease, .. } = &self.shower;
        // No epoch: the lease is gone, and the round ends.
        let Some(epoch) = store.epoch(lease) else { return };
        let rows = match store.unanswered(*platform).await {
            Ok(rows) => rows,
            Err(e) => return tracing::debug!(%e, "cannot look for approvals to show; looking again soon"),
        };
        let showing: HashSet<i64> = self.prompts.keys().copied().collect();
        let complete = rows.len() < crate::store::LOOK_LIMIT;
        let plan = show_plan(&rows, epoch, &showing, PROMPTS_IN_FLIGHT, complete);
        for id in plan.withdraw {
            if let Some(prompt) = self.prompts.remove(&id) {
                // Withdrawn before its answer channel drops: the adapter reads it first.
                prompt.withdrawn.cancel();
                prompt.waiting.abort();
            }
        }
        for id in plan.end {
            if let Some(prompt) = self.prompts.remove(&id) {
                prompt.waiting.abort();
            }
        }
        for id in plan.stale {
            if let Err(e) = store.forget(id).await {
                tracing::debug!(approval = id, %e, "cannot delete a stale approval");
            }
        }
        for id in plan.show {
            let row = match self.shower.store.show(id, &self.shower.lease).await {
                Ok(Some(row)) => row,
                Ok(None) => continue,
                Err(e @ StoreError::BadRow { .. }) => {
                    tracing::warn!(approval = id, %e, "an approval's row cannot be read; deleted");
                    let _ = self.shower.store.forget(id).await;
                    continue;
                }
                Err(e) => return tracing::debug!(approval = id, %e, "cannot mark an approval shown"),
            };
            if !self.hand_over(row).await {
                // The adapter's queue is full: shown again at a later look.
                break;
            }
        }
    }

    /// Hands `row` to the adapter; false when its queue is full.
    async fn hand_over(&mut self, row: ToShow) -> bool {
        let id = row.id;
        let group = match self.shower.directory.group(&row.group).await {
            Ok(group) => group,
            Err(e) => {
                tracing::warn!(group = %row.group, %e, "cannot look up the group of a tool request; denied");
                self.write(id, None).await;
                return true;
            }
        };
        let to = self.shower.outbox.address_of(&group);
        if to.platform != self.shower.platform {
            tracing::warn!(group = %group.name, chat = %to, "a tool request for a chat this gateway does not serve; denied");
            self.write(id, None).await;
            return true;
        }
        let (respond, answer) = oneshot::channel();
        let request = ApprovalRequest {
            id: ROW_IDS | id.unsigned_abs(),
            group: row.group,
            tool_name: row.tool_name,
            summary: row.summary,
            provenance: row.provenance,
            timeout: row.remaining,
            respond,
        };
        let withdrawn = self.stop.child_token();
        let ask = ApprovalAsk { to, admins: group.settings.admins.clone(), request, withdrawn: withdrawn.clone() };
        if self.asks.try_send(ask).is_err() {
            return false;
        }
        let waiting = self.answers.spawn(async move { (id, answer.await.ok()) });
        self.prompts.insert(id, Prompt { waiting, withdrawn });
        true
    }
}

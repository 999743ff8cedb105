//! The asking side of approvals across cluster nodes: a task on every
//! node that stores the tool calls its sessions ask of a Telegram or
//! WhatsApp chat, keeps each session's answer channel in memory, and
//! looks at its rows (every [`LOOK`], or sooner on a hint) to answer each
//! session once and delete the row. A session that gave up (timeout, its
//! CLI ended) has its row deleted. Touches the store's `approvals` rows of
//! this node only.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::plan::{asking_plan, LOOK};
use crate::channel::ApprovalAsk;
use crate::cluster::NodeId;
use crate::domain::ApprovalAnswer;
use crate::store::{Approvals, NewApproval};

/// Requests one node keeps waiting across nodes; past it, a request is denied.
pub const WAITING_AT_ONCE: usize = 256;

/// The asking side: its store, its node, and where it hears of verdicts.
pub struct Asking {
    pub store: Approvals,
    pub node: NodeId,
    /// Bumped when another node wrote a verdict (`node::hints`).
    pub hints: watch::Receiver<u64>,
    /// The requests routed to a platform with a gateway.
    pub requests: mpsc::Receiver<ApprovalAsk>,
}

impl Asking {
    /// Runs until `stop`; what still waits then is denied (its channel dropped).
    pub async fn run(mut self, stop: CancellationToken) {
        let mut waiting: HashMap<i64, oneshot::Sender<ApprovalAnswer>> = HashMap::new();
        // The first look deletes what an earlier process of this node left;
        // after it, a node with nothing waiting has nothing to look for.
        self.look(&mut waiting).await;
        let mut tick = tokio::time::interval(LOOK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                ask = self.requests.recv() => match ask {
                    Some(ask) => self.store_one(ask, &mut waiting).await,
                    None => return,
                },
                Ok(()) = self.hints.changed(), if !waiting.is_empty() => self.look(&mut waiting).await,
                _ = tick.tick(), if !waiting.is_empty() => self.look(&mut waiting).await,
            }
        }
    }

    /// Stores `ask` and keeps its answer channel; a request that cannot
    /// be stored is denied at once (its channel dropped).
    async fn store_one(&self, ask: ApprovalAsk, waiting: &mut HashMap<i64, oneshot::Sender<ApprovalAnswer>>) {
        let ApprovalAsk { to, request, .. } = ask;
        let group = request.group.clone();
        if waiting.len() >= WAITING_AT_ONCE {
            return tracing::warn!(%group, tool = %request.tool_name, "too many tool requests wait across nodes; denied");
        }
        let new = NewApproval::new(group.clone(), to.platform, request.tool_name, request.summary, request.timeout)
            .map(|new| new.with_provenance(request.provenance));
        let stored = match new {
            Ok(new) => self.store.ask(&new, &self.node).await,
            Err(e) => Err(e),
        };
        match stored {
            Ok(id) => {
                tracing::debug!(%group, approval = id, "a tool request waits for the gateway to show it");
                waiting.insert(id, request.respond);
            }
            Err(e) => tracing::warn!(%group, %e, "cannot ask the group's admins through the cluster's store; denied"),
        }
    }

    /// Passes on the verdicts written for this node and deletes the rows nobody waits for.
    async fn look(&self, waiting: &mut HashMap<i64, oneshot::Sender<ApprovalAnswer>>) {
        let rows = match self.store.asked_by(&self.node).await {
            Ok(rows) => rows,
            Err(e) => return tracing::debug!(%e, "cannot look for approvals' verdicts; looking again soon"),
        };
        let waits: HashMap<i64, bool> = waiting.iter().map(|(id, respond)| (*id, !respond.is_closed())).collect();
        let plan = asking_plan(&rows, &waits);
        for (id, answer) in plan.deliver {
            if let Some(respond) = waiting.remove(&id) {
                tracing::info!(approval = id, by = %answer.by, "a tool request was answered on the gateway");
                let _ = respond.send(answer);
            }
        }
        for id in plan.forget {
            waiting.remove(&id);
            if let Err(e) = self.store.forget(id).await {
                tracing::debug!(approval = id, %e, "cannot delete an approval's row; trying at the next look");
            }
        }
    }
}

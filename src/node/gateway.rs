//! A platform's gateway on a cluster node (issue 36): only the node holding
//! the platform's lease (`gw:telegram:<bot id>`, `gw:whatsapp:<number>`)
//! polls it (Telegram) and sends to it. WhatsApp receives on every node with
//! a linked device; its rounds here are its sending.
//! Every node tries to claim the lease while it is free or its holder's row
//! expired; the holder serves until it loses it (its incarnation lapsed),
//! then stops polling and sending at once and tries again like the others.
//! Messages and replies travel between nodes through the store: whoever
//! polls stores what arrives, whoever owns a group answers, and the
//! gateway's delivery sends what any node wrote to the outbox.
//! A round's own work (an adapter's polling and delivery) is the caller's,
//! with the caller's error type: this loop only decides when a round runs.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::approvals::Shower;
use super::drain::others_alive;
use super::membership::NodeState;
use crate::channel::ApprovalAsk;
use crate::cluster::{LeaseName, NodeId};
use crate::store::Leases;

/// How often a node that does not hold the gateway tries to claim it.
const TRY_EVERY: Duration = Duration::from_millis(500);

/// The gateway's lease and whose it may be.
pub struct Gateway {
    pub leases: Leases,
    pub lease: LeaseName,
    pub node: NodeId,
    pub state: watch::Receiver<NodeState>,
    /// Shows the tool approvals of every node for this platform's chats, round by round.
    pub approvals: Option<Shower>,
    /// Cancelled when this node drains: the gateway goes to another node
    /// once one can take it, and is not claimed again.
    pub draining: CancellationToken,
}

/// When a served round ends: its intake at `stop` (shutdown, or the lease
/// lost), its delivery at `stop_delivery` (the end of the flush, or the lease lost).
pub struct Round {
    pub stop: CancellationToken,
    pub stop_delivery: CancellationToken,
    /// Approval questions for this round (forwarded from the node's queue).
    pub asks: mpsc::Receiver<ApprovalAsk>,
}

impl Gateway {
    /// The lease of the Telegram bot whose token is `token` (`<bot id>:<secret>`).
    pub fn telegram_lease(token: &str) -> Option<LeaseName> {
        let id = token.split(':').next()?.parse::<i64>().ok()?;
        Some(LeaseName::telegram(id))
    }

    /// Claims the lease, serves a round with `serve` while it is held, and
    /// again after each loss, until `shutdown`.
    pub async fn serve<F, Fut, E>(
        self,
        asks: mpsc::Receiver<ApprovalAsk>,
        shutdown: CancellationToken,
        stop_delivery: CancellationToken,
        serve: F,
    ) -> Result<(), E>
    where
        F: FnMut(Round) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        let (_always, fit) = watch::channel(true);
        self.serve_while_fit(fit, asks, shutdown, stop_delivery, serve).await
    }

    /// [`Gateway::serve`] only while `fit` (this node can reach the
    /// platform): an unfit node does not claim the lease, and a holder that
    /// turns unfit ends its round at once and lets the lease go, so a node
    /// that can serve takes it without waiting for an expiry.
    pub async fn serve_while_fit<F, Fut, E>(
        mut self,
        mut fit: watch::Receiver<bool>,
        mut asks: mpsc::Receiver<ApprovalAsk>,
        shutdown: CancellationToken,
        stop_delivery: CancellationToken,
        mut serve: F,
    ) -> Result<(), E>
    where
        F: FnMut(Round) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        while self.claim(&shutdown, &mut fit).await {
            tracing::info!(lease = %self.lease.as_str(), node = %self.node, "this node is the gateway now");
            let (lost, unfit, handed) = (CancellationToken::new(), CancellationToken::new(), CancellationToken::new());
            let watching = tokio::spawn(lost_when_gone(self.leases.clone(), self.lease.clone(), lost.clone()));
            let unfitting = tokio::spawn(when_unfit(fit.clone(), unfit.clone()));
            let handing = tokio::spawn(hand_over_when_taken(self.taker(), handed.clone()));
            let ended = either(&lost, &either(&unfit, &handed));
            let (round_tx, round_asks) = mpsc::channel(16);
            let forwarding = forward(&mut asks, round_tx.clone());
            let stop = either(&shutdown, &ended);
            let showing = self.approvals.as_ref().map(|shower| shower.start(round_tx, &stop));
            let round = Round { stop, stop_delivery: either(&stop_delivery, &ended), asks: round_asks };
            let served = serve(round).await;
            watching.abort();
            unfitting.abort();
            handing.abort();
            if let Some(showing) = showing {
                showing.stop().await;
            }
            asks = forwarding.back().await;
            if !ended.is_cancelled() {
                return served;
            }
            if handed.is_cancelled() && !lost.is_cancelled() {
                // Polling ended with the round: the next node polls from where the store says.
                match self.leases.release(&self.lease).await {
                    Ok(()) => {
                        tracing::info!(lease = %self.lease.as_str(), "this node drains: it handed the gateway to another node")
                    }
                    Err(e) => {
                        tracing::warn!(lease = %self.lease.as_str(), %e, "cannot let the gateway's lease go; it moves when this node leaves")
                    }
                }
            } else if unfit.is_cancelled() && !lost.is_cancelled() {
                tracing::warn!(lease = %self.lease.as_str(), "this node cannot reach the platform now: it let the gateway's lease go");
                if let Err(e) = self.leases.release(&self.lease).await {
                    tracing::debug!(lease = %self.lease.as_str(), %e, "the gateway's lease was gone already");
                }
            } else {
                tracing::warn!(lease = %self.lease.as_str(), "this node lost the gateway's lease: it stopped polling and sending");
            }
        }
        Ok(())
    }

    /// Tries to claim the lease (while `fit`) until it is held; false at shutdown.
    async fn claim(&mut self, shutdown: &CancellationToken, fit: &mut watch::Receiver<bool>) -> bool {
        loop {
            let (state, fit_now) = (*self.state.borrow_and_update(), *fit.borrow_and_update());
            let draining = self.draining.is_cancelled();
            if let (NodeState::Registered { incarnation, .. }, true, false) = (state, fit_now, draining) {
                match self.leases.claim(&self.lease, &self.node, incarnation).await {
                    Ok(Some(_)) => return true,
                    Ok(None) => {}
                    Err(e) => tracing::warn!(lease = %self.lease.as_str(), %e, "cannot claim the gateway's lease"),
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(TRY_EVERY) => {}
                Ok(()) = self.state.changed() => {}
                Ok(()) = fit.changed() => {}
            }
        }
    }
}

/// What a draining gateway needs to know whether another node can take it.
struct Taker {
    leases: Leases,
    node: NodeId,
    draining: CancellationToken,
}

impl Gateway {
    fn taker(&self) -> Taker {
        Taker { leases: self.leases.clone(), node: self.node.clone(), draining: self.draining.clone() }
    }
}

/// How often a draining gateway looks for a node to take it.
const TAKER_LOOK: Duration = Duration::from_millis(200);

/// Cancels `handed` once this node drains and another live node, which
/// claims the lease within its next try, can take the gateway; until then
/// this node keeps serving it, so no update waits for a lease to expire.
async fn hand_over_when_taken(taker: Taker, handed: CancellationToken) {
    taker.draining.cancelled().await;
    while !others_alive(&taker.leases, &taker.node).await {
        tokio::time::sleep(TAKER_LOOK).await;
    }
    handed.cancel();
}

/// Cancels `unfit` once `fit` turns false (never, if its sender is gone).
async fn when_unfit(mut fit: watch::Receiver<bool>, unfit: CancellationToken) {
    while *fit.borrow_and_update() {
        if fit.changed().await.is_err() {
            return;
        }
    }
    unfit.cancel();
}

/// Cancels `lost` once this node no longer holds `lease`.
async fn lost_when_gone(leases: Leases, lease: LeaseName, lost: CancellationToken) {
    let mut changes = leases.changes();
    while leases.holds(&lease) {
        if changes.changed().await.is_err() {
            break;
        }
    }
    lost.cancel();
}

/// A token cancelled when `a` or `b` is.
fn either(a: &CancellationToken, b: &CancellationToken) -> CancellationToken {
    let both = a.child_token();
    let (b, cancel) = (b.clone(), both.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = b.cancelled() => cancel.cancel(),
            _ = cancel.cancelled() => {}
        }
    });
    both
}

/// Forwards the node's approval questions to one round's queue.
struct Forwarding {
    task: tokio::task::JoinHandle<mpsc::Receiver<ApprovalAsk>>,
    stop: CancellationToken,
}

impl Forwarding {
    /// Ends the forwarding and gives the node's queue back.
    async fn back(self) -> mpsc::Receiver<ApprovalAsk> {
        self.stop.cancel();
        self.task.await.expect("the approval forwarder does not panic")
    }
}

fn forward(asks: &mut mpsc::Receiver<ApprovalAsk>, tx: mpsc::Sender<ApprovalAsk>) -> Forwarding {
    let (_, empty) = mpsc::channel(1);
    let mut from = std::mem::replace(asks, empty);
    let stop = CancellationToken::new();
    let until = stop.clone();
    let task = tokio::spawn(async move {
        loop {
            let ask = tokio::select! {
                _ = until.cancelled() => break,
                ask = from.recv() => ask,
            };
            let Some(ask) = ask else { break };
            if tx.send(ask).await.is_err() {
                break;
            }
        }
        from
    });
    Forwarding { task, stop }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bots_token_names_its_lease() {
        assert_eq!(Gateway::telegram_lease("123456:SECRET"), Some(LeaseName::telegram(123456)));
    }
}

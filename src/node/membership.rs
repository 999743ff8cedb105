//! The node's membership task (issue 36): registers this `pincer run` as a
//! node in the shared store, renews its row every `renew_every`, and tells
//! whoever runs CLIs whether they may ([`NodeState`], through a
//! `tokio::sync::watch`). It owns its state, is reached through
//! [`Membership`], and stops at the shutdown token it is given, leaving the
//! cluster. Touches the store's `nodes` row of this node only (`ClusterStore`).
//!
//! The decisions are `cluster::{deadline, timing}`'s: when to renew, until
//! when the CLIs may run, what a renewal's answer means. This only runs them:
//! a renewal that fails on the way (the database is down) changes nothing, so
//! the deadline bites when no renewal succeeded in time; one the database
//! refuses (the row expired, or a newer incarnation took it) ends the
//! incarnation at once. A lapsed node registers again as a new incarnation,
//! naming the one it held (`$4`), so it need not wait for its old row to expire.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use crate::cluster::{Deadline, LeaseTiming, NodeId, Renewed};
use crate::retry::{Backoff, RetryPolicy};
use crate::store::ClusterStore;

/// The first pause before registering again after a refusal or a failure;
/// the pauses double up to the node's `renew_every`.
const REGISTER_FIRST_RETRY: Duration = Duration::from_millis(100);

/// What the membership task is started with.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub node: NodeId,
    pub timing: LeaseTiming,
    /// Sessions this node may run at once (placement's capacity).
    pub slots: i64,
}

/// Whether this node's CLIs may run. Anything but `Registered` means: none.
///
/// A watcher may miss a short `Lapsed` (a watch keeps only the latest
/// value): a `Registered` with another incarnation than the one it saw
/// means the one before lapsed, and what ran under it must be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Not registered yet: at start, or while another live process holds
    /// this node id.
    Joining,
    /// Registered as `incarnation`; the CLIs may run until `deadline`
    /// (moved forward by every renewal that succeeds).
    Registered { incarnation: i64, deadline: Instant },
    /// No renewal succeeded in time (or the database refused one): every
    /// CLI must be killed now; the task is registering again.
    Lapsed,
    /// Shut down (and left the cluster if it was registered).
    Stopped,
}

/// The running membership task.
pub struct Membership {
    state: watch::Receiver<NodeState>,
    task: JoinHandle<()>,
}

impl Membership {
    /// Starts the task: it registers `config.node` through `cluster`, renews
    /// with the live session count `live` reports, and leaves once
    /// `shutdown` is cancelled. Cancel it only once this node's CLIs are
    /// dead: leaving lets other nodes claim its groups at once.
    pub fn start(
        cluster: ClusterStore,
        config: MembershipConfig,
        live: watch::Receiver<usize>,
        shutdown: CancellationToken,
    ) -> Membership {
        let (state, watching) = watch::channel(NodeState::Joining);
        let task = Task { cluster, config, live, state, shutdown };
        Membership { state: watching, task: tokio::spawn(task.run()) }
    }

    /// The node's state, to watch.
    pub fn state(&self) -> watch::Receiver<NodeState> {
        self.state.clone()
    }

    /// Waits for the task to end (after the shutdown token was cancelled).
    pub async fn stopped(self) {
        if let Err(e) = self.task.await {
            tracing::error!(%e, "the cluster membership task failed");
        }
    }
}

struct Task {
    cluster: ClusterStore,
    config: MembershipConfig,
    live: watch::Receiver<usize>,
    state: watch::Sender<NodeState>,
    shutdown: CancellationToken,
}

/// How an incarnation's renewals ended.
enum Ended {
    Lapsed,
    Shutdown,
}

/// What one wait in the renewal loop brought.
enum Woke {
    Shutdown,
    DeadlinePassed,
    Answered(Answer),
}

/// A renewal and its answer.
struct Answer {
    sent: crate::cluster::RenewalSent,
    renewed: Result<bool, crate::store::StoreError>,
    at: Instant,
}

impl Task {
    async fn run(self) {
        let mut before = 0;
        while let Some((incarnation, deadline)) = self.register(before).await {
            match self.renew(incarnation, deadline).await {
                Ended::Lapsed => {
                    // Every lease went with the incarnation: the sessions kill their CLIs now.
                    self.cluster.drop_all(&self.config.node);
                    self.state.send_replace(NodeState::Lapsed);
                    tracing::warn!(node = %self.config.node, incarnation, "this node's lease lapsed: \
                        its sessions must stop; registering again as a new incarnation");
                    before = incarnation;
                }
                Ended::Shutdown => {
                    self.leave(incarnation).await;
                    break;
                }
            }
        }
        self.state.send_replace(NodeState::Stopped);
    }

    /// Registers a new incarnation, trying again while another live process
    /// holds the node id or the database fails; `None` at shutdown.
    async fn register(&self, before: i64) -> Option<(i64, Deadline)> {
        let node = &self.config.node;
        let ttl_us = micros(self.config.timing.lease_ttl());
        let mut backoff = Backoff::new(RetryPolicy::new(REGISTER_FIRST_RETRY, self.config.timing.renew_every()));
        loop {
            let mut deadline = Deadline::new(self.config.timing.alive_after_renewal());
            let sent = deadline.renewal_sent(Instant::now());
            let registering = self.cluster.register(node, self.config.slots, ttl_us, before);
            let answer = tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                answer = registering => answer,
            };
            match answer {
                Ok(Some(incarnation)) => {
                    // A first success always gives a deadline; one already
                    // passed (a slow answer) lapses at the first wait.
                    let _alive: Renewed = deadline.renewal_succeeded(sent, Instant::now());
                    tracing::info!(%node, incarnation, "registered as a cluster node");
                    return Some((incarnation, deadline));
                }
                Ok(None) if backoff.failures() == 0 => tracing::warn!(
                    %node,
                    "another live pincer holds this node id: if it runs on another machine, give one of them \
                     its own [cluster] node_id; if it was this node's previous process, its row expires within \
                     cluster.lease_ttl; trying again until then"
                ),
                Ok(None) => tracing::debug!(%node, "the node id is still held by another live pincer"),
                Err(e) => tracing::warn!(%node, %e, "cannot register this node in the store; trying again"),
            }
            if !backoff.wait(None, &self.shutdown).await {
                return None;
            }
        }
    }

    /// Renews `incarnation` every `renew_every` until its deadline passes or
    /// the shutdown token is cancelled, publishing each new deadline.
    async fn renew(&self, incarnation: i64, mut deadline: Deadline) -> Ended {
        let every = self.config.timing.renew_every();
        let mut next = deadline.last_sent().unwrap_or_else(Instant::now) + every;
        loop {
            let Some(until) = deadline.until().filter(|_| !deadline.expired(Instant::now())) else {
                return Ended::Lapsed;
            };
            self.cluster.set_deadline(until);
            self.state.send_if_modified(|state| {
                let now = NodeState::Registered { incarnation, deadline: until };
                *state != now && {
                    *state = now;
                    true
                }
            });
            let woke = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => Woke::Shutdown,
                _ = sleep_until(until) => Woke::DeadlinePassed,
                answer = self.renew_once(incarnation, &mut deadline, next) => Woke::Answered(answer),
            };
            let answer = match woke {
                Woke::Shutdown => return Ended::Shutdown,
                Woke::DeadlinePassed => return Ended::Lapsed,
                Woke::Answered(answer) => answer,
            };
            next = answer.sent.at() + every;
            match answer.renewed {
                Ok(true) if deadline.renewal_succeeded(answer.sent, answer.at) == Renewed::Alive => {}
                Ok(true) => return Ended::Lapsed,
                Ok(false) => {
                    deadline.renewal_refused();
                    tracing::warn!(node = %self.config.node, incarnation, "the store refused this node's renewal: \
                        its row expired or a newer incarnation replaced it");
                    return Ended::Lapsed;
                }
                Err(e) => tracing::warn!(node = %self.config.node, %e, left = ?deadline.left(answer.at),
                    "a renewal failed; the sessions stop if none succeeds before the deadline"),
            }
        }
    }

    /// Waits until `at`, then sends one renewal, stamped right before it goes out.
    async fn renew_once(&self, incarnation: i64, deadline: &mut Deadline, at: Instant) -> Answer {
        sleep_until(at).await;
        let live = i64::try_from(*self.live.borrow()).unwrap_or(i64::MAX);
        let sent = deadline.renewal_sent(Instant::now());
        let ttl_us = micros(self.config.timing.lease_ttl());
        let renewed = self.cluster.renew(&self.config.node, incarnation, ttl_us, live).await;
        Answer { sent, renewed, at: Instant::now() }
    }

    /// Ends the incarnation in the store, so its groups move at once; bounded
    /// by the ttl, after which the row expired anyway.
    async fn leave(&self, incarnation: i64) {
        let node = &self.config.node;
        let leaving = self.cluster.leave(node, incarnation);
        match tokio::time::timeout(self.config.timing.lease_ttl(), leaving).await {
            Ok(Ok(())) => tracing::info!(%node, incarnation, "left the cluster"),
            Ok(Err(e)) => tracing::warn!(%node, %e, "cannot leave the cluster; the row expires by itself"),
            Err(_) => tracing::warn!(%node, "leaving the cluster timed out; the row expires by itself"),
        }
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;

//! A running daemon: the engine, the services started around it, and
//! [`Running::stop`], the one way it stops (in the order `app::stop` holds).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::services::Services;
use super::stop::{self, Stages};
use crate::domain::Platform;
use crate::lock::DataLock;
use crate::outbox::Outbox;
use crate::service::Notifier;
use crate::store::Store;

/// The daemon once started; the data directory's lock is held until it
/// has stopped (the kernel releases it if the process dies).
pub struct Running {
    pub(super) engine: Engine,
    pub(super) services: Services,
    /// `claude.shutdown_grace`: how long the outbox may take to flush.
    grace: Duration,
    /// On a cluster node: its membership, left once the sessions are gone
    /// and the outbox flushed.
    pub(super) node: Option<super::node::ClusterNode>,
    /// A stop was asked for (SIGTERM, Ctrl-C, a test): on a cluster node the
    /// stop drains first, so this is not yet the services' shutdown token.
    requested: CancellationToken,
    /// `pincer drain` asked this node to hand everything over and stop.
    pub(super) drain_asked: CancellationToken,
    /// How long a drain may take in all.
    drain_limit: Duration,
    _lock: DataLock,
}

impl Running {
    /// Services are started on it afterwards; they stop at `shutdown`, which
    /// [`Running::stop`] cancels once `requested` was (and a cluster node drained).
    pub fn new(
        engine: Engine,
        lock: DataLock,
        grace: Duration,
        shutdown: CancellationToken,
        requested: CancellationToken,
        drain_limit: Duration,
    ) -> Running {
        let services = Services::new(shutdown);
        let drain_asked = CancellationToken::new();
        Running { engine, services, grace, node: None, requested, drain_asked, drain_limit, _lock: lock }
    }

    /// Serves until the shutdown token is cancelled, telling systemd (when
    /// it watches) that pincer is ready, alive, and stopping.
    pub async fn until_shutdown(&self) {
        let systemd = Notifier::from_env();
        systemd.ready();
        let asked = either(&self.requested, &self.drain_asked);
        watch_until(&systemd, &self.engine.store, &asked).await;
        systemd.stopping();
        tracing::info!("shutting down");
    }

    /// Stops: intake off, sessions drained, outbox flushed, store closed.
    /// Fails when a platform adapter did.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        stop::in_order(&mut self).await
    }
}

impl Stages for Running {
    async fn hand_over(&mut self) {
        if let Some(node) = &self.node {
            node.drain(&self.engine, self.drain_limit).await;
        }
    }

    async fn intake_off(&mut self) {
        // Whoever asked (or, after a failed start or a drain, did not) sees the stop too.
        self.requested.cancel();
        self.services.intake_off().await;
    }

    async fn drain_sessions(&mut self) {
        self.engine.stop_sessions().await;
    }

    async fn flush_outbox(&mut self) -> anyhow::Result<()> {
        drain(&self.engine.outbox, &self.services.served(), self.grace).await;
        self.services.stop_adapters().await
    }

    async fn close_store(&mut self) {
        // Only now, with its CLIs gone and its outbox flushed: leaving lets
        // other nodes claim this node's groups and gateway at once, and a
        // gateway still sending would send beside the next one.
        if let Some(node) = self.node.take() {
            node.leave().await;
        }
        self.engine.store.close().await;
    }
}

/// The main loop's wait for `shutdown`: under a systemd watchdog, a ping
/// each time the store answers, so a stuck runtime or store gets pincer
/// restarted.
async fn watch_until(systemd: &crate::service::Notifier, store: &Store, shutdown: &CancellationToken) {
    let Some(every) = systemd.ping_every() else {
        return shutdown.cancelled().await;
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if store.health().answers().await {
                    systemd.alive();
                } else {
                    tracing::warn!("the store does not answer; not pinging systemd's watchdog");
                }
            }
        }
    }
}

/// A token cancelled once `a` or `b` is.
fn either(a: &CancellationToken, b: &CancellationToken) -> CancellationToken {
    let both = CancellationToken::new();
    let (a, b, cancel) = (a.clone(), b.clone(), both.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = a.cancelled() => {}
            _ = b.cancelled() => {}
        }
        cancel.cancel();
    });
    both
}

async fn drain(outbox: &Outbox, platforms: &[Platform], limit: Duration) {
    let mut written = outbox.subscribe();
    let waiting = || async {
        for platform in platforms {
            if outbox.waiting_chats(*platform).await.is_ok_and(|chats| !chats.is_empty()) {
                return true;
            }
        }
        false
    };
    let waited = tokio::time::timeout(limit, async {
        while waiting().await {
            // Woken by new rows; polled for rows that were delivered.
            let _ = tokio::time::timeout(Duration::from_millis(50), written.changed()).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!("replies were still waiting at shutdown; they are delivered at the next start");
    }
}

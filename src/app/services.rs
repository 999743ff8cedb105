//! The daemon's services as tasks, in the two groups that stop apart.
//! Intake services (control socket, HTTP endpoint, reload, retention) get
//! the shutdown token here, in one place, and must return once it is
//! cancelled. Platform adapters also get a second token that ends their
//! delivery, cancelled only once the outbox was flushed.

use std::future::Future;

use anyhow::anyhow;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::domain::Platform;

pub struct Services {
    shutdown: CancellationToken,
    intake: TaskTracker,
    stop_delivery: CancellationToken,
    adapters: Vec<(Platform, JoinHandle<anyhow::Result<()>>)>,
}

impl Services {
    pub fn new(shutdown: CancellationToken) -> Services {
        let (intake, stop_delivery, adapters) = (TaskTracker::new(), CancellationToken::new(), Vec::new());
        Services { shutdown, intake, stop_delivery, adapters }
    }

    /// The token every service of this daemon stops at.
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Starts an intake service with the shutdown token.
    pub fn intake<F>(&self, start: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.intake.spawn(start(self.shutdown.clone()));
    }

    /// Starts a platform's adapter with the shutdown token (its intake
    /// stops) and the delivery token (its delivery stops).
    pub fn adapter<F>(&mut self, platform: Platform, start: impl FnOnce(CancellationToken, CancellationToken) -> F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let serving = start(self.shutdown.clone(), self.stop_delivery.clone());
        self.adapters.push((platform, tokio::spawn(serving)));
    }

    /// The platforms an adapter was started for.
    pub fn served(&self) -> Vec<Platform> {
        self.adapters.iter().map(|(platform, _)| *platform).collect()
    }

    /// Cancels the shutdown token (the sessions hear it too) and waits for
    /// the intake services to return.
    pub async fn intake_off(&self) {
        self.shutdown.cancel();
        self.intake.close();
        self.intake.wait().await;
    }

    /// Stops the adapters' delivery and waits for them: the first failure,
    /// if one failed.
    pub async fn stop_adapters(&mut self) -> anyhow::Result<()> {
        self.stop_delivery.cancel();
        let mut ended = Ok(());
        for (platform, serving) in self.adapters.drain(..) {
            let result = serving.await.unwrap_or_else(|e| Err(anyhow!("the {platform} channel task failed: {e}")));
            ended = ended.and(result);
        }
        ended
    }
}

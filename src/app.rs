//! Wiring: opens the store, resolves the CLI, starts the session engine, and
//! owns shutdown. `main` and the tests start pincer through the same
//! functions here, with shutdown passed in as a value.

use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::claude;
use crate::config::Config;
use crate::domain::{GroupName, Outbound};
use crate::groups;
use crate::metrics::Metrics;
use crate::router::Router;
use crate::session::{SessionDeps, Slots};
use crate::store::Store;

/// How many replies may wait for the channel adapters.
const OUTBOX: usize = 256;

/// The running session engine: a router in front of per-group actors, and the
/// stream of everything that goes back to the chats.
pub struct Engine {
    pub router: Router,
    pub outbound: async_channel::Receiver<Outbound>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl Engine {
    /// Starts the engine. Fails early, with what to do, when the store cannot
    /// be opened or the CLI cannot be found.
    pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Engine> {
        let program = claude::resolve_program(&config)?;
        let store = open_store(&config).await?;
        let (outbox, outbound) = async_channel::bounded(OUTBOX);
        let metrics = Arc::new(Metrics::default());
        let deps = Arc::new(SessionDeps {
            store: store.clone(),
            slots: Slots::new(config.claude.max_live_sessions),
            config: Arc::new(config),
            program,
            outbox,
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        });
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        Ok(Engine { router, outbound, store, metrics, tracker, shutdown })
    }

    /// Stops every session (stdin closed, grace, then signals) and waits for
    /// them. Results printed while closing are still stored.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.store.close().await;
    }
}

/// Opens (and migrates) the store in `data_dir`.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
    Ok(Store::open(&config.database_path()).await?)
}

/// Registers a group: its store row, then its folder with starter memory
/// (what `pincer groups add` does).
pub async fn register_group(
    store: &Store,
    config: &Config,
    name: &GroupName,
    allowed_tools: Option<&[String]>,
) -> anyhow::Result<()> {
    store.add_group(name, allowed_tools).await?;
    groups::create(&config.groups_dir, name, &config.assistant_name)
        .with_context(|| format!("cannot create the folder of group `{name}` in {}", config.groups_dir.display()))?;
    Ok(())
}

/// The daemon: runs until `shutdown` is cancelled, then stops cleanly.
///
/// No chat channel is served yet, so replies (from sessions started by
/// other means) are only logged.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let engine = Engine::start(config, shutdown.clone()).await?;
    let groups = engine.store.groups().await?;
    tracing::info!(groups = groups.len(), "pincer is running; stop it with Ctrl-C or SIGTERM");
    let outbound = engine.outbound.clone();
    let log_replies = tokio::spawn(async move {
        while let Ok(out) = outbound.recv().await {
            tracing::info!(group = %out.group, kind = ?out.kind, "reply: {}", out.text);
        }
    });
    shutdown.cancelled().await;
    tracing::info!("shutting down");
    engine.stop().await;
    log_replies.abort();
    Ok(())
}

//! Wiring: opens the store, resolves the CLI, starts the session engine, and
//! owns shutdown. `main` and the tests start pincer through the same
//! functions here, with shutdown passed in as a value.

use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::telegram;
use crate::claude;
use crate::config::Config;
use crate::domain::{ApprovalRequest, GroupName, Outbound};
use crate::groups;
use crate::metrics::Metrics;
use crate::router::Router;
use crate::sandbox::Launcher;
use crate::scheduler::{self, SchedulerDeps, SchedulerHandle, SchedulerInbox};
use crate::session::{SessionDeps, Slots};
use crate::store::{GroupSettings, Store};
use crate::tools::Toolbox;

/// How many replies may wait for the channel adapters.
const OUTBOX: usize = 256;
/// How many tool calls may wait for a person at once, across all groups.
const APPROVALS: usize = 64;

/// The running session engine: a router in front of per-group actors, and the
/// stream of everything that goes back to the chats.
pub struct Engine {
    pub router: Router,
    pub outbound: async_channel::Receiver<Outbound>,
    /// Tool calls waiting for a person; a channel that can ask shows them.
    pub approvals: async_channel::Receiver<ApprovalRequest>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// Wakes the scheduler when schedules change in this process.
    pub scheduler: SchedulerHandle,
    /// What the scheduler needs until [`Engine::start_scheduler`] starts it.
    unstarted: Option<(SchedulerInbox, async_channel::Sender<Outbound>, crate::config::SchedulerConfig)>,
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
        let (approvals_tx, approvals) = async_channel::bounded(APPROVALS);
        let metrics = Arc::new(Metrics::default());
        let config = Arc::new(config);
        let launcher = Launcher::start(config.clone(), program, shutdown.clone()).await?;
        let (scheduler, inbox) = scheduler::channel();
        let tools = Arc::new(Toolbox::new(store.clone(), outbox.clone(), scheduler.clone(), config.timezone.clone()));
        let unstarted = Some((inbox, outbox.clone(), config.scheduler.clone()));
        let deps = Arc::new(SessionDeps {
            store: store.clone(),
            slots: Slots::new(config.claude.max_live_sessions),
            config,
            launcher,
            outbox,
            approvals: approvals_tx,
            approval_ids: Default::default(),
            metrics: metrics.clone(),
            tools,
            shutdown: shutdown.clone(),
        });
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        Ok(Engine { router, outbound, approvals, store, metrics, scheduler, unstarted, tracker, shutdown })
    }

    /// Starts firing scheduled prompts (`pincer run` does; `pincer chat` does not,
    /// so a terminal chat never receives other groups' scheduled runs). Once only.
    pub fn start_scheduler(&mut self) {
        let Some((inbox, outbox, config)) = self.unstarted.take() else {
            return;
        };
        let deps = SchedulerDeps {
            store: self.store.clone(),
            router: self.router.clone(),
            outbox,
            config,
            tracker: self.tracker.clone(),
            shutdown: self.shutdown.clone(),
        };
        scheduler::spawn(inbox, deps);
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
    settings: &GroupSettings,
) -> anyhow::Result<()> {
    store.add_group(name, settings).await?;
    groups::create(&config.groups_dir, name, &config.assistant_name)
        .with_context(|| format!("cannot create the folder of group `{name}` in {}", config.groups_dir.display()))?;
    Ok(())
}

/// The daemon: serves Telegram (when `[telegram] token` is set) until
/// `shutdown` is cancelled, then stops cleanly.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let telegram_config = config.telegram.clone();
    let assistant = config.assistant_name.clone();
    let mut engine = Engine::start(config, shutdown.clone()).await?;
    engine.start_scheduler();
    let groups = engine.store.groups().await?;
    let served = if telegram_config.token.is_some() {
        let channel = telegram::Telegram::connect(&telegram_config, &engine, &assistant).await?;
        tracing::info!(groups = groups.len(), bot = %channel.username(), "pincer is running and serving Telegram; stop it with Ctrl-C or SIGTERM");
        tokio::spawn(channel.serve(telegram_config, shutdown.clone()))
    } else {
        tracing::warn!(
            groups = groups.len(),
            "no chat channel is configured, so replies are only logged: set [telegram] token in pincer.toml \
             (or PINCER_TELEGRAM__TOKEN) to serve Telegram"
        );
        tracing::info!(groups = groups.len(), "pincer is running; stop it with Ctrl-C or SIGTERM");
        tokio::spawn(log_only(engine.outbound.clone(), engine.approvals.clone()))
    };
    // After the channel is up: the notices and replies have somewhere to go.
    if let Err(e) = engine.router.redeliver_unanswered().await {
        tracing::error!(%e, "cannot send again the messages left unanswered before the restart");
    }
    shutdown.cancelled().await;
    tracing::info!("shutting down");
    engine.stop().await;
    match served.await {
        Ok(result) => result,
        Err(e) => Err(anyhow::anyhow!("the chat channel task failed: {e}")),
    }
}

/// Without a channel: replies go to the log, and tool calls that need a person are denied.
async fn log_only(
    outbound: async_channel::Receiver<Outbound>,
    approvals: async_channel::Receiver<ApprovalRequest>,
) -> anyhow::Result<()> {
    loop {
        tokio::select! {
            Ok(out) = outbound.recv() => tracing::info!(group = %out.group, kind = ?out.kind, "reply: {}", out.text),
            Ok(request) = approvals.recv() => {
                tracing::warn!(group = %request.group, tool = %request.tool_name, "no channel can ask the admins; denied");
                drop(request.respond);
            }
            else => return Ok(()),
        }
    }
}

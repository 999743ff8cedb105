//! Wiring: opens the store, resolves the CLI, starts the session engine, and
//! owns shutdown. `main` and the tests start pincer through the same
//! functions here, with shutdown passed in as a value.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::approvals::{self, Askers};
use crate::channel::console::{self, ChatEnd, ConsoleOptions};
use crate::channel::retry::RetryPolicy;
use crate::channel::telegram::Telegram;
use crate::channel::{Directory, Ports};
use crate::claude;
use crate::config::Config;
use crate::domain::{ApprovalRequest, GroupName, Platform};
use crate::groups;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::router::Router;
use crate::sandbox::Launcher;
use crate::scheduler::{self, SchedulerDeps, SchedulerHandle, SchedulerInbox};
use crate::session::{SessionDeps, Slots};
use crate::store::{GroupSettings, Store};
use crate::tools::Toolbox;

/// How many tool calls may wait for a person at once, across all groups.
const APPROVALS: usize = 64;

/// The running session engine: a router in front of per-group actors, and
/// the outbox that everything for the chats goes through.
pub struct Engine {
    pub router: Router,
    pub outbox: Outbox,
    pub directory: Directory,
    /// Tool calls waiting for a person; `channel::approvals::route` hands
    /// each to the channel of its group's chat.
    pub approvals: async_channel::Receiver<ApprovalRequest>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// Wakes the scheduler when schedules change in this process.
    pub scheduler: SchedulerHandle,
    /// What the scheduler needs until [`Engine::start_scheduler`] starts it.
    unstarted: Option<(SchedulerInbox, crate::config::SchedulerConfig)>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl Engine {
    /// Starts the engine. Fails early, with what to do, when the store cannot
    /// be opened or the CLI cannot be found.
    pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Engine> {
        Self::start_with(config, None, shutdown).await
    }

    /// Starts the engine for `pincer chat NAME`: that group's replies go to
    /// the terminal, whatever chat it is bound to.
    pub async fn start_console(
        config: Config,
        group: GroupName,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Engine> {
        Self::start_with(config, Some(group), shutdown).await
    }

    async fn start_with(
        config: Config,
        console: Option<GroupName>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Engine> {
        let program = claude::resolve_program(&config)?;
        let store = open_store(&config).await?;
        let outbox = Outbox::new(store.clone(), console);
        let directory = Directory::new(store.clone(), outbox.clone());
        let (approvals_tx, approvals) = async_channel::bounded(APPROVALS);
        let metrics = Arc::new(Metrics::default());
        let config = Arc::new(config);
        let launcher = Launcher::start(config.clone(), program, shutdown.clone()).await?;
        let (scheduler, inbox) = scheduler::channel();
        let tools = Arc::new(Toolbox::new(store.clone(), outbox.clone(), scheduler.clone(), config.timezone.clone()));
        let unstarted = Some((inbox, config.scheduler.clone()));
        let deps = Arc::new(SessionDeps {
            store: store.clone(),
            slots: Slots::new(config.claude.max_live_sessions),
            config,
            launcher,
            outbox: outbox.clone(),
            approvals: approvals_tx,
            approval_ids: Default::default(),
            metrics: metrics.clone(),
            tools,
            shutdown: shutdown.clone(),
        });
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        Ok(Engine { router, outbox, directory, approvals, store, metrics, scheduler, unstarted, tracker, shutdown })
    }

    /// What a channel adapter gets of the engine.
    pub fn ports(&self) -> Ports {
        Ports { router: self.router.clone(), directory: self.directory.clone(), outbox: self.outbox.clone() }
    }

    /// Starts firing scheduled prompts (`pincer run` does; `pincer chat` does not,
    /// so a terminal chat never receives other groups' scheduled runs). Once only.
    pub fn start_scheduler(&mut self) {
        let Some((inbox, config)) = self.unstarted.take() else {
            return;
        };
        let deps = SchedulerDeps {
            store: self.store.clone(),
            router: self.router.clone(),
            outbox: self.outbox.clone(),
            config,
            tracker: self.tracker.clone(),
            shutdown: self.shutdown.clone(),
        };
        scheduler::spawn(inbox, deps);
    }

    /// Stops every session (stdin closed, grace, then signals) and waits for
    /// them. Results printed while closing are still stored and queued.
    pub async fn stop_sessions(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Stops every session, then closes the store.
    pub async fn stop(self) {
        self.stop_sessions().await;
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
/// `shutdown` is cancelled, then stops cleanly: sessions first, then what
/// they said is delivered for up to `claude.shutdown_grace`; whatever is
/// still waiting then goes out at the next start.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let telegram_config = config.telegram.clone();
    let assistant = config.assistant_name.clone();
    let retry = RetryPolicy::of(&config.delivery);
    let grace = config.claude.shutdown_grace;
    let mut engine = Engine::start(config, shutdown.clone()).await?;
    engine.start_scheduler();
    let groups = engine.store.groups().await?;
    let mut askers = Askers::default();
    let stop_delivery = CancellationToken::new();
    let served = if telegram_config.token.is_some() {
        let asks = askers.register(Platform::Telegram);
        let channel = Telegram::connect(&telegram_config, engine.ports(), &assistant).await?;
        tracing::info!(groups = groups.len(), bot = %channel.username(), "pincer is running and serving Telegram; stop it with Ctrl-C or SIGTERM");
        Some(tokio::spawn(channel.serve(telegram_config, asks, retry, shutdown.clone(), stop_delivery.clone())))
    } else {
        let waiting = engine.outbox.waiting_chats(Platform::Telegram).await?.len();
        tracing::warn!(
            groups = groups.len(),
            chats_with_replies_waiting = waiting,
            "no chat channel is configured, so replies wait in the outbox (`pincer history NAME` shows them): \
             set [telegram] token in pincer.toml (or PINCER_TELEGRAM__TOKEN) to serve Telegram"
        );
        tracing::info!(groups = groups.len(), "pincer is running; stop it with Ctrl-C or SIGTERM");
        None
    };
    let routing = approvals::route(
        engine.approvals.clone(),
        askers,
        engine.directory.clone(),
        engine.outbox.clone(),
        shutdown.clone(),
    );
    tokio::spawn(routing);
    // After the channel is up: the notices and replies have somewhere to go.
    if let Err(e) = engine.router.redeliver_unanswered().await {
        tracing::error!(%e, "cannot send again the messages left unanswered before the restart");
    }
    shutdown.cancelled().await;
    tracing::info!("shutting down");
    engine.stop_sessions().await;
    if served.is_some() {
        drain(&engine.outbox, Platform::Telegram, grace).await;
    }
    stop_delivery.cancel();
    let result = match served {
        Some(served) => served.await.unwrap_or_else(|e| Err(anyhow::anyhow!("the chat channel task failed: {e}"))),
        None => Ok(()),
    };
    engine.store.close().await;
    result
}

/// `pincer chat`: a terminal chat with one group of `engine` (started with
/// [`Engine::start_console`]), its approval requests shown in the terminal.
pub async fn console_chat<R, W>(
    engine: &Engine,
    opts: &ConsoleOptions,
    input: R,
    output: W,
    shutdown: CancellationToken,
) -> anyhow::Result<ChatEnd>
where
    R: tokio::io::AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut askers = Askers::default();
    let asks = askers.register(Platform::Console);
    let routing = tokio::spawn(approvals::route(
        engine.approvals.clone(),
        askers,
        engine.directory.clone(),
        engine.outbox.clone(),
        shutdown.clone(),
    ));
    let end = console::chat(&engine.ports(), asks, opts, input, output, shutdown).await;
    routing.abort();
    end
}

/// Waits (up to `limit`) until nothing deliverable waits for `platform`.
async fn drain(outbox: &Outbox, platform: Platform, limit: Duration) {
    let mut written = outbox.subscribe();
    let waited = tokio::time::timeout(limit, async {
        while outbox.waiting_chats(platform).await.is_ok_and(|chats| !chats.is_empty()) {
            // Woken by new rows; polled for rows that were delivered.
            let _ = tokio::time::timeout(Duration::from_millis(50), written.changed()).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!(%platform, "replies were still waiting at shutdown; they are delivered at the next start");
    }
}

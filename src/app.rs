//! Wiring: opens the store, resolves the CLI, starts the session engine, and
//! owns shutdown. `main` and the tests start pincer through the same
//! functions here, with shutdown passed in as a value.

pub mod reload;
mod retention;
mod submit;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::approvals::{self, Askers};
use crate::channel::console::{self, ChatEnd, ConsoleOptions};
use crate::channel::telegram::Telegram;
use crate::channel::whatsapp::{self, Hook, Real, ServeOptions, WaClient, WhatsApp};
use crate::channel::{Directory, Ports};
use crate::claude;
use crate::config::Config;
use crate::control::server::{Control, ControlSocket};
use crate::domain::{ApprovalRequest, GroupName, Platform};
use crate::groups;
use crate::lock::DataLock;
use crate::media::outgoing::Outgoing;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::retry::RetryPolicy;
use crate::router::Router;
use crate::sandbox::egress::{EgressService, Resolve, SystemResolver};
use crate::sandbox::Launcher;
use crate::scheduler::limits::Limits;
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
    /// The settings a reload changes, for the adapters' [`Ports`] and the scheduler.
    pub live: crate::config::Live,
    /// `pincer reload` and SIGHUP.
    pub reloader: Arc<reload::Reloader>,
    /// What the scheduler needs until [`Engine::start_scheduler`] starts it.
    unstarted: Option<(SchedulerInbox, crate::config::SchedulerConfig, chrono_tz::Tz)>,
    /// `[scheduler]`'s limits and `timezone`, for the adapters' [`Ports`].
    limits: Limits,
    zone: chrono_tz::Tz,
    /// The sandboxes' egress proxy, stopped after the sessions.
    egress: EgressService,
    /// Stops the credential and egress proxies. Not `shutdown`: a turn that
    /// ends during the sessions' grace may still call the API or the web.
    stop_proxies: CancellationToken,
    /// Stores what passed the credential proxy; ends after `stop_proxies`.
    spend_writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl Engine {
    /// Starts the engine. Fails early, with what to do, when the store cannot
    /// be opened or the CLI cannot be found.
    pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Engine> {
        Self::start_with(config, None, Arc::new(SystemResolver), shutdown).await
    }

    /// [`start`](Self::start), with the egress proxy looking names up and
    /// vetting addresses through `resolver` instead of the system's (a test
    /// answers made-up names with servers of its own).
    pub async fn start_resolving(
        config: Config,
        resolver: Arc<dyn Resolve>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Engine> {
        Self::start_with(config, None, resolver, shutdown).await
    }

    /// Starts the engine for `pincer chat NAME`: that group's replies go to
    /// the terminal, whatever chat it is bound to.
    pub async fn start_console(
        config: Config,
        group: GroupName,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Engine> {
        Self::start_with(config, Some(group), Arc::new(SystemResolver), shutdown).await
    }

    async fn start_with(
        config: Config,
        console: Option<GroupName>,
        resolver: Arc<dyn Resolve>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Engine> {
        let program = claude::resolve_program(&config)?;
        let store = open_store(&config).await?;
        // Once the store (and a linked device's) is open: an install made
        // before pincer kept its files private is fixed before any agent runs.
        crate::private::tighten(&config);
        let outbox = Outbox::new(store.outbox(), console);
        let directory = Directory::new(&store, outbox.clone());
        let (approvals_tx, approvals) = async_channel::bounded(APPROVALS);
        let metrics = Arc::new(Metrics::default());
        let config = Arc::new(config);
        let (live_setter, live) = crate::config::live(&config);
        let data_dir = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
        let stop_proxies = CancellationToken::new();
        // Until the engine is built: a start that fails stops what it started.
        let proxies_started = stop_proxies.clone().drop_guard();
        let egress = EgressService::new(
            store.egress(),
            resolver,
            config.sandbox.clone(),
            data_dir.join("run"),
            stop_proxies.clone(),
        );
        let launcher = Launcher::start(config.clone(), program, egress.clone(), stop_proxies.clone()).await?;
        let spend_writer = launcher.proxy_spend().map(|ledger| {
            tokio::spawn(crate::sandbox::proxy::spend::keep(ledger, store.budgets(), stop_proxies.clone()))
        });
        let (scheduler, inbox) = scheduler::channel();
        let limits = Limits::from(&config.scheduler);
        let outgoing = Outgoing::new(&config.groups_dir, &data_dir);
        sweep_outgoing(&store, &outgoing).await;
        let tools = Arc::new(Toolbox::new(
            &store,
            outbox.clone(),
            scheduler.clone(),
            config.timezone.clone(),
            limits,
            outgoing,
        ));
        let zone = config.timezone.parse().unwrap_or(chrono_tz::UTC);
        let unstarted = Some((inbox, config.scheduler.clone(), zone));
        let deps = Arc::new(SessionDeps {
            queue: store.queue(),
            preparing: store.preparing(),
            journal: store.journal(),
            groups: store.groups(),
            budgets: store.budgets(),
            slots: Slots::new(config.claude.max_live_sessions),
            cli: Arc::new(crate::session::RealCli::new(config.clone(), launcher)),
            config: config.clone(),
            live: live.clone(),
            outbox: outbox.clone(),
            approvals: approvals_tx,
            approval_ids: Default::default(),
            metrics: metrics.clone(),
            tools,
            shutdown: shutdown.clone(),
        });
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        let reloader =
            Arc::new(reload::Reloader::new(Config::clone(&config), live_setter, egress.clone(), router.clone()));
        proxies_started.disarm();
        crate::metrics::hop("engine_ready");
        Ok(Engine {
            router,
            outbox,
            directory,
            approvals,
            store,
            metrics,
            scheduler,
            live,
            reloader,
            unstarted,
            limits,
            zone,
            egress,
            stop_proxies,
            spend_writer: std::sync::Mutex::new(spend_writer),
            tracker,
            shutdown,
        })
    }

    /// Hands each approval request to the channel of its group's chat (see
    /// `channel::approvals::route`) until the sessions are gone or `shutdown`.
    pub fn route_approvals(&self, askers: Askers, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let routing =
            approvals::route(self.approvals.clone(), askers, self.directory.clone(), self.outbox.clone(), shutdown);
        tokio::spawn(routing)
    }

    /// What a channel adapter gets of the engine.
    pub fn ports(&self) -> Ports {
        Ports {
            router: self.router.clone(),
            directory: self.directory.clone(),
            outbox: self.outbox.clone(),
            live: self.live.clone(),
            scheduler: self.scheduler.clone(),
            limits: self.limits,
            zone: self.zone,
        }
    }

    /// Starts firing scheduled prompts (`pincer run` does; `pincer chat` does not,
    /// so a terminal chat never receives other groups' scheduled runs). Once only.
    pub fn start_scheduler(&mut self) {
        let Some((inbox, config, zone)) = self.unstarted.take() else {
            return;
        };
        let deps = SchedulerDeps {
            schedules: self.store.schedules(),
            groups: self.store.groups(),
            budgets: self.store.budgets(),
            queue: self.store.queue(),
            submit: Arc::new(self.router.clone()),
            outbox: self.outbox.clone(),
            config,
            live: self.live.clone(),
            zone,
            tracker: self.tracker.clone(),
            shutdown: self.shutdown.clone(),
        };
        scheduler::spawn(inbox, deps);
    }

    /// Stops every session (stdin closed, grace, then signals) and waits for
    /// them, then stops the proxies they used. Results printed while closing
    /// are still stored and queued.
    pub async fn stop_sessions(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.stop_proxies.cancel();
        self.egress.stop().await;
        let writer = self.spend_writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            // Its last write, before the store closes.
            let _ = writer.await;
        }
    }

    /// Stops every session, then closes the store.
    pub async fn stop(self) {
        self.stop_sessions().await;
        self.store.close().await;
    }
}

/// Removes the copies of sent files that no queued message holds (left by a
/// pincer stopped between a delivery and the copy's removal).
async fn sweep_outgoing(store: &Store, outgoing: &Outgoing) {
    let keep = match store.outbox().queued_files().await {
        Ok(paths) => paths.into_iter().collect(),
        Err(e) => return tracing::warn!(%e, "cannot read which sent files are still queued; none is removed"),
    };
    let outgoing = outgoing.clone();
    match tokio::task::spawn_blocking(move || outgoing.sweep(&keep)).await {
        Ok(0) | Err(_) => {}
        Ok(n) => tracing::info!(files = n, "removed copies of sent files that were already delivered"),
    }
}

/// Warns (from the background: the answer takes the CLI's startup) when the
/// CLI is not a version pincer is tested with.
fn warn_if_untested(program: std::path::PathBuf) {
    tokio::spawn(async move {
        if let Ok(version) = claude::install::version_of(&program).await {
            if claude::install::in_tested_range(&version) != Some(true) {
                let note = claude::install::range_note(&version);
                tracing::warn!(cli = %program.display(), %version, "the Claude Code CLI is {note}");
            }
        }
    });
}

/// Opens (and migrates) the store in `data_dir`.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    crate::private::create_dir(&config.data_dir)
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
    groups::check_not_reserved(name)?;
    store.groups().add_group(name, settings).await?;
    groups::create(&config.groups_dir, name, &config.assistant_name)
        .with_context(|| format!("cannot create the folder of group `{name}` in {}", config.groups_dir.display()))?;
    Ok(())
}

/// A WhatsApp connection for the daemon to serve: a client, the crate's
/// events in order, and what starts the real client once the adapter can
/// take its messages (`None` for a test's connection, which needs no start).
pub struct WhatsAppSource<C> {
    pub client: Arc<C>,
    pub events: async_channel::Receiver<Arc<whatsapp_rust::types::events::Event>>,
    pub start: Option<StartWhatsApp<C>>,
}

/// Starts the linked device's client, given the adapter that takes its messages.
pub type StartWhatsApp<C> = Box<dyn FnOnce(&WhatsApp<C>) -> whatsapp::link::Running + Send>;

/// The daemon: serves Telegram (when `[telegram] token` is set) and WhatsApp
/// (when a device is linked) until `shutdown` is cancelled, then stops
/// cleanly: sessions first, then what they said is delivered for up to
/// `claude.shutdown_grace`; whatever is still waiting then goes out at the
/// next start.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    // Before anything is opened: the device store and the chats are this process's alone.
    let lock = DataLock::acquire(&config.data_dir).await?;
    let whatsapp = match open_whatsapp(&config).await {
        Ok(source) => source,
        Err(e) => {
            // WhatsApp's trouble must not take Telegram down: say it, and serve the rest.
            tracing::error!("WhatsApp is not served: {e:#}");
            None
        }
    };
    serve(config, whatsapp, lock, shutdown).await
}

/// The linked WhatsApp device, if there is one.
async fn open_whatsapp(config: &Config) -> anyhow::Result<Option<WhatsAppSource<Real>>> {
    if !whatsapp::link::device_stored(config) {
        return Ok(None);
    }
    let hook = Hook::default();
    let Some(linked) = whatsapp::link::open(config, hook.clone()).await? else {
        return Ok(None);
    };
    tracing::info!(number = %linked.number(), "WhatsApp is linked");
    let client = Arc::new(Real(linked.client.clone()));
    let events = linked.events.clone();
    let start = move |adapter: &WhatsApp<Real>| {
        hook.set(adapter.clone());
        linked.start()
    };
    Ok(Some(WhatsAppSource { client, events, start: Some(Box::new(start)) }))
}

/// [`run`] with a given WhatsApp connection (the tests' fake).
pub async fn run_with<C: WaClient>(
    config: Config,
    whatsapp: Option<WhatsAppSource<C>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let lock = DataLock::acquire(&config.data_dir).await?;
    serve(config, whatsapp, lock, shutdown).await
}

/// The daemon's body; `_lock` is held until it returns (the kernel releases
/// it if the process dies).
async fn serve<C: WaClient>(
    config: Config,
    whatsapp: Option<WhatsAppSource<C>>,
    _lock: DataLock,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let telegram_config = config.telegram.clone();
    let http_config = config.http.clone();
    let timezone = config.timezone.clone();
    let retention = config.retention.clone();
    let assistant = config.assistant_name.clone();
    let retry = RetryPolicy::new(config.delivery.retry_first, config.delivery.retry_cap);
    let grace = config.claude.shutdown_grace;
    let silence_warning = config.whatsapp.silence_warning;
    let data_dir = config.data_dir.clone();
    if let Ok(program) = claude::resolve_program(&config) {
        warn_if_untested(program);
    }
    let mut engine = Engine::start(config, shutdown.clone()).await?;
    // However serving ends (a `?` below included), the sessions are stopped
    // the normal way before the store closes: none is left running.
    let ended: anyhow::Result<()> = async {
        // Before any channel or schedule is served: a new message must not
        // overtake an older unanswered one, and the scheduler's own reruns
        // must not be failed as leftovers. The notices wait in the outbox
        // until delivery starts.
        if let Err(e) = engine.router.recover().await {
            tracing::error!(%e, "cannot queue again the messages left unanswered before the restart");
        }
        engine.start_scheduler();
        let reloading = tokio::spawn(reload::on_sighup(engine.reloader.clone(), shutdown.clone()));
        let pruning = tokio::spawn(retention::run(engine.store.retention(), retention, shutdown.clone()));
        let groups = engine.store.groups().groups().await?;
        let mut askers = Askers::default();
        // `pincer chat NAME` attaches here; other commands say what they changed.
        let control = match ControlSocket::bind(&data_dir) {
            Ok(socket) => {
                let mut control =
                    Control::new(engine.ports(), engine.scheduler.clone(), askers.register(Platform::Console));
                control.reloader = Some(engine.reloader.clone());
                Some(tokio::spawn(crate::control::server::serve(socket, control, shutdown.clone())))
            }
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        };
        let stop_delivery = CancellationToken::new();
        let mut served = Vec::new();
        let telegram = if telegram_config.token.is_some() {
            // A setting that can never work stops pincer here; an unreachable Bot API does not.
            let bot = Telegram::client(&telegram_config)?;
            engine
                .router
                .register_fetch(Platform::Telegram, Arc::new(crate::channel::telegram::Files { bot: bot.clone() }));
            let asks = askers.register(Platform::Telegram);
            served.push(Platform::Telegram);
            let (ports, assistant, shutdown, stop_delivery) =
                (engine.ports(), assistant.clone(), shutdown.clone(), stop_delivery.clone());
            Some(tokio::spawn(async move {
                let Some(channel) = Telegram::connect_until_up(bot, ports, &assistant, retry, &shutdown).await else {
                    return Ok(());
                };
                tracing::info!(bot = %channel.username(), "serving Telegram");
                channel.serve(telegram_config, asks, retry, shutdown, stop_delivery).await
            }))
        } else {
            None
        };
        let whatsapp = whatsapp.map(|source| {
            let asks = askers.register(Platform::WhatsApp);
            engine
                .router
                .register_fetch(Platform::WhatsApp, Arc::new(whatsapp::WaFiles { client: source.client.clone() }));
            let adapter = WhatsApp::new(source.client, engine.ports(), &assistant);
            let running = source.start.map(|start| start(&adapter));
            let options = ServeOptions { retry, silence_warning };
            let serving = adapter.serve(source.events, asks, options, shutdown.clone(), stop_delivery.clone());
            served.push(Platform::WhatsApp);
            tracing::info!("serving WhatsApp");
            tokio::spawn(async move {
                serving.await;
                if let Some(running) = running {
                    running.stop().await;
                }
            })
        });
        // Every adapter registered how it fetches files: what a previous
        // pincer left half prepared is prepared now.
        engine.router.prepare_waiting();
        let (store, router) = (engine.store.clone(), engine.router.clone());
        let endpoint = crate::endpoint::spawn(
            &http_config,
            &timezone,
            engine.live.clone(),
            &store,
            router,
            served.clone(),
            shutdown.clone(),
        )
        .await?;
        if served.is_empty() {
            tracing::warn!(
                "no chat channel is configured, so replies wait in the outbox (`pincer history NAME` shows them): \
                 set [telegram] token in pincer.toml (or PINCER_TELEGRAM__TOKEN), or link WhatsApp with \
                 `pincer whatsapp link`"
            );
        }
        tracing::info!(groups = groups.len(), "pincer is running; stop it with Ctrl-C or SIGTERM");
        engine.route_approvals(askers, shutdown.clone());
        let systemd = crate::service::Notifier::from_env();
        systemd.ready();
        watch_until(&systemd, &engine.store, &shutdown).await;
        systemd.stopping();
        tracing::info!("shutting down");
        engine.stop_sessions().await;
        if let Some(control) = control {
            // Attached terminals were told the daemon stops; the socket file goes with it.
            let _ = control.await;
        }
        if let Some(endpoint) = endpoint {
            let _ = endpoint.await;
        }
        // A pass stops at the next statement; the store closes after it.
        let _ = pruning.await;
        let _ = reloading.await;
        drain(&engine.outbox, &served, grace).await;
        stop_delivery.cancel();
        if let Some(whatsapp) = whatsapp {
            if let Err(e) = whatsapp.await {
                tracing::error!("the WhatsApp channel task failed: {e}");
            }
        }
        match telegram {
            Some(served) => served.await.unwrap_or_else(|e| Err(anyhow::anyhow!("the chat channel task failed: {e}"))),
            None => Ok(()),
        }
    }
    .await;
    engine.stop_sessions().await;
    engine.store.close().await;
    ended
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
    let routing = engine.route_approvals(askers, shutdown.clone());
    let end = console::chat(&engine.ports(), asks, opts, input, output, shutdown).await;
    routing.abort();
    end
}

/// Waits (up to `limit`) until nothing deliverable waits for the platforms.
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

//! The session engine: the store, the outbox, the router in front of the
//! per-group actors, and the proxies the sessions use. `pincer run` serves
//! the chats with it (`app::running`); `pincer chat` and the tests use it
//! alone.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::data::open_store;
use super::reload;
use crate::channel::approvals::{self, Askers};
use crate::channel::{Directory, Ports};
use crate::claude;
use crate::config::Config;
use crate::domain::{ApprovalRequest, GroupName};
use crate::media::outgoing::Outgoing;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::router::Router;
use crate::sandbox::egress::{EgressService, Resolve, SystemResolver};
use crate::sandbox::proxy::Proxy;
use crate::sandbox::Launcher;
use crate::scheduler::limits::Limits;
use crate::scheduler::{self, SchedulerDeps, SchedulerHandle, SchedulerInbox};
use crate::session::{SessionDeps, Slots};
use crate::store::Store;
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
    /// Cancelled when a cluster node drains: each session hands its group
    /// over at its next turn boundary (`session::drain`).
    pub drain: CancellationToken,
    /// What the scheduler needs until [`Engine::start_scheduler`] starts it.
    unstarted: Option<(SchedulerInbox, crate::config::SchedulerConfig, chrono_tz::Tz)>,
    /// `[scheduler]`'s limits and `timezone`, for the adapters' [`Ports`].
    limits: Limits,
    zone: chrono_tz::Tz,
    /// Stopped after the sessions.
    proxies: Proxies,
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
        // Its own engine would run the group beside the node that owns it.
        if config.cluster.enabled {
            anyhow::bail!(
                "this pincer is a cluster node ([cluster] enabled): a terminal chat needs its `pincer run` \
                 running on this machine to attach to; start it (or chat from a node where it runs)"
            );
        }
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
        let config = Arc::new(config);
        let (proxies, launcher) = Proxies::start(&config, program, &store, resolver).await?;
        // Until the engine is built: a start that fails stops what it started.
        let proxies_started = proxies.stop.clone().drop_guard();
        let engine = Engine::assemble(config, store, outbox, proxies, launcher, shutdown).await;
        proxies_started.disarm();
        crate::metrics::hop("engine_ready");
        Ok(engine)
    }

    /// The engine around a store and proxies already started.
    async fn assemble(
        config: Arc<Config>,
        store: Store,
        outbox: Outbox,
        proxies: Proxies,
        launcher: Launcher,
        shutdown: CancellationToken,
    ) -> Engine {
        let (live_setter, live) = crate::config::live(&config);
        let (scheduler, inbox) = scheduler::channel();
        let limits = Limits::from(&config.scheduler);
        let tools = toolbox(&config, &store, &outbox, &scheduler, limits).await;
        let (approvals_tx, approvals) = async_channel::bounded(APPROVALS);
        let metrics = Arc::new(Metrics::default());
        let drain = CancellationToken::new();
        let deps = Arc::new(SessionDeps {
            queue: store.queue(),
            preparing: store.preparing(),
            journal: store.journal(),
            groups: store.groups(),
            budgets: store.budgets(),
            leases: store.leases(),
            folders: store.folders(),
            activities: store.activities(),
            slots: Slots::new(config.claude.max_live_sessions),
            cli: Arc::new(crate::session::RealCli::new(config.clone(), launcher)),
            config: config.clone(),
            live: live.clone(),
            outbox: outbox.clone(),
            transcripts: store.transcripts(),
            approvals: approvals_tx,
            approval_ids: Default::default(),
            metrics: metrics.clone(),
            tools,
            shutdown: shutdown.clone(),
            drain: drain.clone(),
        });
        let tracker = TaskTracker::new();
        let router = Router::new(deps, tracker.clone());
        let reloader =
            reload::Reloader::new(Config::clone(&config), live_setter, proxies.egress.clone(), router.clone());
        let zone = config.timezone.parse().unwrap_or(chrono_tz::UTC);
        Engine {
            router,
            directory: Directory::new(&store, outbox.clone()),
            outbox,
            approvals,
            store,
            metrics,
            scheduler,
            live,
            reloader: Arc::new(reloader),
            drain,
            unstarted: Some((inbox, config.scheduler.clone(), zone)),
            limits,
            zone,
            proxies,
            tracker,
            shutdown,
        }
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
            remote: crate::channel::follow::Remote::new(self.store.activities()),
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
            leases: self.store.leases(),
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
        self.proxies.stop().await;
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

/// The proxies the sessions' CLIs reach the API and the web through.
struct Proxies {
    /// The sandboxes' egress proxy.
    egress: EgressService,
    /// Stops the credential and egress proxies. Not `shutdown`: a turn that
    /// ends during the sessions' grace may still call the API or the web.
    stop: CancellationToken,
    /// The credential proxy, waited for once stopped.
    credential: Option<Proxy>,
    /// Ends the spend writer: cancelled once the credential proxy has ended,
    /// so the spend of the last requests it served is written too.
    spend_stop: CancellationToken,
    /// Stores what passed the credential proxy; ends after `spend_stop`.
    spend_writer: std::sync::Mutex<Option<JoinHandle<()>>>,
}

/// How long a stopping pincer waits for the credential proxy's last requests.
/// Every CLI has ended by then, so only a process that outlived its sandbox
/// could still hold one.
const PROXY_DRAIN: Duration = Duration::from_secs(5);

impl Proxies {
    /// Starts them, and the launcher of the CLIs that use them.
    async fn start(
        config: &Arc<Config>,
        program: std::path::PathBuf,
        store: &Store,
        resolver: Arc<dyn Resolve>,
    ) -> anyhow::Result<(Proxies, Launcher)> {
        let stop = CancellationToken::new();
        let data_dir = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
        let run_dir = data_dir.join("run");
        let egress = EgressService::new(store.egress(), resolver, config.sandbox.clone(), run_dir, stop.clone());
        // A launcher that fails to start stops the egress proxy started for it.
        let started = stop.clone().drop_guard();
        let launcher = Launcher::start(config.clone(), program, egress.clone(), stop.clone()).await?;
        started.disarm();
        let credential = launcher.proxy().cloned();
        let spend_stop = CancellationToken::new();
        let spend_writer = credential.as_ref().map(|proxy| {
            tokio::spawn(crate::sandbox::proxy::spend::keep(proxy.spend(), store.budgets(), spend_stop.clone()))
        });
        let spend_writer = std::sync::Mutex::new(spend_writer);
        Ok((Proxies { egress, stop, credential, spend_stop, spend_writer }, launcher))
    }

    /// Stops them: returns once the credential proxy's socket is closed and
    /// the spend ledger's last write is done.
    async fn stop(&self) {
        self.stop.cancel();
        if let Some(proxy) = &self.credential {
            if tokio::time::timeout(PROXY_DRAIN, proxy.stopped()).await.is_err() {
                tracing::warn!(
                    "the credential proxy still served a request {} after the sessions ended; \
                     what that request uses is not counted",
                    humantime::format_duration(PROXY_DRAIN)
                );
            }
        }
        self.spend_stop.cancel();
        self.egress.stop().await;
        let writer = self.spend_writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            // Its last write, before the store closes.
            let _ = writer.await;
        }
    }
}

/// The sessions' own tools, once the copies of sent files no queued message
/// holds are swept.
async fn toolbox(
    config: &Config,
    store: &Store,
    outbox: &Outbox,
    scheduler: &SchedulerHandle,
    limits: Limits,
) -> Arc<Toolbox> {
    let data_dir = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
    let outgoing = Outgoing::new(&config.groups_dir, &data_dir);
    sweep_outgoing(store, &outgoing).await;
    Arc::new(Toolbox::new(store, outbox.clone(), scheduler.clone(), config.timezone.clone(), limits, outgoing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_terminal_chat_of_its_own_is_refused_on_a_cluster_node() {
        let mut config = Config::default();
        config.cluster.enabled = true;
        let refused = Engine::start_console(config, "team".parse().unwrap(), CancellationToken::new()).await;
        let said = refused.err().expect("refused").to_string();
        assert!(said.contains("cluster node") && said.contains("pincer run"), "{said}");
    }
}

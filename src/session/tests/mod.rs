//! A real session actor (supervised, as pincer runs it) driven with the fake
//! CLI, a real SQLite store in a temp dir and a real outbox, under paused
//! tokio time. Assertions read what the store holds.
//!
//! Time moves only when a test says so: a task that keeps yielding stops the
//! runtime from auto-advancing while SQLite works on its own thread (a paused
//! clock would jump to the next timer then, and fail the pool's acquire), and
//! [`Rig::until`] advances the clock one millisecond per look. The clock also
//! moves while the actor waits for SQLite, so tests assert lower bounds ("not
//! before the backoff"), never upper ones.

mod activity;
mod budget;
mod cluster;
mod held;
mod recovery;
mod transcripts;
mod trust;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::fake_cli::FakeCli;
use super::{SessionDeps, SessionHandle, Slots};
use crate::config::Config;
use crate::domain::{ApprovalRequest, GroupName, Inbound, InboundId, OutboundKind, Source};
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::scheduler::limits::Limits;
use crate::store::{GroupSettings, HistoryEntry, OutboxId, Store};
use crate::tools::Toolbox;

/// How long a test may take in real time before it counts as stuck.
const STUCK: std::time::Duration = std::time::Duration::from_secs(20);

pub(super) struct Rig {
    _dir: tempfile::TempDir,
    pub(super) store: Store,
    pub(super) cli: FakeCli,
    pub(super) handle: SessionHandle,
    pub(super) group: GroupName,
    pub(super) approvals: async_channel::Receiver<ApprovalRequest>,
    pub(super) config: Arc<Config>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    spinner: JoinHandle<()>,
}

/// The settings of the tests' config: short timeouts, so stepping through them is quick.
pub(crate) fn test_config() -> Config {
    let mut config = Config::default();
    config.claude.turn_timeout = Duration::from_secs(5);
    config.claude.idle_timeout = Duration::from_secs(10);
    config.claude.shutdown_grace = Duration::from_secs(1);
    config.claude.approval_timeout = Duration::from_secs(600);
    config
}

impl Rig {
    pub(super) async fn new() -> Rig {
        Rig::with(test_config(), GroupSettings::default(), None, FakeCli::default()).await
    }

    pub(super) async fn with(config: Config, settings: GroupSettings, session: Option<&str>, cli: FakeCli) -> Rig {
        // First: SQLite works on threads of its own, and while it does, a
        // paused clock with nothing else to run would jump to the next timer.
        let spinner = tokio::spawn(async {
            loop {
                tokio::task::yield_now().await;
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("pincer.db")).await.unwrap();
        Rig::on(store, dir, spinner, config, settings, session, cli).await
    }

    /// [`Rig::with`] on `store` (opened by the caller, after `spinner` started).
    pub(super) async fn on(
        store: Store,
        dir: tempfile::TempDir,
        spinner: JoinHandle<()>,
        config: Config,
        settings: GroupSettings,
        session: Option<&str>,
        cli: FakeCli,
    ) -> Rig {
        let group: GroupName = "team".parse().unwrap();
        store.groups().add_group(&group, &settings).await.unwrap();
        store.groups().set_session_id(&group, session).await.unwrap();
        let record = store.groups().group(group.as_str()).await.unwrap();
        let config = Arc::new(config);
        let (deps, approvals, shutdown) = deps(&store, config.clone(), &cli);
        let tracker = TaskTracker::new();
        let handle = SessionHandle::spawn(&record, deps, &tracker);
        Rig { _dir: dir, store, cli, handle, group, approvals, config, shutdown, tracker, spinner }
    }

    /// Submits a message as the router does. The one way tests send messages.
    pub(super) async fn say(&self, text: &str) -> InboundId {
        let msg = Inbound::new(self.group.clone(), Source::Console, "ann", text);
        let id = self.store.queue().insert_inbound(&msg, crate::store::InboundState::Queued).await.unwrap();
        assert!(self.handle.wake(), "the session retired");
        id
    }

    /// Advances the clock a millisecond at a time until `done()` holds.
    pub(super) async fn until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let stuck = std::time::Instant::now() + STUCK;
        while !done() {
            assert!(std::time::Instant::now() < stuck, "never happened: {what}");
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }

    /// [`Rig::until`] for what the store says.
    pub(super) async fn until_stored<F: std::future::Future<Output = bool>>(
        &self,
        what: &str,
        mut done: impl FnMut() -> F,
    ) {
        let stuck = std::time::Instant::now() + STUCK;
        while !done().await {
            assert!(std::time::Instant::now() < stuck, "never stored: {what}");
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }

    /// The next approval the session asks a person for.
    pub(super) async fn asked(&self) -> ApprovalRequest {
        self.until("an approval is asked", || !self.approvals.is_empty()).await;
        self.approvals.try_recv().unwrap()
    }

    /// Waits until the message is settled as `state` (`answered`, `failed`).
    pub(super) async fn until_state(&self, id: InboundId, state: &str) {
        self.until_stored(&format!("message {id:?} {state}"), || async { self.state_of(id).await == state }).await;
    }

    /// The stored state of a message, by its text's position in the history.
    pub(super) async fn state_of(&self, id: InboundId) -> String {
        let history = self.store.history().history(&self.group, 1000).await.unwrap();
        let inbound: Vec<String> = history
            .into_iter()
            .filter_map(|e| match e {
                HistoryEntry::Inbound { state, .. } => Some(state),
                _ => None,
            })
            .collect();
        // The history lists inbound rows in insertion order; ids count from 1 in a fresh store.
        inbound.get(usize::try_from(id.0 - 1).unwrap()).cloned().unwrap_or_default()
    }

    /// What the chat was sent, in order.
    pub(super) async fn outbox(&self) -> Vec<(OutboundKind, String)> {
        let rows = self.store.outbox().outbox_after(OutboxId(0), 1000).await.unwrap();
        rows.into_iter().map(|r| (r.kind, r.text)).collect()
    }

    pub(super) async fn notices(&self) -> Vec<String> {
        self.outbox().await.into_iter().filter(|(k, _)| *k == OutboundKind::Notice).map(|(_, t)| t).collect()
    }

    pub(super) async fn replies(&self) -> Vec<String> {
        self.outbox().await.into_iter().filter(|(k, _)| *k != OutboundKind::Notice).map(|(_, t)| t).collect()
    }

    /// The session events recorded, as (kind, detail).
    pub(super) async fn events(&self) -> Vec<(String, Option<String>)> {
        self.store.journal().session_event_details(&self.group).await.unwrap()
    }

    pub(super) async fn until_event(&self, kind: &str) {
        let what = format!("a `{kind}` event");
        self.until_stored(&what, || async { self.events().await.iter().any(|(k, _)| k == kind) }).await;
    }

    /// Stops the session as pincer does at shutdown.
    pub(super) async fn stop(self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        self.spinner.abort();
    }
}

/// What every session needs, with the fake CLI behind the port: for these
/// tests and the router's.
pub(crate) fn deps(
    store: &Store,
    config: Arc<Config>,
    cli: &FakeCli,
) -> (Arc<SessionDeps>, async_channel::Receiver<ApprovalRequest>, CancellationToken) {
    let outbox = Outbox::new(store.outbox(), None);
    let (scheduler, _inbox) = crate::scheduler::channel();
    let limits = Limits::from(&config.scheduler);
    let outgoing = crate::media::outgoing::Outgoing::new(&config.groups_dir, &config.data_dir);
    let tools = Toolbox::new(store, outbox.clone(), scheduler, config.timezone.clone(), limits, outgoing);
    let (approvals_tx, approvals) = async_channel::bounded(16);
    let shutdown = CancellationToken::new();
    let deps = Arc::new(SessionDeps {
        queue: store.queue(),
        preparing: store.preparing(),
        journal: store.journal(),
        groups: store.groups(),
        budgets: store.budgets(),
        leases: store.leases(),
        folders: store.folders(),
        activities: store.activities(),
        config: config.clone(),
        live: crate::config::Live::fixed(&config),
        cli: Arc::new(cli.clone()),
        outbox,
        transcripts: store.transcripts(),
        approvals: approvals_tx,
        approval_ids: Default::default(),
        slots: Slots::new(config.claude.max_live_sessions),
        metrics: Arc::new(Metrics::default()),
        tools: Arc::new(tools),
        shutdown: shutdown.clone(),
        drain: CancellationToken::new(),
    });
    (deps, approvals, shutdown)
}

/// Virtual time between two instants, for "after the backoff, not before".
pub(super) fn between(from: Instant, to: Instant) -> Duration {
    to.saturating_duration_since(from)
}

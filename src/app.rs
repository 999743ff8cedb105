//! Wiring: starts the session engine and, for `pincer run`, the services
//! around it, each with its own section of the config; [`Running::stop`]
//! stops them in order. `main` and the tests start pincer through the same
//! functions here, with shutdown passed in as a value.

mod console;
mod data;
mod engine;
mod node;
pub mod reload;
mod retention;
mod running;
mod sections;
mod services;
mod start;
mod stop;
mod submit;
mod whatsapp;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::channel::approvals::Askers;
use crate::channel::whatsapp::WaClient;
use crate::config::Config;
use crate::domain::Platform;
use crate::lock::DataLock;

pub use crate::node::{Membership, MembershipConfig, NodeState};
pub use console::console_chat;
pub use data::{open_store, register_group, store_location};
pub use engine::Engine;
pub use running::Running;
pub use whatsapp::{StartWhatsApp, WhatsAppSource};

use sections::Sections;

/// The daemon: serves Telegram (when `[telegram] token` is set) and WhatsApp
/// (when a device is linked) until `shutdown` is cancelled, then stops
/// cleanly: sessions first, then what they said is delivered for up to
/// `claude.shutdown_grace`; whatever is still waiting then goes out at the
/// next start.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    // Before anything is opened: the device store and the chats are this process's alone.
    let lock = DataLock::acquire(&config.data_dir).await?;
    let whatsapp = whatsapp::open_or_say(&config).await;
    serve(config, whatsapp, lock, shutdown).await
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

async fn serve<C: WaClient>(
    config: Config,
    whatsapp: Option<WhatsAppSource<C>>,
    lock: DataLock,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let running = start(config, whatsapp, lock, shutdown).await?;
    running.until_shutdown().await;
    running.stop().await
}

/// Starts the engine, then the services around it. A start that fails
/// stops what it started, the normal way, before it returns.
pub async fn start<C: WaClient>(
    config: Config,
    whatsapp: Option<WhatsAppSource<C>>,
    lock: DataLock,
    shutdown: CancellationToken,
) -> anyhow::Result<Running> {
    start::warn_if_untested(&config);
    let sections = Sections::of(&config)?;
    // The turn, the tasks after it, the CLI's close, and a margin.
    let (cluster, grace) = (&config.cluster, sections.grace);
    let drain_limit = cluster.drain_turn_timeout + cluster.drain_tasks_wait + grace * 2 + Duration::from_secs(10);
    // `shutdown` asks for the stop; the services stop at their own token,
    // cancelled by `Running::stop` once a cluster node has drained.
    let services_stop = CancellationToken::new();
    let engine = Engine::start(config, services_stop.clone()).await?;
    let mut running = Running::new(engine, lock, grace, services_stop, shutdown, drain_limit);
    match start_services(&mut running, sections, whatsapp).await {
        Ok(()) => Ok(running),
        Err(e) => {
            let _ = running.stop().await;
            Err(e)
        }
    }
}

/// The daemon's services, in the order they start.
async fn start_services<C: WaClient>(
    running: &mut Running,
    s: Sections,
    whatsapp: Option<WhatsAppSource<C>>,
) -> anyhow::Result<()> {
    let Running { engine, services, node, drain_asked, .. } = running;
    match s.node.clone() {
        // A cluster node takes over what was left in flight group by group, as it claims them.
        Some(section) => *node = Some(node::ClusterNode::start(engine, services, section)?),
        // Before any channel or schedule is served: a new message must not
        // overtake an older unanswered one, and the scheduler's own reruns must
        // not be failed as leftovers. The notices wait in the outbox until
        // delivery starts.
        None => {
            if let Err(e) = engine.router.recover().await {
                tracing::error!(%e, "cannot queue again the messages left unanswered before the restart");
            }
        }
    }
    engine.start_scheduler();
    let (reloader, retention) = (engine.reloader.clone(), engine.store.retention());
    services.intake(|stop| reload::on_sighup(reloader, stop));
    services.intake(|stop| retention::run(retention, s.retention, stop));
    let mut askers = Askers::default();
    let drain = node.as_ref().map(|node| {
        let port = crate::node::DrainPort { asked: drain_asked.clone(), progress: node.drain_progress() };
        std::sync::Arc::new(port) as std::sync::Arc<dyn crate::control::server::Drain>
    });
    start::control(engine, services, &s.data_dir, drain, || askers.register(Platform::Console));
    if let Some(config) = s.telegram {
        let asks = || askers.register(Platform::Telegram);
        let token = config.token.as_ref().map(|t| t.expose().to_owned()).unwrap_or_default();
        match node.as_ref().zip(crate::node::Gateway::telegram_lease(&token)) {
            Some((node, lease)) => {
                let gateway = node.gateway(lease);
                start::telegram_gateway(engine, services, config, s.adapters.clone(), gateway, asks)?;
            }
            None => start::telegram(engine, services, config, s.adapters.clone(), asks)?,
        }
    }
    if let Some(source) = whatsapp {
        let asks = askers.register(Platform::WhatsApp);
        start::whatsapp(engine, services, node.as_ref(), source, s.adapters, s.whatsapp_silence, asks);
    }
    // Every adapter registered how it fetches files: what a previous
    // pincer left half prepared is prepared now.
    engine.router.prepare_waiting();
    // On a cluster node, /readyz follows its registration.
    let this_node = node.as_ref().zip(s.node.as_ref()).map(|(running, section)| (&section.node, running.state()));
    start::endpoint(engine, services, &s.http, &s.timezone, this_node).await?;
    start::say_what_is_served(engine, services).await?;
    engine.route_approvals(node::approvals_of(node.as_ref(), askers), services.shutdown());
    Ok(())
}

//! Starting each of the daemon's services around the engine, each with its
//! own section of the config; [`Services`] hands them the shutdown token.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};

use super::engine::Engine;
use super::node::ClusterNode;
use super::sections::AdapterSection;
use super::services::Services;
use super::whatsapp::WhatsAppSource;
use crate::channel::telegram::{self, Telegram};
use crate::channel::whatsapp::{ServeOptions, WaClient, WaFiles, WhatsApp};
use crate::channel::ApprovalAsk;
use crate::claude;
use crate::cluster::NodeId;
use crate::config::{Config, HttpConfig, TelegramConfig};
use crate::control::server::{self, Control, ControlSocket};
use crate::domain::Platform;
use crate::node::NodeState;

/// `pincer chat NAME` attaches here; other commands say what they changed.
/// Without a socket pincer still serves the chats (said in the log); the
/// console's approval queue is asked for only once the socket is bound.
pub fn control(
    engine: &Engine,
    services: &Services,
    data_dir: &std::path::Path,
    drain: Option<Arc<dyn server::Drain>>,
    console_asks: impl FnOnce() -> mpsc::Receiver<ApprovalAsk>,
) {
    let socket = match ControlSocket::bind(data_dir) {
        Ok(socket) => socket,
        Err(e) => return tracing::warn!("{e}"),
    };
    let mut control = Control::new(engine.ports(), engine.scheduler.clone(), console_asks());
    control.reloader = Some(engine.reloader.clone());
    control.drain = drain;
    services.intake(|stop| server::serve(socket, control, stop));
}

/// Serves Telegram. A setting that can never work stops pincer here; an
/// unreachable Bot API does not (the adapter keeps trying).
pub fn telegram(
    engine: &Engine,
    services: &mut Services,
    config: TelegramConfig,
    section: AdapterSection,
    asks: impl FnOnce() -> mpsc::Receiver<ApprovalAsk>,
) -> anyhow::Result<()> {
    let bot = Telegram::client(&config)?;
    engine.router.register_fetch(Platform::Telegram, Arc::new(telegram::Files { bot: bot.clone() }));
    let (asks, ports) = (asks(), engine.ports());
    let AdapterSection { assistant, retry } = section;
    services.adapter(Platform::Telegram, |shutdown, stop_delivery| async move {
        let Some(channel) = Telegram::connect_until_up(bot, ports, &assistant, false, retry, &shutdown).await else {
            return Ok(());
        };
        tracing::info!(bot = %channel.username(), "serving Telegram");
        Ok(channel.serve(config, asks, retry, shutdown, stop_delivery).await?)
    });
    Ok(())
}

/// Serves Telegram on a cluster node: only while this node holds the bot's
/// gateway lease (`node::gateway`).
pub fn telegram_gateway(
    engine: &Engine,
    services: &mut Services,
    config: TelegramConfig,
    section: AdapterSection,
    gateway: crate::node::Gateway,
    asks: impl FnOnce() -> mpsc::Receiver<ApprovalAsk>,
) -> anyhow::Result<()> {
    if let Some(url) = &config.webhook_url {
        tracing::warn!(
            %url,
            "Telegram's webhook on a cluster node: only the node holding the bot's gateway listens for it, so \
             telegram.webhook_url must reach whichever node that is now; unset it to poll, which needs nothing"
        );
    }
    let bot = Telegram::client(&config)?;
    engine.router.register_fetch(Platform::Telegram, Arc::new(telegram::Files { bot: bot.clone() }));
    let (asks, ports) = (asks(), engine.ports());
    let AdapterSection { assistant, retry } = section;
    services.adapter(Platform::Telegram, |shutdown, stop_delivery| {
        gateway.serve(asks, shutdown, stop_delivery, move |round| {
            let (bot, ports, assistant, config) = (bot.clone(), ports.clone(), assistant.clone(), config.clone());
            async move {
                let Some(channel) = Telegram::connect_until_up(bot, ports, &assistant, true, retry, &round.stop).await
                else {
                    return Ok(());
                };
                tracing::info!(bot = %channel.username(), "serving Telegram as this cluster's gateway");
                Ok(channel.serve(config, round.asks, retry, round.stop, round.stop_delivery).await?)
            }
        })
    });
    Ok(())
}

/// Serves WhatsApp through `source`: as on one machine, or on a cluster
/// `node` as the gateway of the linked number (`whatsapp_gateway`).
pub fn whatsapp<C: WaClient>(
    engine: &Engine,
    services: &mut Services,
    node: Option<&ClusterNode>,
    source: WhatsAppSource<C>,
    section: AdapterSection,
    silence_warning: std::time::Duration,
    asks: mpsc::Receiver<ApprovalAsk>,
) {
    let Some(node) = node else {
        return whatsapp_alone(engine, services, source, section, silence_warning, asks);
    };
    let number = source.client.own_ids().number.unwrap_or_default();
    match crate::cluster::LeaseName::whatsapp_number(&number) {
        Some(lease) => {
            let gateway = node.gateway(lease);
            whatsapp_gateway(engine, services, source, section, silence_warning, gateway, asks);
        }
        None => tracing::error!(
            "WhatsApp is not served: the linked device does not know its number, which names its gateway lease \
             on a cluster; link it again with `pincer whatsapp link`"
        ),
    }
}

/// One machine: the linked device's client starts once the adapter can
/// take its messages, and the adapter receives and sends.
fn whatsapp_alone<C: WaClient>(
    engine: &Engine,
    services: &mut Services,
    source: WhatsAppSource<C>,
    section: AdapterSection,
    silence_warning: std::time::Duration,
    asks: mpsc::Receiver<ApprovalAsk>,
) {
    engine.router.register_fetch(Platform::WhatsApp, Arc::new(WaFiles { client: source.client.clone() }));
    let adapter = WhatsApp::new(source.client, engine.ports(), &section.assistant);
    let running = source.start.map(|start| start(&adapter));
    let options = ServeOptions { retry: section.retry, silence_warning };
    services.adapter(Platform::WhatsApp, |shutdown, stop_delivery| {
        let serving = adapter.serve(source.events, asks, options, shutdown, stop_delivery);
        async move {
            serving.await;
            if let Some(running) = running {
                running.stop().await;
            }
            Ok(())
        }
    });
    tracing::info!("serving WhatsApp");
}

/// Serves WhatsApp on a cluster node whose device is linked to the number
/// of `gateway`'s lease: it receives (and stores) for the node's life, and
/// sends only while it holds the lease (`node::gateway`), which it claims
/// only while its device is connected.
fn whatsapp_gateway<C: WaClient>(
    engine: &Engine,
    services: &mut Services,
    source: WhatsAppSource<C>,
    section: AdapterSection,
    silence_warning: std::time::Duration,
    gateway: crate::node::Gateway,
    asks: mpsc::Receiver<ApprovalAsk>,
) {
    engine.router.register_fetch(Platform::WhatsApp, Arc::new(WaFiles { client: source.client.clone() }));
    let adapter = WhatsApp::new(source.client, engine.ports(), &section.assistant).on_cluster();
    let running = source.start.map(|start| start(&adapter));
    let retry = section.retry;
    tracing::info!(lease = %gateway.lease.as_str(), "serving WhatsApp; sending while this node holds the number's gateway");
    services.adapter(Platform::WhatsApp, |shutdown, stop_delivery| {
        let receiving = {
            let adapter = adapter.clone();
            let shutdown = shutdown.clone();
            async move { adapter.receive(source.events, silence_warning, shutdown).await }
        };
        let sending = gateway.serve_while_fit(adapter.fit(), asks, shutdown, stop_delivery, move |round| {
            let adapter = adapter.clone();
            async move {
                tracing::info!("sending to WhatsApp as this cluster's gateway");
                adapter.gateway_round(round.asks, retry, round.stop, round.stop_delivery).await;
                Ok(())
            }
        });
        async move {
            let (_, sent) = tokio::join!(receiving, sending);
            if let Some(running) = running {
                running.stop().await;
            }
            sent
        }
    });
}

/// `[http] listen`: binds now (a taken port stops pincer at start) and
/// serves the platforms served so far; `node`: a cluster node's id and
/// state, which `/readyz` follows (`None` on one machine).
pub async fn endpoint(
    engine: &Engine,
    services: &Services,
    config: &HttpConfig,
    zone: &str,
    node: Option<(&NodeId, watch::Receiver<NodeState>)>,
) -> anyhow::Result<()> {
    let (router, started) = (engine.router.clone(), SystemTime::now());
    let live_view = Arc::new(move || server::live_view(&router, started));
    let live = engine.live.clone();
    let node =
        node.map(|(id, state)| crate::endpoint::ThisNode { id: id.to_string(), readiness: node_readiness(state) });
    if let Some(endpoint) =
        crate::endpoint::bind(config, zone, live, &engine.store, live_view, services.served(), node).await?
    {
        services.intake(|stop| endpoint.serve(stop));
    }
    Ok(())
}

/// `/readyz`'s view of the node: ready only while registered.
fn node_readiness(state: watch::Receiver<NodeState>) -> crate::endpoint::NodeReadiness {
    Arc::new(move || match *state.borrow() {
        NodeState::Registered { .. } => None,
        NodeState::Joining => Some("not registered in the cluster yet"),
        NodeState::Lapsed => Some("this node's cluster lease lapsed; registering again"),
        NodeState::Stopped => Some("this node left the cluster"),
    })
}

/// Says which chats are served, and how many groups.
pub async fn say_what_is_served(engine: &Engine, services: &Services) -> anyhow::Result<()> {
    let groups = engine.store.groups().groups().await?;
    if services.served().is_empty() {
        tracing::warn!(
            "no chat channel is configured, so replies wait in the outbox (`pincer history NAME` shows them): \
             set [telegram] token in pincer.toml (or PINCER_TELEGRAM__TOKEN), or link WhatsApp with \
             `pincer whatsapp link`"
        );
    }
    tracing::info!(groups = groups.len(), "pincer is running; stop it with Ctrl-C or SIGTERM");
    Ok(())
}

/// Warns (from the background: the answer takes the CLI's startup) when the
/// CLI is not a version pincer is tested with.
pub fn warn_if_untested(config: &Config) {
    let Ok(program) = claude::resolve_program(config) else {
        return;
    };
    tokio::spawn(async move {
        if let Ok(version) = claude::install::version_of(&program).await {
            if claude::install::in_tested_range(&version) != Some(true) {
                let note = claude::install::range_note(&version);
                tracing::warn!(cli = %program.display(), %version, "the Claude Code CLI is {note}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_follows_the_nodes_state() {
        let (tx, rx) = watch::channel(NodeState::Joining);
        let ready = node_readiness(rx);
        assert_eq!(ready(), Some("not registered in the cluster yet"));
        let deadline = tokio::time::Instant::now();
        tx.send_replace(NodeState::Registered { incarnation: 1, deadline });
        assert_eq!(ready(), None);
        tx.send_replace(NodeState::Lapsed);
        assert!(ready().is_some_and(|why| why.contains("lapsed")));
    }
}

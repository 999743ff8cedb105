//! The WhatsApp adapter: takes the crate's inbound batches (in its
//! durability hook, or from its events), follows the connection, and runs
//! delivery and approvals while it serves. On a cluster node receiving runs
//! for the node's life and sending only in the rounds the node holds the
//! number's gateway lease (`node::gateway`). May touch the Directory (through
//! its parts) and the outbox.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use whatsapp_rust::types::events::{Event, InboundMessage};
use whatsapp_rust::{Client, InboundDurabilityHook};

use super::client::{Real, WaClient};
use super::health::{self, Health};
use super::role::{Role, Roles};
use super::shared::Shared;
use super::status::WhatsAppStatus;
use super::{approvals, event, inbound, outbound, TakeError};
use crate::channel::delivery::{self, OutboxLedger};
use crate::channel::intake::{Intake, Redelivery};
use crate::channel::{ApprovalAsk, Ports};
use crate::retry::RetryPolicy;

/// The WhatsApp adapter over a client.
pub struct WhatsApp<C> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for WhatsApp<C> {
    fn clone(&self) -> Self {
        WhatsApp { shared: self.shared.clone() }
    }
}

/// How the adapter runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub retry: RetryPolicy,
    /// Warn when a connected session has received nothing for this long.
    pub silence_warning: Duration,
}

impl<C: WaClient> WhatsApp<C> {
    pub fn new(client: Arc<C>, ports: Ports, assistant: &str) -> WhatsApp<C> {
        let health = Health::new(ports.directory.clone());
        let status = Arc::new(WhatsAppStatus::new(client.clone()));
        let shared = Shared {
            client,
            ports,
            intake: Intake::new(assistant, Redelivery::UntilAcknowledged),
            approvals: Arc::default(),
            typing: crate::channel::typing::Typing::default(),
            status,
            progress: crate::channel::progress::Progress::default(),
            cleaned: std::sync::atomic::AtomicBool::new(false),
            health,
            roles: Roles::default(),
            fit: Default::default(),
        };
        WhatsApp { shared: Arc::new(shared) }
    }

    /// The status port for the presenter (one per adapter: it keeps which
    /// status message is alive in each chat).
    pub fn status(&self) -> Arc<WhatsAppStatus<C>> {
        self.shared.status.clone()
    }

    /// Takes a batch of inbound messages: each is stored (or refused as a
    /// second copy) before this returns. An error means some message is not
    /// stored: WhatsApp must not be told it was received.
    pub async fn take(&self, batch: &[InboundMessage]) -> Result<(), TakeError> {
        for m in batch {
            let Some(msg) = event::message(m) else { continue };
            let (chat, sender, id) = (msg.chat.clone(), msg.sender.clone(), msg.message_id.clone());
            inbound::on_message(&self.shared, msg).await?;
            // Read receipts keep WhatsApp delivering group messages to this device.
            if !self.shared.roles.now().marks_read() {
                continue;
            }
            let client = self.shared.client.clone();
            tokio::spawn(async move {
                if let Err(e) = client.mark_read(&chat, &sender, &id).await {
                    tracing::debug!(%chat, %e, "cannot mark a WhatsApp message read");
                }
            });
        }
        Ok(())
    }

    /// Serves until `shutdown` (or the events end): the crate's `events` in (in order), the
    /// WhatsApp outbox and approvals out. Delivery goes on until
    /// `stop_delivery`, so what the sessions say while they close still goes out.
    pub async fn serve(
        self,
        events: async_channel::Receiver<Arc<Event>>,
        asks: mpsc::Receiver<ApprovalAsk>,
        options: ServeOptions,
        shutdown: CancellationToken,
        stop_delivery: CancellationToken,
    ) {
        let receiving = self.receive(events, options.silence_warning, shutdown.clone());
        let sending = self.send_out(asks, options.retry, shutdown, stop_delivery);
        tokio::join!(receiving, sending);
    }

    /// The adapter of a cluster node: it stores what arrives and acts on
    /// nothing until a [`WhatsApp::gateway_round`] runs. Called before the
    /// client starts, so no message finds it acting.
    pub fn on_cluster(self) -> WhatsApp<C> {
        self.shared.roles.set(Role::Standby);
        self
    }

    /// One round of a cluster node holding the number's gateway lease: it
    /// acts on what arrives and sends (the outbox, approvals, typing, status
    /// messages) until `stop_delivery` (the lease lost, or the flush at
    /// shutdown done); approvals are asked until `stop`. Then it is a standby
    /// again, and everything it was showing stops at once.
    pub async fn gateway_round(
        &self,
        asks: mpsc::Receiver<ApprovalAsk>,
        retry: RetryPolicy,
        stop: CancellationToken,
        stop_delivery: CancellationToken,
    ) {
        self.shared.roles.set(Role::Holder);
        // What the last holder showed (and left) is this one's to clean up.
        self.shared.cleaned.store(false, Ordering::SeqCst);
        if self.shared.health.is_connected() {
            self.clean_up_once();
        }
        self.send_out(asks, retry, stop, stop_delivery).await;
    }

    /// Whether this device is fit to be its number's gateway on a cluster:
    /// connected, or disconnected only briefly (`fitness`).
    pub fn fit(&self) -> watch::Receiver<bool> {
        self.shared.fit.watch()
    }

    /// The crate's events in, in order, until `shutdown` or their end; the
    /// connection's watchdog beside them. A cluster node runs it for its
    /// whole life, holding the number's lease or not.
    pub async fn receive(
        &self,
        events: async_channel::Receiver<Arc<Event>>,
        silence: Duration,
        shutdown: CancellationToken,
    ) {
        let watching = {
            let (shared, shutdown) = (self.shared.clone(), shutdown.clone());
            tokio::spawn(async move {
                tokio::join!(shared.health.watch(silence, shutdown.clone()), shared.fit.follow(shutdown));
            })
        };
        loop {
            let ev = tokio::select! {
                ev = events.recv() => match ev { Ok(ev) => ev, Err(_) => break },
                _ = shutdown.cancelled() => break,
            };
            self.on_event(&ev).await;
        }
        watching.abort();
    }

    /// The outbox out until `stop_delivery`, approvals asked until then
    /// (from `stop` on, no new one); then typing and status messages stop,
    /// and a cluster's device is a standby.
    async fn send_out(
        &self,
        asks: mpsc::Receiver<ApprovalAsk>,
        retry: RetryPolicy,
        stop: CancellationToken,
        stop_delivery: CancellationToken,
    ) {
        let shared = &self.shared;
        let sender =
            Arc::new(outbound::Sender { client: shared.client.clone(), directory: shared.ports.directory.clone() });
        let ledger = OutboxLedger { outbox: shared.ports.outbox.clone(), directory: shared.ports.directory.clone() };
        let asker = approvals::Asker {
            client: shared.client.clone(),
            outbox: shared.ports.outbox.clone(),
            waiting: shared.approvals.clone(),
        };
        let asking = tokio::spawn(approvals::run(Arc::new(asker), asks, stop));
        delivery::run(sender, ledger, retry, stop_delivery).await;
        asking.abort();
        if shared.roles.now() == Role::Holder {
            shared.roles.set(Role::Standby);
        }
        shared.typing.stop_all();
        shared.progress.stop_all();
    }

    /// Status messages can be changed only once connected: the first time
    /// this device may, it cleans up what a stopped pincer (or the last
    /// gateway holder) left.
    fn clean_up_once(&self) {
        if !self.shared.cleaned.swap(true, Ordering::SeqCst) {
            let (status, directory) = (self.shared.status.clone(), self.shared.ports.directory.clone());
            crate::channel::progress::spawn_clean_up(status, directory, crate::domain::Platform::WhatsApp);
        }
    }

    async fn on_event(&self, ev: &Event) {
        match event::read(ev) {
            event::Happened::Messages(messages) => {
                for m in messages {
                    if let Err(e) = self.take(std::slice::from_ref(m)).await {
                        tracing::error!("cannot take a WhatsApp message: {e:#}");
                    }
                }
            }
            event::Happened::Connection(state, detail) => {
                if state == health::ConnState::Connected && self.shared.roles.now().acts() {
                    self.clean_up_once();
                }
                self.shared.fit.changed(state);
                let number = self.shared.client.own_ids().number;
                self.shared.health.changed(state, detail.as_deref(), number.as_deref()).await;
            }
            event::Happened::Other => {}
        }
    }
}

/// The crate's durability hook, handing each batch to the adapter once it is
/// set (it is set before the client starts, so a batch never finds it empty).
#[derive(Clone, Default)]
pub struct Hook(Arc<OnceLock<WhatsApp<Real>>>);

impl Hook {
    pub fn set(&self, adapter: WhatsApp<Real>) {
        let _ = self.0.set(adapter);
    }
}

#[whatsapp_rust::async_trait]
impl InboundDurabilityHook for Hook {
    // The crate's trait asks for its own (re-exported) anyhow error.
    async fn on_messages(&self, _client: Arc<Client>, batch: &[InboundMessage]) -> whatsapp_rust::anyhow::Result<()> {
        let adapter = self.0.get().ok_or(TakeError::NotReady)?;
        Ok(adapter.take(batch).await?)
    }
}

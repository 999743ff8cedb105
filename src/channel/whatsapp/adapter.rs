//! The WhatsApp adapter: takes the crate's inbound batches (in its
//! durability hook, or from its events), follows the connection, and runs
//! delivery and approvals while it serves. May touch the Directory (through
//! its parts) and the outbox.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use whatsapp_rust::types::events::{Event, InboundMessage};
use whatsapp_rust::{Client, InboundDurabilityHook};

use super::client::{Real, WaClient};
use super::health::{self, Health};
use super::shared::Shared;
use super::status::WhatsAppStatus;
use super::{approvals, event, inbound, outbound};
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
    pub async fn take(&self, batch: &[InboundMessage]) -> anyhow::Result<()> {
        for m in batch {
            let Some(msg) = event::message(m) else { continue };
            let (chat, sender, id) = (msg.chat.clone(), msg.sender.clone(), msg.message_id.clone());
            inbound::on_message(&self.shared, msg).await?;
            // Read receipts keep WhatsApp delivering group messages to this device.
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
        let shared = &self.shared;
        let sender =
            Arc::new(outbound::Sender { client: shared.client.clone(), directory: shared.ports.directory.clone() });
        let ledger = OutboxLedger { outbox: shared.ports.outbox.clone(), directory: shared.ports.directory.clone() };
        let delivery = tokio::spawn(delivery::run(sender, ledger, options.retry, stop_delivery));
        let asker = approvals::Asker {
            client: shared.client.clone(),
            outbox: shared.ports.outbox.clone(),
            waiting: shared.approvals.clone(),
        };
        let asking = tokio::spawn(approvals::run(Arc::new(asker), asks, shutdown.clone()));
        let watching = {
            let shared = shared.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { shared.health.watch(options.silence_warning, shutdown).await })
        };
        loop {
            let ev = tokio::select! {
                ev = events.recv() => match ev { Ok(ev) => ev, Err(_) => break },
                _ = shutdown.cancelled() => break,
            };
            self.on_event(&ev).await;
        }
        let _ = delivery.await;
        asking.abort();
        watching.abort();
        shared.typing.stop_all();
        shared.progress.stop_all();
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
                // Status messages can be changed only once connected: the
                // first connection cleans up what a stopped pincer left.
                if state == health::ConnState::Connected
                    && !self.shared.cleaned.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    let (status, directory) = (self.shared.status.clone(), self.shared.ports.directory.clone());
                    crate::channel::progress::spawn_clean_up(status, directory, crate::domain::Platform::WhatsApp);
                }
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
    async fn on_messages(&self, _client: Arc<Client>, batch: &[InboundMessage]) -> anyhow::Result<()> {
        let adapter = self.0.get().ok_or_else(|| anyhow::anyhow!("pincer is not ready for WhatsApp messages yet"))?;
        adapter.take(batch).await
    }
}

//! The linked WhatsApp device as the daemon serves it: the real one
//! (`pincer run`) or a test's fake (`app::run_with`).

use std::sync::Arc;

use crate::channel::whatsapp::{self, Hook, Real, WhatsApp};
use crate::config::Config;

/// A WhatsApp connection for the daemon to serve: a client, the crate's
/// events in order, and what starts the real client once the adapter can
/// take its messages (`None` for a test's connection, which needs no start).
pub struct WhatsAppSource<C> {
    pub client: Arc<C>,
    pub events: whatsapp::link::Events,
    pub start: Option<StartWhatsApp<C>>,
}

/// Starts the linked device's client, given the adapter that takes its messages.
pub type StartWhatsApp<C> = Box<dyn FnOnce(&WhatsApp<C>) -> whatsapp::link::Running + Send>;

/// The linked device, if there is one; WhatsApp's trouble is said, and
/// must not take Telegram down.
pub async fn open_or_say(config: &Config) -> Option<WhatsAppSource<Real>> {
    open(config).await.unwrap_or_else(|e| {
        tracing::error!("WhatsApp is not served: {e:#}");
        None
    })
}

/// The linked WhatsApp device, if there is one.
async fn open(config: &Config) -> anyhow::Result<Option<WhatsAppSource<Real>>> {
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

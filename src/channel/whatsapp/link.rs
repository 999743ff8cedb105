//! The linked device: pairing pincer with a WhatsApp account (`pincer
//! whatsapp link`), what `status` and `unlink` do, and opening the link for
//! `pincer run`. The device's keys live in their own SQLite file
//! (`whatsapp.device_db`), never inside a group's sandbox.
//!
//! WhatsApp's client retries a failed connection forever without a word, so
//! every wait here has its own deadline and says what went wrong.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use whatsapp_rust::bot::{Bot, BotHandle};
use whatsapp_rust::pair_code::PairCodeOptions;
use whatsapp_rust::transport::{TokioWebSocketTransportFactory, TransportFactory};
use whatsapp_rust::types::events::{ChannelEventHandler, Event, Subscription};
use whatsapp_rust::Client;
use whatsapp_rust_sqlite_storage::SqliteStore;

use super::adapter::Hook;
use crate::config::Config;
use crate::domain::Platform;
use crate::store::Store;

/// WhatsApp's own endpoint, for messages.
const WHATSAPP_URL: &str = "wss://web.whatsapp.com/ws/chat";
/// The client version announced when `whatsapp.server_url` is set, so the
/// crate does not fetch the current one from WhatsApp's web server.
const PINNED_VERSION: (u32, u32, u32) = (2, 3000, 1_026_131_876);
/// How long a graceful stop may take before the client is cut off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Whether a device store exists (a link was made, or attempted).
pub fn device_stored(config: &Config) -> bool {
    config.whatsapp_db_path().exists()
}

/// The bot over the device store; `hook` takes inbound messages before they
/// are acknowledged, `pair_phone` asks for a pairing code for that number.
async fn bot(config: &Config, hook: Option<Hook>, pair_phone: Option<String>) -> anyhow::Result<Bot> {
    let path = config.whatsapp_db_path();
    if let Some(dir) = path.parent() {
        // The store waits 30 s on a missing folder before it fails.
        crate::private::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let url = path.to_str().with_context(|| format!("{} is not a UTF-8 path", path.display()))?;
    let store = SqliteStore::new(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the WhatsApp device store {}: {e:#}", path.display()))?;
    let mut builder = Bot::builder().with_backend(store).skip_history_sync();
    if let Some(url) = &config.whatsapp.server_url {
        builder = builder
            .with_transport_factory(TokioWebSocketTransportFactory::new().with_url(url.clone()))
            .with_version(PINNED_VERSION);
    }
    if let Some(hook) = hook {
        builder = builder.with_inbound_durability_hook(hook);
    }
    if let Some(phone_number) = pair_phone {
        builder = builder.with_pair_code(PairCodeOptions { phone_number, ..Default::default() });
    }
    builder.build().await.map_err(|e| anyhow::anyhow!("cannot set up the WhatsApp client: {e:#}"))
}

/// A linked device, opened for `pincer run`.
pub struct Linked {
    bot: Bot,
    pub client: Arc<Client>,
    /// The crate's events, in order, subscribed before the client starts.
    pub events: async_channel::Receiver<Arc<Event>>,
    subscription: Subscription,
}

/// The client running in the background.
pub struct Running {
    handle: BotHandle,
    _subscription: Subscription,
}

/// Opens the device store; `None` (with a log line saying what to do) when it
/// holds no linked device.
pub async fn open(config: &Config, hook: Hook) -> anyhow::Result<Option<Linked>> {
    let bot = bot(config, Some(hook), None).await?;
    let client = bot.client();
    if client.pn().is_none() {
        tracing::warn!(
            "the WhatsApp device store holds no linked account, so WhatsApp is not served: link one with \
             `pincer whatsapp link`"
        );
        return Ok(None);
    }
    let (handler, events) = ChannelEventHandler::new();
    let subscription = client.subscribe_handler(handler);
    Ok(Some(Linked { bot, client, events, subscription }))
}

impl Linked {
    /// The linked phone number.
    pub fn number(&self) -> String {
        self.client.pn().map(|j| j.user.to_string()).unwrap_or_default()
    }

    /// Starts the client; it connects, and reconnects by itself.
    pub fn start(self) -> Running {
        Running { handle: self.bot.spawn(), _subscription: self.subscription }
    }
}

impl Running {
    /// Disconnects (flushing the device state), or cuts it off after a grace.
    pub async fn stop(self) {
        stop(self.handle).await;
    }
}

async fn stop(handle: BotHandle) {
    // A shutdown that times out is dropped with the handle, which aborts the client.
    if tokio::time::timeout(STOP_GRACE, handle.shutdown()).await.is_err() {
        tracing::warn!("the WhatsApp client did not stop in time; cut off");
    }
}

/// What ends a wait for the first sign of WhatsApp.
fn answers(ev: &Event) -> bool {
    matches!(
        ev,
        Event::PairingQrCode(_)
            | Event::PairingCode(_)
            | Event::PairingCodeError(_)
            | Event::Connected(_)
            | Event::PairSuccess(_)
            | Event::PairError(_)
            | Event::LoggedOut(_)
            | Event::ConnectFailure(_)
            | Event::ClientOutdated(_)
            | Event::TemporaryBan(_)
            | Event::PairingQrCodesExhausted(_)
    )
}

/// Why WhatsApp could not be reached, from one direct connection attempt.
async fn probe(config: &Config) -> String {
    let url = config.whatsapp.server_url.clone().unwrap_or_else(|| WHATSAPP_URL.to_owned());
    let factory = TokioWebSocketTransportFactory::new().with_url(url.clone());
    match tokio::time::timeout(Duration::from_secs(10), factory.create_transport()).await {
        Err(_) => format!("connecting to {url} timed out"),
        Ok(Err(e)) => format!("{url}: {e:#}"),
        Ok(Ok((transport, _))) => {
            transport.disconnect().await;
            format!("{url} answers, but the WhatsApp session did not start")
        }
    }
}

/// `pincer whatsapp link`: pairs pincer as a linked device of the account
/// whose phone scans the QR code (or enters the pairing code sent for
/// `phone`), says which number it is linked as, and returns it.
pub async fn link(config: &Config, phone: Option<&str>, out: &mut impl Write) -> anyhow::Result<String> {
    let phone = phone.map(digits).transpose()?;
    let bot = bot(config, None, phone.clone()).await?;
    let client = bot.client();
    if let Some(pn) = client.pn() {
        bail!("pincer is already linked to WhatsApp as +{}: run `pincer whatsapp unlink` first", pn.user);
    }
    let (handler, events) = ChannelEventHandler::new();
    let _subscription = client.subscribe_handler(handler);
    let handle = bot.spawn();
    let result = pair(config, &client, &events, phone.is_some(), out).await;
    stop(handle).await;
    let number = result?;
    let store = Store::connect(&store_location(config)).await?;
    store
        .channels()
        .set_channel_health(Platform::WhatsApp, "linked", Some("linked; `pincer run` serves it"), Some(&number))
        .await?;
    store.close().await;
    Ok(number)
}

/// Waits for WhatsApp, shows the codes, and waits for the phone.
async fn pair(
    config: &Config,
    client: &Client,
    events: &async_channel::Receiver<Arc<Event>>,
    by_code: bool,
    out: &mut impl Write,
) -> anyhow::Result<String> {
    let mut next = reached(config, events).await?;
    let deadline = tokio::time::Instant::now() + config.whatsapp.pair_timeout;
    loop {
        if let Some(number) = pairing(&next, client, by_code, out).await? {
            return Ok(number);
        }
        next = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(ev)) => ev,
            Ok(Err(_)) => bail!("the WhatsApp client stopped before the phone paired"),
            Err(_) => bail!(
                "no phone paired within {}: run `pincer whatsapp link` again when the phone is at hand",
                humantime::format_duration(config.whatsapp.pair_timeout)
            ),
        };
    }
}

/// The first event that answers the connection, within `connect_timeout`.
async fn reached(config: &Config, events: &async_channel::Receiver<Arc<Event>>) -> anyhow::Result<Arc<Event>> {
    let connect = config.whatsapp.connect_timeout;
    let first = tokio::time::timeout(connect, async {
        loop {
            match events.recv().await {
                Ok(ev) if answers(&ev) => return Some(ev),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    })
    .await;
    match first {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) => bail!("the WhatsApp client stopped before it reached WhatsApp"),
        Err(_) => bail!(
            "cannot reach WhatsApp within {} ({}): check this machine's internet access (a proxy or firewall may \
             block WebSockets), then run `pincer whatsapp link` again",
            humantime::format_duration(connect),
            probe(config).await
        ),
    }
}

/// One event while pairing: a code shown, the pairing's end (the linked
/// number), or why it failed; `None` to wait for the next.
async fn pairing(
    event: &Event,
    client: &Client,
    by_code: bool,
    out: &mut impl Write,
) -> anyhow::Result<Option<String>> {
    match event {
        Event::PairingQrCode(qr) if !by_code => {
            writeln!(out, "{}", render_qr(&qr.code)?)?;
            writeln!(
                out,
                "Scan this with the phone of the account pincer should use: WhatsApp → Settings → Linked \
                 devices → Link a device (this code is valid for {}s; a new one follows).",
                qr.timeout.as_secs()
            )?;
        }
        Event::PairingCode(code) => writeln!(
            out,
            "On the phone: WhatsApp → Settings → Linked devices → Link a device → Link with phone number \
             instead, and enter {} (valid for {}s).",
            code.code,
            code.timeout.as_secs()
        )?,
        Event::PairingCodeError(e) => bail!("WhatsApp refused to send a pairing code: {}", e.error),
        Event::PairSuccess(ok) => {
            let number = ok.id.user.to_string();
            writeln!(out, "Paired; finishing the link ...")?;
            // The client reconnects once after pairing; the link is complete when that connection is up.
            let _ = client.wait_for_connected(Duration::from_secs(20)).await;
            return Ok(Some(number));
        }
        Event::PairError(e) => bail!("the pairing failed: {}", e.error),
        Event::PairingQrCodesExhausted(_) => {
            bail!("no phone scanned the QR code in time: run `pincer whatsapp link` again when the phone is at hand")
        }
        Event::LoggedOut(_) | Event::ConnectFailure(_) => {
            bail!("WhatsApp refused the connection; wait a while, then run `pincer whatsapp link` again")
        }
        Event::ClientOutdated(_) => bail!("WhatsApp refuses this client version: upgrade pincer"),
        Event::TemporaryBan(_) => bail!("WhatsApp has temporarily banned this number"),
        _ => {}
    }
    Ok(None)
}

/// A QR code as text for a terminal (two rows of modules per line).
fn render_qr(code: &str) -> anyhow::Result<String> {
    let qr = qrcode::QrCode::new(code.as_bytes()).context("cannot draw the pairing QR code")?;
    Ok(qr.render::<qrcode::render::unicode::Dense1x2>().quiet_zone(true).build())
}

/// A phone number as WhatsApp takes it: digits with the country code.
fn digits(phone: &str) -> anyhow::Result<String> {
    match crate::domain::number_digits(phone) {
        Some(digits) if digits.len() >= 7 => Ok(digits),
        _ => bail!("--phone {phone:?}: give the number with its country code, e.g. +4915112345678"),
    }
}

/// `pincer whatsapp status`: the link and the connection as the running (or
/// last) pincer saw it.
pub async fn status(config: &Config) -> anyhow::Result<String> {
    let store = Store::connect(&store_location(config)).await?;
    let rows = store.channels().channel_healths(Platform::WhatsApp).await?;
    store.close().await;
    // On a cluster each node links a device of its own: this config's node
    // is described, the others listed after it.
    let me = if config.cluster.enabled { config.cluster.node_id().as_str().to_owned() } else { String::new() };
    let (mine, others): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(node, _)| *node == me);
    let mut text = describe(device_stored(config), mine.first().map(|(_, h)| h), &config.whatsapp_db_path());
    for (node, h) in others.iter().filter(|(node, _)| !node.is_empty()) {
        let at = crate::domain::printable_time(crate::domain::from_unix_us(h.changed_at_us));
        text.push_str(&format!("\nnode {node}'s device: {} since {at}", h.state));
    }
    Ok(text)
}

fn describe(stored: bool, health: Option<&crate::store::ChannelHealth>, path: &Path) -> String {
    let Some(h) = health.filter(|h| stored || h.state != "linked") else {
        return if stored {
            format!("device store {} exists, but no link was completed: run `pincer whatsapp link`", path.display())
        } else {
            "not linked: run `pincer whatsapp link` to link pincer to a WhatsApp account".to_owned()
        };
    };
    let at = |us: i64| crate::domain::printable_time(crate::domain::from_unix_us(us)).to_string();
    let number = h.linked_as.as_deref().map_or_else(|| "an unknown number".to_owned(), |n| format!("+{n}"));
    let mut text = format!("linked as {number}\nconnection: {} since {}", h.state, at(h.changed_at_us));
    if let Some(detail) = &h.detail {
        text.push_str(&format!(" ({detail})"));
    }
    let seen = h.last_inbound_us.map_or_else(|| "none yet".to_owned(), at);
    text.push_str(&format!("\nlast message seen: {seen}"));
    text
}

/// `pincer whatsapp unlink`: tells WhatsApp to drop this device (when it
/// can be reached) and deletes the device store, so the next link starts
/// clean. Returns what happened.
pub async fn unlink(config: &Config) -> anyhow::Result<String> {
    if !device_stored(config) {
        return Ok("not linked: nothing to do".to_owned());
    }
    let bot = bot(config, None, None).await?;
    let client = bot.client();
    let number = client.pn().map(|j| j.user.to_string());
    let mut told = false;
    if number.is_some() {
        let handle = bot.spawn();
        if client.wait_for_connected(config.whatsapp.connect_timeout).await.is_ok() {
            client.logout().await;
            told = true;
        }
        stop(handle).await;
    } else {
        drop(bot);
    }
    drop(client);
    let path = config.whatsapp_db_path();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        if let Err(e) = std::fs::remove_file(&file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e).with_context(|| format!("cannot delete {file}"));
            }
        }
    }
    let store = Store::connect(&store_location(config)).await?;
    store
        .channels()
        .set_channel_health(Platform::WhatsApp, "unlinked", Some("unlinked with `pincer whatsapp unlink`"), None)
        .await?;
    store.close().await;
    let who = number.map_or_else(String::new, |n| format!(" from +{n}"));
    Ok(if told {
        format!("unlinked{who}; WhatsApp removed the device")
    } else {
        format!(
            "unlinked{who} here, but WhatsApp could not be reached: remove the device on the phone too \
             (WhatsApp → Settings → Linked devices)"
        )
    })
}

/// Where `config` keeps its store (`[store] url`, else the SQLite file).
fn store_location(config: &Config) -> crate::store::Location {
    crate::store::Location::url_or_file(config.store.url.as_ref().map(|u| u.expose()), config.database_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phone_numbers_need_their_country_code() {
        assert_eq!(digits("+49 151 1234-5678").unwrap(), "4915112345678");
        assert!(digits("12345").is_err());
        assert!(digits("+49 151 abc").unwrap_err().to_string().contains("+4915112345678"));
    }

    #[test]
    fn a_qr_code_renders_as_terminal_text() {
        let text = render_qr("2@abc,def,ghi,jkl,1").unwrap();
        assert!(text.lines().count() > 10);
        assert!(text.contains('█') || text.contains('▀') || text.contains('▄'));
    }
}

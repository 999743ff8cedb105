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

use whatsapp_rust::bot::{Bot, BotHandle};
use whatsapp_rust::pair_code::PairCodeOptions;
use whatsapp_rust::transport::{TokioWebSocketTransportFactory, TransportFactory};
use whatsapp_rust::types::events::{ChannelEventHandler, Event, Subscription};
use whatsapp_rust::Client;
use whatsapp_rust_sqlite_storage::SqliteStore;

use super::adapter::Hook;
use crate::config::Config;
use crate::domain::Platform;
use crate::store::{Store, StoreError};

/// WhatsApp's own endpoint, for messages.
const WHATSAPP_URL: &str = "wss://web.whatsapp.com/ws/chat";
/// The client version announced when `whatsapp.server_url` is set, so the
/// crate does not fetch the current one from WhatsApp's web server.
const PINNED_VERSION: (u32, u32, u32) = (2, 3000, 1_026_131_876);
/// How long a graceful stop may take before the client is cut off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Why linking, unlinking or opening the linked device failed; each says
/// what to do next where there is something to do.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A file of pincer's own (the device store's folder or files, the terminal).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not a UTF-8 path: set whatsapp.device_db to a plain path")]
    NotUtf8(String),
    #[error("cannot open the WhatsApp device store {path}: {why}")]
    DeviceStore { path: String, why: String },
    #[error("cannot set up the WhatsApp client: {0}")]
    Client(String),
    #[error("pincer is already linked to WhatsApp as +{0}: run `pincer whatsapp unlink` first")]
    AlreadyLinked(String),
    #[error("the WhatsApp client stopped before {0}")]
    Stopped(&'static str),
    #[error("no phone paired within {0}: run `pincer whatsapp link` again when the phone is at hand")]
    NotPaired(String),
    #[error(
        "cannot reach WhatsApp within {within} ({why}): check this machine's internet access (a proxy or \
         firewall may block WebSockets), then run `pincer whatsapp link` again"
    )]
    Unreachable { within: String, why: String },
    #[error("WhatsApp refused to send a pairing code: {0}")]
    NoPairingCode(String),
    #[error("the pairing failed: {0}")]
    PairFailed(String),
    #[error("no phone scanned the QR code in time: run `pincer whatsapp link` again when the phone is at hand")]
    QrCodesExhausted,
    #[error("WhatsApp refused the connection; wait a while, then run `pincer whatsapp link` again")]
    Refused,
    #[error("WhatsApp refuses this client version: upgrade pincer")]
    Outdated,
    #[error("WhatsApp has temporarily banned this number")]
    Banned,
    #[error("cannot draw the pairing QR code: {0}")]
    Qr(String),
    #[error("--phone {0:?}: give the number with its country code, e.g. +4915112345678")]
    Phone(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An `Io` error saying `what` failed.
fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> LinkError {
    move |source| LinkError::Io { what: what.to_string(), source }
}

/// Writing to the terminal `pincer whatsapp link` runs in.
fn terminal(source: std::io::Error) -> LinkError {
    LinkError::Io { what: "cannot write to the terminal".into(), source }
}

/// Whether a device store exists (a link was made, or attempted).
pub fn device_stored(config: &Config) -> bool {
    config.whatsapp_db_path().exists()
}

/// The bot over the device store; `hook` takes inbound messages before they
/// are acknowledged, `pair_phone` asks for a pairing code for that number.
async fn bot(config: &Config, hook: Option<Hook>, pair_phone: Option<String>) -> Result<Bot, LinkError> {
    let path = config.whatsapp_db_path();
    if let Some(dir) = path.parent() {
        // The store waits 30 s on a missing folder before it fails.
        crate::private::create_dir(dir).map_err(io(format_args!("cannot create {}", dir.display())))?;
    }
    let url = path.to_str().ok_or_else(|| LinkError::NotUtf8(path.display().to_string()))?;
    let store = SqliteStore::new(url)
        .await
        .map_err(|e| LinkError::DeviceStore { path: path.display().to_string(), why: format!("{e:#}") })?;
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
    builder.build().await.map_err(|e| LinkError::Client(format!("{e:#}")))
}

/// The linked device's events in the order the crate gave them, for the adapter
/// (`app` holds them without naming the crate).
pub type Events = async_channel::Receiver<Arc<Event>>;

/// A linked device, opened for `pincer run`.
pub struct Linked {
    bot: Bot,
    pub client: Arc<Client>,
    /// The crate's events, in order, subscribed before the client starts.
    pub events: Events,
    subscription: Subscription,
}

/// The client running in the background.
pub struct Running {
    handle: BotHandle,
    _subscription: Subscription,
}

/// Opens the device store; `None` (with a log line saying what to do) when it
/// holds no linked device.
pub async fn open(config: &Config, hook: Hook) -> Result<Option<Linked>, LinkError> {
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
pub async fn link(config: &Config, phone: Option<&str>, out: &mut impl Write) -> Result<String, LinkError> {
    let phone = phone.map(digits).transpose()?;
    let bot = bot(config, None, phone.clone()).await?;
    let client = bot.client();
    if let Some(pn) = client.pn() {
        return Err(LinkError::AlreadyLinked(pn.user.to_string()));
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
) -> Result<String, LinkError> {
    let mut next = reached(config, events).await?;
    let deadline = tokio::time::Instant::now() + config.whatsapp.pair_timeout;
    loop {
        if let Some(number) = pairing(&next, client, by_code, out).await? {
            return Ok(number);
        }
        next = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(ev)) => ev,
            Ok(Err(_)) => return Err(LinkError::Stopped("the phone paired")),
            Err(_) => {
                return Err(LinkError::NotPaired(humantime::format_duration(config.whatsapp.pair_timeout).to_string()))
            }
        };
    }
}

/// The first event that answers the connection, within `connect_timeout`.
async fn reached(config: &Config, events: &async_channel::Receiver<Arc<Event>>) -> Result<Arc<Event>, LinkError> {
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
        Ok(None) => Err(LinkError::Stopped("it reached WhatsApp")),
        Err(_) => Err(LinkError::Unreachable {
            within: humantime::format_duration(connect).to_string(),
            why: probe(config).await,
        }),
    }
}

/// One event while pairing: a code shown, the pairing's end (the linked
/// number), or why it failed; `None` to wait for the next.
async fn pairing(
    event: &Event,
    client: &Client,
    by_code: bool,
    out: &mut impl Write,
) -> Result<Option<String>, LinkError> {
    match event {
        Event::PairingQrCode(qr) if !by_code => {
            writeln!(out, "{}", render_qr(&qr.code)?).map_err(terminal)?;
            writeln!(
                out,
                "Scan this with the phone of the account pincer should use: WhatsApp → Settings → Linked \
                 devices → Link a device (this code is valid for {}s; a new one follows).",
                qr.timeout.as_secs()
            )
            .map_err(terminal)?;
        }
        Event::PairingCode(code) => writeln!(
            out,
            "On the phone: WhatsApp → Settings → Linked devices → Link a device → Link with phone number \
             instead, and enter {} (valid for {}s).",
            code.code,
            code.timeout.as_secs()
        )
        .map_err(terminal)?,
        Event::PairingCodeError(e) => return Err(LinkError::NoPairingCode(e.error.to_string())),
        Event::PairSuccess(ok) => {
            let number = ok.id.user.to_string();
            writeln!(out, "Paired; finishing the link ...").map_err(terminal)?;
            // The client reconnects once after pairing; the link is complete when that connection is up.
            let _ = client.wait_for_connected(Duration::from_secs(20)).await;
            return Ok(Some(number));
        }
        Event::PairError(e) => return Err(LinkError::PairFailed(e.error.to_string())),
        Event::PairingQrCodesExhausted(_) => return Err(LinkError::QrCodesExhausted),
        Event::LoggedOut(_) | Event::ConnectFailure(_) => return Err(LinkError::Refused),
        Event::ClientOutdated(_) => return Err(LinkError::Outdated),
        Event::TemporaryBan(_) => return Err(LinkError::Banned),
        _ => {}
    }
    Ok(None)
}

/// A QR code as text for a terminal (two rows of modules per line).
fn render_qr(code: &str) -> Result<String, LinkError> {
    let qr = qrcode::QrCode::new(code.as_bytes()).map_err(|e| LinkError::Qr(e.to_string()))?;
    Ok(qr.render::<qrcode::render::unicode::Dense1x2>().quiet_zone(true).build())
}

/// A phone number as WhatsApp takes it: digits with the country code.
fn digits(phone: &str) -> Result<String, LinkError> {
    match crate::domain::number_digits(phone) {
        Some(digits) if digits.len() >= 7 => Ok(digits),
        _ => Err(LinkError::Phone(phone.to_owned())),
    }
}

/// `pincer whatsapp status`: the link and the connection as the running (or
/// last) pincer saw it.
pub async fn status(config: &Config) -> Result<String, LinkError> {
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
pub async fn unlink(config: &Config) -> Result<String, LinkError> {
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
                return Err(io(format_args!("cannot delete {file}"))(e));
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

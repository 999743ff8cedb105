//! A stand-in for WhatsApp: no WhatsApp server can be reached from here and
//! no public mock exists, so the tests put a fake behind pincer's own
//! `WaClient` trait (what pincer sends, shows and asks) and feed the adapter
//! the crate's **real** event types, built through their public builders,
//! from a channel the test controls.
//!
//! The fake records every message pincer sends (with the id it hands back,
//! as WhatsApp does), edits, deletes (revokes) and reacts with, and can be
//! "disconnected", when sends fail the way the crate's do, or made to fail
//! edits ([`FakeWa::fail_edits`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::channel::whatsapp::{MediaRef, OwnIds, WaClient, WaError};
use pincer::domain::media::OutboundFile;
use pincer::media::Capped;
use whatsapp_rust::buffa::MessageField;
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::types::events::{
    BatchOrigin, ConnectFailureReason, Connected, Disconnected, Event, InboundMessage, LoggedOut, MessageBatch,
};
use whatsapp_rust::types::message::{MessageInfo, MessageSource};
use whatsapp_rust::wacore::net::DisconnectReason;
use whatsapp_rust::waproto::whatsapp as wa;

/// The linked account's number and LID in the tests.
pub const BOT_NUMBER: &str = "4915100000009";
pub const BOT_LID: &str = "987654321098765";
/// How long [`FakeWa::wait_sent`] waits.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A message pincer sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaSent {
    pub chat: String,
    /// Its text, or a file's caption.
    pub text: String,
    pub id: String,
    /// When the fake took it.
    pub at: std::time::Instant,
    /// The file it carries (`send_file`).
    pub file: Option<WaFile>,
}

/// A file pincer uploaded and sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaFile {
    /// `photo`, `audio` or `document`: how pincer sent it.
    pub kind: &'static str,
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A reaction pincer put on a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaReaction {
    pub chat: String,
    /// The author of the message reacted to, as pincer named it.
    pub sender: String,
    pub id: String,
    pub emoji: String,
}

/// A person in the tests' groups.
#[derive(Clone, Debug)]
pub struct Person {
    pub name: &'static str,
    pub number: &'static str,
    /// Senders are often known by a LID in groups; the number then comes as `sender_alt`.
    pub lid: Option<&'static str>,
}

#[derive(Default)]
struct Recorded {
    sent: Vec<WaSent>,
    /// Failed sends while disconnected, by chat.
    refused: Vec<String>,
    composing: Vec<(String, bool)>,
    read: Vec<String>,
    /// Edits taken: chat, message id, new text.
    edits: Vec<(String, String, String)>,
    /// Edits refused while [`FakeWa::fail_edits`] was on: chat, message id.
    failed_edits: Vec<(String, String)>,
    /// Messages deleted for everyone: chat, message id.
    revoked: Vec<(String, String)>,
    reactions: Vec<WaReaction>,
    /// Files people sent, by CDN path: what downloads get.
    files: std::collections::HashMap<String, Vec<u8>>,
    /// Downloads asked for, by CDN path.
    downloads: Vec<String>,
}

/// The fake client and the event channel into pincer's adapter.
#[derive(Clone)]
pub struct FakeWa {
    recorded: Arc<Mutex<Recorded>>,
    /// Woken by every recorded call, so waiters see it at once.
    activity: Arc<tokio::sync::Notify>,
    connected: Arc<AtomicBool>,
    edits_fail: Arc<AtomicBool>,
    next_id: Arc<AtomicU64>,
    events: async_channel::Sender<Arc<Event>>,
    receiver: async_channel::Receiver<Arc<Event>>,
}

/// The `WaClient` pincer is given.
#[derive(Clone)]
pub struct FakeClient(FakeWa);

impl FakeWa {
    pub fn new() -> FakeWa {
        let (events, receiver) = async_channel::unbounded();
        FakeWa {
            recorded: Arc::default(),
            activity: Arc::default(),
            connected: Arc::new(AtomicBool::new(true)),
            edits_fail: Arc::new(AtomicBool::new(false)),
            next_id: Arc::new(AtomicU64::new(1)),
            events,
            receiver,
        }
    }

    /// The client alone, for a test that drives one of pincer's parts over it.
    pub fn client(&self) -> Arc<FakeClient> {
        Arc::new(FakeClient(self.clone()))
    }

    /// What the daemon gets: the client and the events, as `app::run` gets the linked device's.
    pub fn source(&self) -> pincer::app::WhatsAppSource<FakeClient> {
        pincer::app::WhatsAppSource {
            client: Arc::new(FakeClient(self.clone())),
            events: self.receiver.clone(),
            start: None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a call and wakes the waiters.
    fn record(&self, change: impl FnOnce(&mut Recorded)) {
        change(&mut self.lock());
        self.activity.notify_waiters();
    }

    /// Sends go through (`true`) or fail as not connected (`false`).
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::SeqCst);
    }

    /// Edits fail (`true`), as a send of the crate's does, or go through.
    pub fn fail_edits(&self, fail: bool) {
        self.edits_fail.store(fail, Ordering::SeqCst);
    }

    /// Hands the adapter one of the crate's events.
    pub fn event(&self, event: Event) {
        self.events.try_send(Arc::new(event)).expect("the adapter's event channel is open");
    }

    /// A person writes in a group; returns the message's id.
    pub fn say(&self, group: &str, from: &Person, text: &str) -> String {
        self.say_with(group, from, wa::Message::text(text))
    }

    /// A person sends any message to a group; returns the message's id.
    pub fn say_with(&self, group: &str, from: &Person, message: wa::Message) -> String {
        let id = format!("3EB0{:012X}", self.next_id.fetch_add(1, Ordering::SeqCst));
        self.deliver(inbound(group, from, &id, message, false));
        id
    }

    /// Keeps `bytes` on the "CDN"; returns the path a message names them by.
    pub fn upload(&self, bytes: Vec<u8>) -> String {
        let path = format!("/v/t62.7118-24/{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        self.lock().files.insert(path.clone(), bytes);
        path
    }

    /// The CDN paths pincer downloaded, in order.
    pub fn downloads(&self) -> Vec<String> {
        self.lock().downloads.clone()
    }

    /// WhatsApp delivers a message (again, if it was delivered before).
    pub fn deliver(&self, message: InboundMessage) {
        let batch = MessageBatch::builder().messages(vec![message].into()).origin(BatchOrigin::Live).build();
        self.event(Event::Messages(batch));
    }

    pub fn connected(&self) {
        self.event(Event::Connected(Connected::builder().build()));
    }

    pub fn disconnected(&self) {
        self.event(Event::Disconnected(Disconnected::builder().reason(DisconnectReason::StreamEnded).build()));
    }

    pub fn logged_out(&self) {
        self.event(Event::LoggedOut(
            LoggedOut::builder().on_connect(false).reason(ConnectFailureReason::LoggedOut).build(),
        ));
    }

    /// The messages pincer sent to `chat`, oldest first.
    pub fn sent(&self, chat: &str) -> Vec<WaSent> {
        self.lock().sent.iter().filter(|s| s.chat == chat).cloned().collect()
    }

    /// Sends to `chat` that failed because the fake was disconnected.
    pub fn refused(&self, chat: &str) -> usize {
        self.lock().refused.iter().filter(|c| *c == chat).count()
    }

    /// "typing…" changes pincer asked for, per chat: `true` on, `false` off.
    pub fn composing(&self, chat: &str) -> Vec<bool> {
        self.lock().composing.iter().filter(|c| c.0 == chat).map(|c| c.1).collect()
    }

    /// Edits of messages in `chat`, oldest first: (message id, new text).
    pub fn edits(&self, chat: &str) -> Vec<(String, String)> {
        self.lock().edits.iter().filter(|e| e.0 == chat).map(|e| (e.1.clone(), e.2.clone())).collect()
    }

    /// Ids of the edits refused in `chat` while edits failed.
    pub fn failed_edits(&self, chat: &str) -> Vec<String> {
        self.lock().failed_edits.iter().filter(|e| e.0 == chat).map(|e| e.1.clone()).collect()
    }

    /// Ids of the messages pincer deleted in `chat`, in order.
    pub fn revoked(&self, chat: &str) -> Vec<String> {
        self.lock().revoked.iter().filter(|r| r.0 == chat).map(|r| r.1.clone()).collect()
    }

    /// The messages pincer sent to `chat` and has not deleted.
    pub fn alive(&self, chat: &str) -> Vec<WaSent> {
        let revoked = self.revoked(chat);
        self.sent(chat).into_iter().filter(|s| !revoked.contains(&s.id)).collect()
    }

    /// The reactions pincer put on messages in `chat`.
    pub fn reactions(&self, chat: &str) -> Vec<WaReaction> {
        self.lock().reactions.iter().filter(|r| r.chat == chat).cloned().collect()
    }

    /// Message ids pincer marked read.
    pub fn read(&self) -> Vec<String> {
        self.lock().read.clone()
    }

    /// Waits until `chat` has at least `n` messages from pincer; returns them all.
    pub async fn wait_sent(&self, chat: &str, n: usize) -> Vec<WaSent> {
        self.wait_for(&format!("{n} message(s) sent to {chat}"), |wa| wa.sent(chat).len() >= n).await;
        self.sent(chat)
    }

    /// Waits until pincer sends `chat` a message holding `needle`; returns what
    /// it sent there before that one. A group's messages are taken in order,
    /// its turns run in order and its replies go out in order, so an answer
    /// to a message taken before the one `needle` answers comes first: a
    /// test needs no fixed wait to rule one out.
    pub async fn sent_before(&self, chat: &str, needle: &str) -> Vec<WaSent> {
        let holds = |s: &WaSent| s.text.contains(needle);
        self.wait_for(&format!("an answer holding {needle:?} in {chat}"), |wa| wa.sent(chat).iter().any(holds)).await;
        let mut sent = self.sent(chat);
        let at = sent.iter().position(holds).unwrap();
        sent.truncate(at);
        sent
    }

    /// Waits until `f` holds, looking again at every call pincer makes;
    /// panics after [`PATIENCE`] naming `what`.
    pub async fn wait_for(&self, what: &str, f: impl Fn(&FakeWa) -> bool) {
        let waited = tokio::time::timeout(PATIENCE, async {
            loop {
                let woken = self.activity.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if f(self) {
                    return;
                }
                // Also look now and then: `f` may depend on more than the calls.
                let _ = tokio::time::timeout(Duration::from_millis(200), woken).await;
            }
        })
        .await;
        if waited.is_err() {
            panic!("fake WhatsApp: waited {PATIENCE:?} for {what}; sent so far: {:?}", self.lock().sent);
        }
    }
}

impl WaClient for FakeClient {
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, WaError> {
        let fake = &self.0;
        if !fake.connected.load(Ordering::SeqCst) {
            fake.record(|r| r.refused.push(chat.to_owned()));
            return Err(WaError::NotConnected("client is not connected".into()));
        }
        let id = format!("3EB0B07{:09X}", fake.next_id.fetch_add(1, Ordering::SeqCst));
        let sent = WaSent {
            chat: chat.to_owned(),
            text: text.to_owned(),
            id: id.clone(),
            at: std::time::Instant::now(),
            file: None,
        };
        fake.record(|r| r.sent.push(sent));
        Ok(id)
    }

    async fn send_file(&self, chat: &str, file: &OutboundFile, caption: Option<&str>) -> Result<String, WaError> {
        let fake = &self.0;
        if !fake.connected.load(Ordering::SeqCst) {
            fake.record(|r| r.refused.push(chat.to_owned()));
            return Err(WaError::NotConnected("client is not connected".into()));
        }
        // Read as the real client does: from pincer's copy, when sending.
        let bytes = std::fs::read(&file.path).map_err(|e| WaError::Rejected(format!("no copy: {e}")))?;
        let id = format!("3EB0B07{:09X}", fake.next_id.fetch_add(1, Ordering::SeqCst));
        let sent = WaSent {
            chat: chat.to_owned(),
            text: caption.unwrap_or_default().to_owned(),
            id: id.clone(),
            at: std::time::Instant::now(),
            file: Some(WaFile { kind: file.kind.as_str(), name: file.name.clone(), bytes }),
        };
        fake.record(|r| r.sent.push(sent));
        Ok(id)
    }

    async fn download(&self, media: &MediaRef, mut into: Capped) -> Result<Capped, WaError> {
        let fake = &self.0;
        let found = fake.lock().files.get(&media.direct_path).cloned();
        fake.record(|r| r.downloads.push(media.direct_path.clone()));
        // What the crate says for media WhatsApp no longer has.
        let bytes = found.ok_or_else(|| WaError::Rejected("media download failed with status 404".into()))?;
        // As the crate writes it: as it decrypts, stopped by the sink's refusal.
        for block in bytes.chunks(8 * 1024) {
            std::io::Write::write_all(&mut into, block).map_err(|e| WaError::Other(format!("{e:#}")))?;
        }
        Ok(into)
    }

    async fn composing(&self, chat: &str, on: bool) -> Result<(), WaError> {
        self.0.record(|r| r.composing.push((chat.to_owned(), on)));
        Ok(())
    }

    async fn mark_read(&self, _chat: &str, _sender: &str, id: &str) -> Result<(), WaError> {
        self.0.record(|r| r.read.push(id.to_owned()));
        Ok(())
    }

    async fn edit_text(&self, chat: &str, id: &str, text: &str) -> Result<(), WaError> {
        let fake = &self.0;
        if !fake.connected.load(Ordering::SeqCst) {
            return Err(WaError::NotConnected("client is not connected".into()));
        }
        if fake.edits_fail.load(Ordering::SeqCst) {
            fake.record(|r| r.failed_edits.push((chat.to_owned(), id.to_owned())));
            return Err(WaError::Other("failed to send the edit".into()));
        }
        fake.record(|r| r.edits.push((chat.to_owned(), id.to_owned(), text.to_owned())));
        Ok(())
    }

    async fn revoke(&self, chat: &str, id: &str) -> Result<(), WaError> {
        if !self.0.connected.load(Ordering::SeqCst) {
            return Err(WaError::NotConnected("client is not connected".into()));
        }
        self.0.record(|r| r.revoked.push((chat.to_owned(), id.to_owned())));
        Ok(())
    }

    async fn react(&self, chat: &str, sender: &str, id: &str, emoji: &str) -> Result<(), WaError> {
        if !self.0.connected.load(Ordering::SeqCst) {
            return Err(WaError::NotConnected("client is not connected".into()));
        }
        let reaction =
            WaReaction { chat: chat.to_owned(), sender: sender.to_owned(), id: id.to_owned(), emoji: emoji.to_owned() };
        self.0.record(|r| r.reactions.push(reaction));
        Ok(())
    }

    async fn group_subject(&self, _chat: &str) -> Result<String, WaError> {
        Ok("Strangers".to_owned())
    }

    fn own_ids(&self) -> OwnIds {
        OwnIds { number: Some(BOT_NUMBER.into()), lid: Some(BOT_LID.into()) }
    }
}

/// One inbound group message, as the crate hands it over.
pub fn inbound(group: &str, from: &Person, id: &str, message: wa::Message, from_me: bool) -> InboundMessage {
    let number_jid = format!("{}@s.whatsapp.net", from.number);
    let (sender, sender_alt) = match from.lid {
        Some(lid) => (format!("{lid}@lid"), Some(number_jid.parse().unwrap())),
        None => (number_jid, None),
    };
    let info = MessageInfo {
        id: id.to_owned(),
        push_name: from.name.to_owned(),
        timestamp: whatsapp_rust::chrono::Utc::now(),
        source: MessageSource {
            chat: group.parse().expect("a group JID"),
            sender: sender.parse().expect("a sender JID"),
            sender_alt,
            is_group: true,
            is_from_me: from_me,
            ..Default::default()
        },
        ..Default::default()
    };
    InboundMessage::builder().message(Arc::new(message)).info(Arc::new(info)).build()
}

/// A text that @-mentions these JIDs.
pub fn mentioning(text: &str, jids: &[String]) -> wa::Message {
    wa::Message::text_with_context(text, wa::ContextInfo { mentioned_jid: jids.to_vec(), ..Default::default() })
}

/// A text that replies to (quotes) message `id` by `author` (a JID).
pub fn replying(text: &str, id: &str, author: &str, quoted: &str) -> wa::Message {
    let context = wa::ContextInfo {
        stanza_id: Some(id.to_owned()),
        participant: Some(author.to_owned()),
        quoted_message: MessageField::some(wa::Message::text(quoted)),
        ..Default::default()
    };
    wa::Message::text_with_context(text, context)
}

/// What the media messages below carry to be fetched (a real message has
/// its own key and hashes; the fake checks none of them).
struct Cdn {
    direct_path: Option<String>,
    media_key: Option<Vec<u8>>,
    file_enc_sha256: Option<Vec<u8>>,
    file_length: Option<u64>,
}

fn cdn(path: &str, length: usize) -> Cdn {
    Cdn {
        direct_path: Some(path.to_owned()),
        media_key: Some(vec![9; 32]),
        file_enc_sha256: Some(vec![8; 32]),
        file_length: Some(length as u64),
    }
}

/// A photo with a caption, its bytes at `path` (from [`FakeWa::upload`]).
pub fn image(path: &str, length: usize, caption: &str) -> wa::Message {
    let Cdn { direct_path, media_key, file_enc_sha256, file_length } = cdn(path, length);
    let image = wa::message::ImageMessage {
        direct_path,
        media_key,
        file_enc_sha256,
        file_length,
        mimetype: Some("image/jpeg".into()),
        caption: (!caption.is_empty()).then(|| caption.to_owned()),
        ..Default::default()
    };
    wa::Message { image_message: MessageField::some(image), ..Default::default() }
}

/// A voice note of `seconds`.
pub fn voice(path: &str, length: usize, seconds: u32) -> wa::Message {
    let Cdn { direct_path, media_key, file_enc_sha256, file_length } = cdn(path, length);
    let audio = wa::message::AudioMessage {
        direct_path,
        media_key,
        file_enc_sha256,
        file_length,
        mimetype: Some("audio/ogg; codecs=opus".into()),
        seconds: Some(seconds),
        ptt: Some(true),
        ..Default::default()
    };
    wa::Message { audio_message: MessageField::some(audio), ..Default::default() }
}

/// A file sent as a document, with a caption.
pub fn document(path: &str, length: usize, name: &str, mime: &str, caption: &str) -> wa::Message {
    let Cdn { direct_path, media_key, file_enc_sha256, file_length } = cdn(path, length);
    let doc = wa::message::DocumentMessage {
        direct_path,
        media_key,
        file_enc_sha256,
        file_length,
        mimetype: Some(mime.into()),
        file_name: Some(name.into()),
        caption: (!caption.is_empty()).then(|| caption.to_owned()),
        ..Default::default()
    };
    wa::Message { document_message: MessageField::some(doc), ..Default::default() }
}

//! pincer's narrow view of a WhatsApp client: what the adapter asks of it,
//! behind a trait so the tests can stand a fake in for the crate's `Client`
//! (which needs WhatsApp's servers). JIDs cross this trait as strings; the
//! crate's types stay in [`Real`].

use std::future::Future;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use whatsapp_rust::download::{DownloadParams, MediaType};
use whatsapp_rust::media::{self, AudioOptions, DocumentOptions, ImageOptions};
use whatsapp_rust::proto_helpers::MessageBuilderExt;
use whatsapp_rust::upload::UploadOptions;
use whatsapp_rust::wacore_binary::JidExt;
use whatsapp_rust::waproto::whatsapp as wa;
use whatsapp_rust::{Client, Jid, RevokeType, SendError};

use crate::domain::media::{FileKind, OutboundFile};
use crate::media::outgoing::mime_of;
use crate::media::Capped;

/// Who the linked account is: its phone number and LID (user parts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnIds {
    pub number: Option<String>,
    pub lid: Option<String>,
}

impl OwnIds {
    /// Whether `user` (a JID's user part) is the linked account.
    pub(super) fn is_me(&self, user: &str) -> bool {
        self.number.as_deref() == Some(user) || self.lid.as_deref() == Some(user)
    }
}

/// Which of WhatsApp's media kinds a file is (it picks the decryption keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaMediaKind {
    Image,
    Audio,
    Video,
    Document,
}

/// What fetching a WhatsApp file takes: where it lies on WhatsApp's CDN, the
/// key to decrypt it, and the hashes its bytes must match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaRef {
    pub kind: WaMediaKind,
    pub direct_path: String,
    /// Base64, as the three below.
    pub media_key: String,
    pub file_sha256: String,
    pub file_enc_sha256: String,
    pub length: u64,
}

impl MediaRef {
    /// The bytes of a key or hash (empty when it does not decode).
    pub fn bytes(field: &str) -> Vec<u8> {
        STANDARD.decode(field).unwrap_or_default()
    }
}

/// Why a WhatsApp call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaError {
    /// Not connected or not logged in now: worth trying again later.
    #[error("WhatsApp is not connected: {0}")]
    NotConnected(String),
    /// WhatsApp will not take this (a malformed request).
    #[error("WhatsApp refused it: {0}")]
    Rejected(String),
    /// A download past the most it may be: abandoned.
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// Anything else (network, server): worth trying again.
    #[error("{0}")]
    Other(String),
}

/// What the adapter does with WhatsApp.
pub trait WaClient: Send + Sync + 'static {
    /// Sends a text message to a chat; returns its message id.
    fn send_text(&self, chat: &str, text: &str) -> impl Future<Output = Result<String, WaError>> + Send;
    /// Shows (`true`) or ends "typing…" in a chat.
    fn composing(&self, chat: &str, on: bool) -> impl Future<Output = Result<(), WaError>> + Send;
    /// Marks a message read: WhatsApp users report that group messages stop
    /// coming to a device that never sends read receipts.
    fn mark_read(&self, chat: &str, sender: &str, id: &str) -> impl Future<Output = Result<(), WaError>> + Send;
    /// Replaces the text of a message the linked account sent (WhatsApp
    /// shows it as edited; it allows this for about 15 minutes).
    fn edit_text(&self, chat: &str, id: &str, text: &str) -> impl Future<Output = Result<(), WaError>> + Send;
    /// Deletes a message the linked account sent, for everyone.
    fn revoke(&self, chat: &str, id: &str) -> impl Future<Output = Result<(), WaError>> + Send;
    /// Puts `emoji` on someone's message (`sender`: its author's JID, as
    /// the message came); an empty `emoji` takes it off.
    fn react(
        &self,
        chat: &str,
        sender: &str,
        id: &str,
        emoji: &str,
    ) -> impl Future<Output = Result<(), WaError>> + Send;
    /// Uploads pincer's copy of a file and sends it to a chat (`caption`
    /// under a photo or document); returns its message id.
    fn send_file(
        &self,
        chat: &str,
        file: &OutboundFile,
        caption: Option<&str>,
    ) -> impl Future<Output = Result<String, WaError>> + Send;
    /// Downloads (and decrypts, and checks) a file a message carried,
    /// streamed into `into`, which stops it at its limit.
    fn download(&self, media: &MediaRef, into: Capped) -> impl Future<Output = Result<Capped, WaError>> + Send;
    /// A group's subject (its name), for the log.
    fn group_subject(&self, chat: &str) -> impl Future<Output = Result<String, WaError>> + Send;
    /// The linked account's phone number and LID (empty before pairing).
    fn own_ids(&self) -> OwnIds;
}

/// The crate's client.
#[derive(Clone)]
pub struct Real(pub Arc<Client>);

/// The crate writes a download into it as it decrypts, emptying it between
/// tries; a byte past its limit fails the download.
impl whatsapp_rust::download::DownloadWriter for Capped {
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        Capped::truncate(self, len);
        Ok(())
    }
}

fn jid(s: &str) -> Result<Jid, WaError> {
    s.parse().map_err(|e| WaError::Rejected(format!("{s:?} is not a JID: {e}")))
}

fn send_error(e: SendError) -> WaError {
    let text = format!("{e:#}");
    match e {
        SendError::Client(_) | SendError::NotLoggedIn => WaError::NotConnected(text),
        SendError::InvalidRequest(_) => WaError::Rejected(text),
        _ => WaError::Other(text),
    }
}

impl WaClient for Real {
    async fn send_text(&self, chat: &str, text: &str) -> Result<String, WaError> {
        let sent = self.0.send_message(jid(chat)?, wa::Message::text(text)).await.map_err(send_error)?;
        Ok(sent.message_id)
    }

    async fn composing(&self, chat: &str, on: bool) -> Result<(), WaError> {
        let chat = jid(chat)?;
        let states = self.0.chatstate();
        let sent = if on { states.send_composing(&chat).await } else { states.send_paused(&chat).await };
        sent.map_err(|e| WaError::Other(format!("{e:#}")))
    }

    async fn mark_read(&self, chat: &str, sender: &str, id: &str) -> Result<(), WaError> {
        let (chat, sender) = (jid(chat)?, jid(sender)?);
        self.0.mark_as_read(&chat, Some(&sender), &[id]).await.map_err(|e| WaError::Other(format!("{e:#}")))
    }

    async fn edit_text(&self, chat: &str, id: &str, text: &str) -> Result<(), WaError> {
        self.0.edit_message(jid(chat)?, id, wa::Message::text(text)).await.map_err(send_error)?;
        Ok(())
    }

    async fn revoke(&self, chat: &str, id: &str) -> Result<(), WaError> {
        self.0.revoke_message(jid(chat)?, id, RevokeType::Sender).await.map_err(send_error)
    }

    async fn react(&self, chat: &str, sender: &str, id: &str, emoji: &str) -> Result<(), WaError> {
        let chat = jid(chat)?;
        // A group's message is known by its author too (WA Web's message key).
        let key = wa::MessageKey {
            remote_jid: Some(chat.to_string()),
            from_me: Some(false),
            id: Some(id.to_owned()),
            participant: chat.is_group().then(|| sender.to_owned()),
        };
        self.0.send_reaction(chat, key, emoji).await.map_err(send_error)?;
        Ok(())
    }

    async fn send_file(&self, chat: &str, file: &OutboundFile, caption: Option<&str>) -> Result<String, WaError> {
        let chat = jid(chat)?;
        let data = tokio::fs::read(&file.path).await.map_err(|e| {
            WaError::Rejected(format!(
                "pincer's copy of {} cannot be read ({e}); ask the agent to send it again",
                file.name
            ))
        })?;
        let mimetype = Some(mime_of(&data, &file.name).to_owned());
        let caption = caption.map(str::to_owned);
        let kind = match file.kind {
            FileKind::Photo => MediaType::Image,
            FileKind::Audio => MediaType::Audio,
            FileKind::Document => MediaType::Document,
        };
        let upload =
            self.0.upload(data, kind, UploadOptions::default()).await.map_err(|e| WaError::Other(format!("{e:#}")))?;
        let message = match file.kind {
            FileKind::Photo => media::image_message(upload, ImageOptions { caption, mimetype, ..Default::default() }),
            // WhatsApp shows no caption under audio: the parts put it in a message of its own.
            FileKind::Audio => media::audio_message(upload, AudioOptions { mimetype, ..Default::default() }),
            FileKind::Document => media::document_message(
                upload,
                DocumentOptions { caption, mimetype, file_name: Some(file.name.clone()), ..Default::default() },
            ),
        };
        let sent = self.0.send_message(chat, message).await.map_err(send_error)?;
        Ok(sent.message_id)
    }

    async fn download(&self, media: &MediaRef, into: Capped) -> Result<Capped, WaError> {
        self.0
            .download_from_params_to_writer(&download_params(media), into)
            .await
            .map_err(|e| WaError::Other(format!("{e:#}")))
    }

    async fn group_subject(&self, chat: &str) -> Result<String, WaError> {
        let meta = self.0.groups().get_metadata(&jid(chat)?).await.map_err(|e| WaError::Other(format!("{e:#}")))?;
        Ok(meta.subject)
    }

    fn own_ids(&self) -> OwnIds {
        OwnIds { number: self.0.pn().map(|j| j.user.to_string()), lid: self.0.lid().map(|j| j.user.to_string()) }
    }
}

/// What the crate needs to fetch and check `media`.
fn download_params(media: &MediaRef) -> DownloadParams {
    let kind = match media.kind {
        WaMediaKind::Image => MediaType::Image,
        WaMediaKind::Audio => MediaType::Audio,
        WaMediaKind::Video => MediaType::Video,
        WaMediaKind::Document => MediaType::Document,
    };
    DownloadParams::encrypted(
        media.direct_path.clone(),
        &MediaRef::bytes(&media.media_key),
        &MediaRef::bytes(&media.file_sha256),
        &MediaRef::bytes(&media.file_enc_sha256),
        media.length,
        kind,
    )
}

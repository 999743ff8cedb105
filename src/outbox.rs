//! The one path to a chat. Results, pincer's notices and the agents' posts
//! are written to the store's outbox (in the same transaction as what they
//! carry) and then the delivery workers of the chat's platform are woken; no
//! message for a chat travels only in memory.
//!
//! Delivery itself (`channel::delivery`) reads the outbox back, per chat, in
//! order, and marks what reached the chat.

use std::sync::Arc;

use tokio::sync::watch;

use crate::domain::media::OutboundFile;
use crate::domain::{ChatAddress, GroupName, OutboundKind, Platform, TurnResult};
use crate::store::{Carried, Enqueue, GroupRecord, Marked, OutboxId, OutboxLog, OutboxRow, Seen, StoreError};

/// Cloneable handle to the outbox; every clone wakes the same deliverers.
#[derive(Clone, Debug)]
pub struct Outbox {
    store: OutboxLog,
    /// `pincer chat NAME`: this group's replies go to the terminal, not its chat.
    console: Option<GroupName>,
    /// Bumped after every write; deliverers and the console watch it.
    written: Arc<watch::Sender<u64>>,
}

impl Outbox {
    pub fn new(store: OutboxLog, console: Option<GroupName>) -> Outbox {
        Outbox { store, console, written: Arc::new(watch::channel(0).0) }
    }

    /// Where the group's messages go from this process: its console under
    /// `pincer chat`, else its chat, else its console.
    pub fn address_of(&self, group: &GroupRecord) -> ChatAddress {
        match &group.settings.chat {
            Some(chat) if self.console.as_ref() != Some(&group.name) => chat.clone(),
            _ => ChatAddress::console(&group.name),
        }
    }

    fn enqueue<'a>(&self, group: &GroupName, kind: OutboundKind, text: &'a str) -> Enqueue<'a> {
        Enqueue { kind, text, console: self.console.as_ref() == Some(group) }
    }

    /// Stores a result and, when there is one, its text for the chat, together
    /// (with what else it `carried`: the messages it settles, the transcript).
    pub async fn result(
        &self,
        group: &GroupName,
        result: &TurnResult,
        cost_usd: Option<f64>,
        raw: &str,
        chat_text: Option<&str>,
        carried: Carried<'_>,
    ) -> Result<Option<OutboxId>, StoreError> {
        let kind = if result.is_error { OutboundKind::Error } else { OutboundKind::Reply };
        let out = chat_text.map(|text| self.enqueue(group, kind, text));
        let id = self.store.record_result_with(group, result, cost_usd, raw, out, carried).await?;
        self.wake();
        Ok(id)
    }

    /// Stores a post an agent made with `send_message` (or a file with
    /// `send_file`, `text` its caption), and queues it.
    pub async fn agent_message(
        &self,
        to: &GroupName,
        sent_by: &GroupName,
        text: &str,
        file: Option<&OutboundFile>,
    ) -> Result<OutboxId, StoreError> {
        let out = self.enqueue(to, OutboundKind::Reply, text);
        let id = self.store.record_agent_message(to, sent_by, out, file).await?;
        self.wake();
        Ok(id)
    }

    /// Queues pincer's own words for a group's chat.
    pub async fn notice(&self, group: &GroupName, text: &str) {
        self.say(group, OutboundKind::Notice, text).await;
    }

    /// Queues a message that is stored nowhere else (a notice, a command's
    /// answer). A store failure is logged: it is never worth failing the
    /// caller's work for.
    pub async fn say(&self, group: &GroupName, kind: OutboundKind, text: &str) {
        if let Err(e) = self.try_say(group, kind, text).await {
            tracing::error!(%group, %e, text, "cannot queue a message for the chat");
        }
    }

    /// [`Outbox::say`], telling the caller when the store refused it (so it
    /// can say it another way).
    pub async fn try_say(&self, group: &GroupName, kind: OutboundKind, text: &str) -> Result<OutboxId, StoreError> {
        let id = self.store.enqueue(group, self.enqueue(group, kind, text)).await?;
        self.wake();
        Ok(id)
    }

    /// Wakes the deliverers: something was queued, or a chat is reachable again.
    pub fn wake(&self) {
        self.written.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes whenever the outbox may hold something new to deliver.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// How many replies wait for the group's chat.
    pub async fn waiting(&self, group: &GroupName) -> Result<u64, StoreError> {
        self.store.queued_count(group).await
    }

    /// The chats of `platform` that have replies waiting (of active groups).
    pub async fn waiting_chats(&self, platform: Platform) -> Result<Vec<ChatAddress>, StoreError> {
        self.store.queued_chats(platform).await
    }

    /// The oldest reply waiting for `to`.
    pub async fn next(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.store.next_queued(to).await
    }

    /// The oldest reply without a file waiting for `to`.
    pub async fn next_text(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.store.next_queued_text(to).await
    }

    /// The oldest reply with a file waiting for `to`.
    pub async fn next_file(&self, to: &ChatAddress) -> Result<Option<OutboxRow>, StoreError> {
        self.store.next_queued_file(to).await
    }

    /// The newest row's id, whatever its group.
    pub async fn last_id(&self) -> Result<OutboxId, StoreError> {
        self.store.outbox_last_id().await
    }

    /// The group's rows written after `after`, for any chat, oldest first.
    pub async fn rows_after(&self, group: &GroupName, after: OutboxId) -> Result<Vec<OutboxRow>, StoreError> {
        self.store.group_outbox_after(group, after, 64).await
    }

    /// `parts` parts of the row are in the chat (if it is still as `seen`).
    pub async fn parts_done(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        self.store.outbox_parts_done(seen, parts).await
    }

    /// All `parts` parts are in the chat (if the row is still as `seen`).
    pub async fn delivered(&self, seen: &Seen, parts: u32) -> Result<Marked, StoreError> {
        self.store.outbox_delivered(seen, parts).await
    }

    /// A try failed for a passing reason; the row stays queued.
    pub async fn attempt_failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        self.store.outbox_attempt_failed(seen, why).await
    }

    /// The row's file could not be sent (refused, or out of tries): the row
    /// failed and `notice` queued for the group's chat, in one transaction
    /// (if the row is still as `seen`).
    pub async fn file_failed(
        &self,
        group: &GroupName,
        seen: &Seen,
        why: &str,
        notice: &str,
    ) -> Result<Marked, StoreError> {
        let notice = self.enqueue(group, OutboundKind::Notice, notice);
        let marked = self.store.outbox_file_failed(group, seen, why, notice).await?;
        self.wake();
        Ok(marked)
    }

    /// The platform refused the row for good (if it is still as `seen`).
    pub async fn failed(&self, seen: &Seen, why: &str) -> Result<Marked, StoreError> {
        self.store.outbox_failed(seen, why).await
    }
}

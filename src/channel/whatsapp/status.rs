//! WhatsApp's [`StatusPort`]: the status message of a slow turn, edited in
//! place while WhatsApp takes the edits, and the receipt reaction.
//!
//! WhatsApp has no buttons, so a status that offers Stop ends with
//! [`STOP_HINT`]. Edits are the weak spot: WhatsApp takes them only for
//! [`EDIT_WINDOW`] after the message was sent, and a send can fail. When an
//! edit fails, or the message is too old to edit, the chat is shown composing
//! instead and the status is posted anew at most once per [`REPOST_EVERY`],
//! the previous one deleted first ([`Slot`] decides); a state held back by
//! that minute is posted when it is up, so the last one (a summary) is never
//! lost, only late. The presenter keeps
//! the id it was given first: this port maps it to the message showing now,
//! so the presenter stays platform-free. At most one status message is alive
//! per chat: a repost happens only once the previous one is deleted.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::client::{WaClient, WaError};
use crate::channel::progress::{StatusError, StatusPort};
use crate::domain::ChatAddress;

/// How long one status call may take before it is given up.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// What a status offering Stop ends with, WhatsApp having no buttons.
/// The least time between two status edits in one WhatsApp chat, whatever
/// `[progress] every` says: WhatsApp edits are whole messages sent again,
/// and a linked device that edits often looks like a bot to be limited.
pub const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(6);

pub const STOP_HINT: &str = "Send /stop to interrupt.";

/// How long after sending WhatsApp accepts an edit (15 minutes), with a
/// margin for clocks and the edit's own trip.
pub const EDIT_WINDOW: Duration = Duration::from_secs(14 * 60);

/// At most one new status message per chat this often, when edits fail.
pub const REPOST_EVERY: Duration = Duration::from_secs(60);

/// The status message alive in one chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    /// The id the presenter was given, and uses for every later call.
    handed: String,
    /// The message showing the status now.
    current: String,
    posted_at: Instant,
    /// An edit of this status failed: reposts only, no more edit attempts.
    edits_fail: bool,
    /// The newest text held back until a repost is allowed.
    held: Option<String>,
    /// A task waits to post `held` when the minute is up.
    flush_due: bool,
}

/// What to do with an edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Edit this message.
    Edit(String),
    /// Delete this message, then post the new text.
    Repost(String),
    /// Too soon to post again: show composing only.
    Presence,
}

impl Slot {
    pub fn new(id: String, now: Instant) -> Slot {
        Slot { handed: id.clone(), current: id, posted_at: now, edits_fail: false, held: None, flush_due: false }
    }

    pub fn plan(&self, now: Instant) -> Plan {
        let age = now.saturating_duration_since(self.posted_at);
        if !self.edits_fail && age < EDIT_WINDOW {
            Plan::Edit(self.current.clone())
        } else if age >= REPOST_EVERY {
            Plan::Repost(self.current.clone())
        } else {
            Plan::Presence
        }
    }

    /// An edit failed: from now on this status is only reposted.
    pub fn edit_failed(&mut self) {
        self.edits_fail = true;
    }

    /// The new message shows the status now (and whatever was held is stale).
    pub fn reposted(&mut self, id: String, now: Instant) {
        self.current = id;
        self.posted_at = now;
        self.held = None;
    }

    /// Holds `text` back until a repost is allowed; returns when that is if
    /// nothing waits for it yet (the caller then starts the wait).
    pub fn hold(&mut self, text: String) -> Option<Instant> {
        self.held = Some(text);
        let start = !self.flush_due;
        self.flush_due = true;
        start.then_some(self.posted_at + REPOST_EVERY)
    }

    /// The minute is up: the message to replace and the text to post, if
    /// something is still held.
    pub fn due(&mut self) -> Option<(String, String)> {
        self.flush_due = false;
        let text = self.held.take()?;
        Some((self.current.clone(), text))
    }
}

/// The status messages of WhatsApp chats.
pub struct WhatsAppStatus<C> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    client: Arc<C>,
    /// By chat JID: one alive at most.
    slots: Mutex<HashMap<String, Slot>>,
}

impl<C: WaClient> WhatsAppStatus<C> {
    pub fn new(client: Arc<C>) -> WhatsAppStatus<C> {
        WhatsAppStatus { inner: Arc::new(Inner { client, slots: Mutex::new(HashMap::new()) }) }
    }
}

impl<C: WaClient> Inner<C> {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot the presenter's `id` names in `chat`, if this port posted it.
    fn slot(&self, chat: &str, id: &str) -> Option<Slot> {
        self.slots().get(chat).filter(|s| s.handed == id).cloned()
    }

    /// Edits failed or the message is too old: a fresh post in place of the
    /// old one, or composing while the text waits for its minute.
    async fn fall_back(self: &Arc<Self>, chat: &str, id: &str, plan: Plan, text: String) -> Result<(), StatusError> {
        match plan {
            Plan::Repost(old) => self.repost(chat, &old, &text).await,
            Plan::Presence | Plan::Edit(_) => {
                let due = self.slots().get_mut(chat).filter(|s| s.handed == id).and_then(|s| s.hold(text));
                if let Some(due) = due {
                    tokio::spawn(self.clone().flush(chat.to_owned(), id.to_owned(), due));
                }
                within(self.client.composing(chat, true)).await
            }
        }
    }

    /// Posts `text` in place of `old`, deleted first: if it cannot be,
    /// nothing is posted, so two are never alive.
    async fn repost(&self, chat: &str, old: &str, text: &str) -> Result<(), StatusError> {
        within(self.client.revoke(chat, old)).await?;
        let new = within(self.client.send_text(chat, text)).await?;
        let kept = match self.slots().get_mut(chat) {
            Some(slot) => {
                slot.reposted(new.clone(), Instant::now());
                true
            }
            None => false,
        };
        if kept {
            Ok(())
        } else {
            // The presenter deleted it meanwhile: so goes the new one.
            within(self.client.revoke(chat, &new)).await
        }
    }

    /// At `due`, posts the text held back for status `id` in `chat`, unless
    /// it was deleted or shown otherwise meanwhile.
    async fn flush(self: Arc<Self>, chat: String, id: String, due: Instant) {
        tokio::time::sleep_until(due).await;
        let Some((old, text)) = self.slots().get_mut(&chat).filter(|s| s.handed == id).and_then(Slot::due) else {
            return;
        };
        if let Err(e) = self.repost(&chat, &old, &text).await {
            tracing::debug!(%chat, %e, "cannot post a held-back WhatsApp status; the next state will");
        }
    }
}

/// The status text as WhatsApp shows it.
fn shown(text: &str, stop: bool) -> String {
    if stop {
        format!("{text}\n\n{STOP_HINT}")
    } else {
        text.to_owned()
    }
}

/// Runs one client call within [`STATUS_TIMEOUT`].
async fn within<T>(call: impl Future<Output = Result<T, WaError>>) -> Result<T, StatusError> {
    match tokio::time::timeout(STATUS_TIMEOUT, call).await {
        Ok(done) => done.map_err(|e| StatusError::Failed(e.to_string())),
        Err(_) => Err(StatusError::Failed(format!(
            "no answer from WhatsApp within {}",
            humantime::format_duration(STATUS_TIMEOUT)
        ))),
    }
}

/// A message to react to, as the presenter may name it: the stored external
/// id `chat/sender/id`, `sender/id`, or a bare id (no author: fine outside groups).
fn reaction_target(message_id: &str) -> (&str, &str) {
    let mut parts = message_id.rsplitn(3, '/');
    let id = parts.next().unwrap_or(message_id);
    (parts.next().unwrap_or(""), id)
}

impl<C: WaClient> StatusPort for WhatsAppStatus<C> {
    async fn post(&self, to: &ChatAddress, text: &str, stop: bool) -> Result<String, StatusError> {
        let (inner, chat) = (&self.inner, to.chat.as_str());
        let before = inner.slots().remove(chat);
        if let Some(before) = before {
            // The presenter starts over; the one it lost track of goes first.
            if let Err(e) = within(inner.client.revoke(chat, &before.current)).await {
                tracing::warn!(%chat, %e, "cannot delete an earlier WhatsApp status message");
            }
        }
        let id = within(inner.client.send_text(chat, &shown(text, stop))).await?;
        inner.slots().insert(chat.to_owned(), Slot::new(id.clone(), Instant::now()));
        Ok(id)
    }

    async fn edit(&self, to: &ChatAddress, id: &str, text: &str, stop: bool) -> Result<(), StatusError> {
        let (inner, chat) = (&self.inner, to.chat.as_str());
        let text = shown(text, stop);
        let Some(slot) = inner.slot(chat, id) else {
            // Not one of this run's (left by an earlier one): a plain edit.
            return within(inner.client.edit_text(chat, id, &text)).await;
        };
        let plan = slot.plan(Instant::now());
        let Plan::Edit(current) = plan else {
            return inner.fall_back(chat, id, plan, text).await;
        };
        match tokio::time::timeout(STATUS_TIMEOUT, inner.client.edit_text(chat, &current, &text)).await {
            Ok(Ok(())) => Ok(()),
            // Offline: a post would fail as well; the next edit tries again.
            Ok(Err(e @ WaError::NotConnected(_))) => Err(StatusError::Failed(e.to_string())),
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer in time".to_owned(),
                };
                tracing::debug!(%chat, %why, "a WhatsApp status edit failed; composing and reposting instead");
                let plan = {
                    let mut slots = inner.slots();
                    let Some(slot) = slots.get_mut(chat).filter(|s| s.handed == id) else { return Ok(()) };
                    slot.edit_failed();
                    slot.plan(Instant::now())
                };
                inner.fall_back(chat, id, plan, text).await
            }
        }
    }

    async fn delete(&self, to: &ChatAddress, id: &str) -> Result<(), StatusError> {
        let (inner, chat) = (&self.inner, to.chat.as_str());
        let current = {
            let mut slots = inner.slots();
            match slots.get(chat).filter(|s| s.handed == id) {
                Some(_) => slots.remove(chat).map_or_else(|| id.to_owned(), |s| s.current),
                None => id.to_owned(),
            }
        };
        within(inner.client.revoke(chat, &current)).await
    }

    async fn react(&self, to: &ChatAddress, message_id: &str, emoji: &str) -> Result<(), StatusError> {
        let (sender, id) = reaction_target(message_id);
        within(self.inner.client.react(&to.chat, sender, id, emoji)).await
    }
}

#[cfg(test)]
mod tests;

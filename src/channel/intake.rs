//! One intake for every chat platform: what an adapter hands over (an
//! [`Arrival`]) and what becomes of it, decided once for all of them. May
//! touch the router and the [`Directory`](super::Directory) (through
//! [`Ports`]); never a platform's types.
//!
//! The rule every adapter keeps: a message is stored (for the agent, or as
//! context) or refused before its platform is told it arrived. An adapter
//! translates its platform's message into an [`Arrival`] (and its own
//! command, if the text is one), calls [`Intake::take`], and acts on the
//! answer: a [`Taken`] to acknowledge (the receipt, typing, a command run),
//! or a [`Refused`] to tell the chat and, where the platform brings an
//! unacknowledged message again, to fail with.
//!
//! The decisions (does it wake the agent, may the sender give orders, what a
//! failure at each step means) are pure functions below; [`Intake::take`] is
//! the thin I/O around them.

use std::time::SystemTime;

use crate::domain::media::Attachment;
use crate::domain::{ChatAddress, GroupName, Inbound, Source};
use crate::router::RouteError;
use crate::store::{GroupRecord, GroupSettings};

use super::text::{starts_with_word, FirstSight};
use super::Ports;

/// How much of a replied-to message the agent is shown.
const QUOTE_CHARS: usize = 80;

/// One chat message as a platform adapter hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// The chat (and thread) it was written in.
    pub at: ChatAddress,
    /// Its id across the platform, which the store keeps unique: a message
    /// the platform brings again is recognised instead of answered twice.
    pub external_id: String,
    /// The sender's id on the platform (what `--admin` names).
    pub sender_id: Option<String>,
    pub sender_name: String,
    pub text: String,
    pub sent_at: SystemTime,
    /// "Name: first words" of the message it answers (see [`quote`]).
    pub reply_to: Option<String>,
    /// How it turns to the bot, besides the trigger word.
    pub addressed: Addressed,
    /// A one-to-one chat with the bot: everything in it is for the agent.
    pub private: bool,
    /// The photos and files it carries (fetched later, by the preparer).
    pub media: Vec<Attachment>,
    /// The platform's key for an album: its parts arrive as messages sharing it.
    pub album: Option<String>,
}

/// How a message turns to the bot, as far as its platform says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addressed {
    /// It @-mentions the bot.
    pub mentions_bot: bool,
    /// It replies to one of the bot's messages.
    pub replies_to_bot: bool,
    /// It replies to the message with this platform id, whose author the
    /// platform did not tell: it replies to the bot when pincer sent it.
    pub replies_to: Option<String>,
}

/// "Name: first words" of a message replied to, as the agent is shown it.
pub fn quote(who: &str, said: &str) -> String {
    let said: String = said.chars().take(QUOTE_CHARS).collect();
    format!("{who}: {said}")
}

/// Whether a message wakes its group's agent: always in a private chat or a
/// group without a trigger; otherwise when it mentions the bot, replies to
/// it, or starts with the trigger (case-insensitive, as a whole word;
/// `@<assistant>` unless the group names its own).
pub fn engages(arrival: &Arrival, settings: &GroupSettings, assistant: &str, replies_to_bot: bool) -> bool {
    if arrival.private || !settings.requires_trigger || arrival.addressed.mentions_bot || replies_to_bot {
        return true;
    }
    let trigger = settings.trigger.clone().unwrap_or_else(|| format!("@{assistant}"));
    starts_with_word(arrival.text.trim_start(), &trigger)
}

/// Whether the sender is one of the group's admins (who may stop the agent,
/// start afresh, and change its tasks and budget when it has any).
pub fn by_admin(sender_id: Option<&str>, settings: &GroupSettings) -> bool {
    sender_id.is_some_and(|id| settings.admins.iter().any(|a| a == id))
}

/// What the platform does with a message pincer did not acknowledge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// It brings it again (WhatsApp's durability hook): failing is safe, the
    /// message is not lost.
    UntilAcknowledged,
    /// It counts it as delivered whatever pincer says (a Telegram update is
    /// confirmed once handled): a message not taken must be refused in its chat.
    Never,
    /// It brings it again while pincer does not confirm it, to whichever
    /// node serves it then (Telegram on a cluster node: an update left
    /// unconfirmed is polled again, by this node or by the next holder of
    /// the bot's gateway lease). A message this node cannot store is left
    /// for that, not refused: a node cut off from the database loses the
    /// gateway within `lease_ttl`, and the next gateway stores it.
    ToTheNextGateway,
}

/// A step of intake that can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Finding the chat's group, or whether pincer sent the message replied to.
    Lookup,
    /// Recording that an inactive group's chat has the bot again.
    Reachable,
    /// Storing the message.
    Store,
}

/// What a failure at a [`Step`] means for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Only bookkeeping failed: log it and take the message.
    GoOn,
    /// The message is not taken; `tell`: the chat is told so.
    Refuse { tell: bool },
}

impl Redelivery {
    /// A message that could not be stored is refused in its chat, unless the
    /// next gateway will be brought it. A failure before that is left to a
    /// platform that brings the message again (it will find the store
    /// working, or fail again, unacknowledged); on one that does not, a
    /// lookup that failed refuses the message in its chat and a reachability
    /// that could not be recorded is only logged.
    pub fn on_failure(self, step: Step) -> OnFailure {
        match (step, self) {
            (_, Redelivery::ToTheNextGateway) => OnFailure::Refuse { tell: false },
            (Step::Store, _) => OnFailure::Refuse { tell: true },
            (Step::Lookup | Step::Reachable, Redelivery::UntilAcknowledged) => OnFailure::Refuse { tell: false },
            (Step::Lookup, Redelivery::Never) => OnFailure::Refuse { tell: true },
            (Step::Reachable, Redelivery::Never) => OnFailure::GoOn,
        }
    }
}

/// What intake made of a message: the adapter acknowledges it to its platform.
#[derive(Debug)]
pub enum Taken<C> {
    /// The chat has no group: nothing for pincer. `first`: the first time
    /// this chat was seen (since the start), to log once how to register it.
    Unregistered { first: bool },
    /// A command, for the adapter to run in the group's chat.
    Command { group: GroupRecord, command: C, by_admin: bool },
    /// Stored as context: the agent reads it with the next engaging message.
    Observed,
    /// The platform brought a message again that is stored already: dropped.
    Duplicate,
    /// Stored for the agent, who will answer: the adapter shows it is working.
    Engaged { group: GroupRecord },
}

/// A message intake did not take: the platform must not count it as
/// delivered, and the chat is told when `tell`.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Refused {
    /// The group it was for, when known (its outbox may carry the refusal).
    pub group: Option<GroupName>,
    #[source]
    pub error: RouteError,
    pub tell: bool,
}

/// The intake of one platform adapter.
pub struct Intake {
    /// `@<assistant>` is the trigger of a group that names none.
    assistant: String,
    redelivery: Redelivery,
    unknown_chats: FirstSight<String>,
}

impl Intake {
    pub fn new(assistant: &str, redelivery: Redelivery) -> Intake {
        Intake { assistant: assistant.to_owned(), redelivery, unknown_chats: FirstSight::default() }
    }

    /// Takes one message: finds its group, marks the group reachable again,
    /// hands back a `command`, or stores the message (for the agent when it
    /// [`engages`], else as context). Returns only once the message is stored
    /// or refused.
    pub async fn take<C>(&self, ports: &Ports, arrival: Arrival, command: Option<C>) -> Result<Taken<C>, Refused> {
        let directory = &ports.directory;
        let group = match directory.group_for(&arrival.at).await {
            Ok(Some(group)) => group,
            Ok(None) => return Ok(Taken::Unregistered { first: self.unknown_chats.first(&arrival.at.chat) }),
            Err(e) => {
                tracing::error!(chat = %arrival.at, %e, "cannot look up the group of a message");
                return Err(self.refused(Step::Lookup, None, e.into()));
            }
        };
        if !group.active {
            // The bot receives messages again, so it is back in the chat.
            tracing::info!(group = %group.name, platform = %arrival.at.platform, "the group's chat is reachable again");
            if let Err(e) = directory.set_reachable(&group.name, true, None).await {
                tracing::warn!(group = %group.name, %e, "cannot record that the group's chat is reachable");
                if let OnFailure::Refuse { .. } = self.redelivery.on_failure(Step::Reachable) {
                    return Err(self.refused(Step::Reachable, Some(&group.name), e.into()));
                }
            }
        }
        if let Some(command) = command {
            let by_admin = by_admin(arrival.sender_id.as_deref(), &group.settings);
            return Ok(Taken::Command { group, command, by_admin });
        }
        let replies_to_bot = replies_to_bot(ports, &arrival)
            .await
            .map_err(|e| self.refused(Step::Lookup, Some(&group.name), e.into()))?;
        let engaged = engages(&arrival, &group.settings, &self.assistant, replies_to_bot);
        self.store(ports, arrival, group, engaged).await
    }

    /// The group a message [`Taken::Duplicate`] engages, if it does: what
    /// taking the copy stored first decided (on a cluster, another node may
    /// have stored it, and this one shows the chat the agent is on it).
    /// `None` too when the store cannot tell: the courtesy is skipped.
    pub async fn engaged_copy(&self, ports: &Ports, arrival: &Arrival) -> Option<GroupRecord> {
        let group = ports.directory.group_for(&arrival.at).await.ok()??;
        let replies_to_bot = replies_to_bot(ports, arrival).await.ok()?;
        engages(arrival, &group.settings, &self.assistant, replies_to_bot).then_some(group)
    }

    async fn store<C>(
        &self,
        ports: &Ports,
        arrival: Arrival,
        group: GroupRecord,
        engaged: bool,
    ) -> Result<Taken<C>, Refused> {
        let (platform, id) = (arrival.at.platform, arrival.external_id.clone());
        let inbound = arrival.into_inbound(group.name.clone());
        let router = &ports.router;
        let stored =
            if engaged { router.send(inbound).await.map(|_| ()) } else { router.observe(&inbound).await.map(|_| ()) };
        match stored {
            Ok(()) if engaged => Ok(Taken::Engaged { group }),
            Ok(()) => Ok(Taken::Observed),
            Err(e) if e.is_duplicate() => {
                tracing::debug!(group = %group.name, %platform, %id, "a message came again; dropped");
                Ok(Taken::Duplicate)
            }
            Err(e) => {
                // A message kept only as context is refused too: confirmed
                // unstored, the agent would never see it.
                tracing::error!(group = %group.name, engaged, %e, "cannot take a message for the group");
                Err(self.refused(Step::Store, Some(&group.name), e))
            }
        }
    }

    fn refused(&self, step: Step, group: Option<&GroupName>, error: RouteError) -> Refused {
        let tell = matches!(self.redelivery.on_failure(step), OnFailure::Refuse { tell: true });
        Refused { group: group.cloned(), error, tell }
    }
}

/// Whether `arrival` replies to the bot: its platform says so, or pincer sent the message it quotes.
async fn replies_to_bot(ports: &Ports, arrival: &Arrival) -> Result<bool, crate::store::StoreError> {
    match &arrival.addressed.replies_to {
        _ if arrival.addressed.replies_to_bot => Ok(true),
        Some(id) => ports.directory.was_sent(&arrival.at, id).await,
        None => Ok(false),
    }
}

impl Arrival {
    /// The message as the router stores it for `group`.
    fn into_inbound(self, group: GroupName) -> Inbound {
        let mut inbound = Inbound::new(group, Source::Chat(self.at.platform), self.sender_name, self.text);
        inbound.sender_id = self.sender_id;
        inbound.sent_at = self.sent_at;
        inbound.reply_to = self.reply_to;
        inbound.external_id = Some(self.external_id);
        inbound.media = self.media;
        inbound.album = self.album;
        inbound
    }
}

#[cfg(test)]
mod tests;

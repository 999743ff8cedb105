//! Messages from WhatsApp: to a group's agent, as context, a command, or an
//! answer to an approval prompt; the bot's own messages and groups that are
//! not registered go nowhere. An engaging message gets the receipt reaction
//! once it is stored. On a cluster's standby node a message is only stored:
//! what it causes in the chat is the gateway holder's (see `role`).
//!
//! A crate message is turned into [`WaMessage`] first (in `event`), then
//! into an intake [`Arrival`]: which group, whether it engages the agent,
//! and storing it are `channel::intake`'s.

use std::sync::Arc;
use std::time::SystemTime;

use super::approvals::Answerer;
use super::client::{OwnIds, WaClient};
use super::commands::{Cmd, HELP};
use super::role::Role;
use super::shared::Shared;
use super::status::{STATUS_EVERY, STATUS_TIMEOUT};
use crate::channel::group_commands::{BudgetAction, TasksAction};
use crate::channel::intake::{self, Addressed, Arrival, Taken};
use crate::channel::{text, SessionCommand};
use crate::domain::activity::ProgressMode;
use crate::domain::{ChatAddress, OutboundKind, Platform};
use crate::store::GroupRecord;

/// How often "typing…" is sent again: WhatsApp drops a composing state after a while.
const TYPING_REPEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// A text message as pincer reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct WaMessage {
    /// Unique across chats: `chat/sender/message id` (WhatsApp's ids are
    /// unique per chat and sender only). Redeliveries are dropped by it.
    pub id: String,
    /// WhatsApp's own id of the message (what a reply quotes).
    pub message_id: String,
    /// The chat's JID (`…@g.us` for a group).
    pub chat: String,
    /// The sender's JID, as WhatsApp gave it (often a LID).
    pub sender: String,
    pub is_group: bool,
    /// Sent by the linked account itself (from the phone, or by pincer).
    pub from_me: bool,
    /// The sender's phone number (digits), when WhatsApp tells it (the
    /// sender may be known only by a LID).
    pub sender_number: Option<String>,
    pub sender_name: String,
    pub text: String,
    /// The files it carries (their bytes are fetched later, by the preparer).
    pub media: Vec<crate::domain::media::Attachment>,
    pub sent_at: Option<SystemTime>,
    /// The user parts of the JIDs the message @-mentions (numbers or LIDs).
    pub mentions: Vec<String>,
    /// What it replies to: the quoted message's id, who wrote it (a JID user
    /// part), and its first words.
    pub quoted_id: Option<String>,
    pub quoted_sender: Option<String>,
    pub quoted_text: Option<String>,
}

impl WaMessage {
    fn address(&self) -> ChatAddress {
        ChatAddress { platform: Platform::WhatsApp, chat: self.chat.clone(), thread: None }
    }

    /// "Name: first words" of the quoted message.
    fn reply_to(&self) -> Option<String> {
        let said = self.quoted_text.as_deref()?;
        Some(intake::quote(self.quoted_sender.as_deref().unwrap_or("someone"), said))
    }

    /// The message as intake takes it. It addresses the bot when it
    /// @-mentions the linked account (by number or LID), quotes one of its
    /// messages, or quotes one pincer sent (which only the store knows).
    fn arrival(&self, me: &OwnIds) -> Arrival {
        let quotes_me = self.quoted_sender.as_deref().is_some_and(|s| me.is_me(s));
        Arrival {
            at: self.address(),
            external_id: self.id.clone(),
            sender_id: self.sender_number.clone(),
            sender_name: self.sender_name.clone(),
            text: self.text.clone(),
            sent_at: self.sent_at.unwrap_or_else(SystemTime::now),
            reply_to: self.reply_to(),
            addressed: Addressed {
                mentions_bot: self.mentions.iter().any(|m| me.is_me(m)),
                replies_to_bot: self.quoted_id.is_some() && quotes_me,
                replies_to: self.quoted_id.clone().filter(|_| !quotes_me),
            },
            private: false,
            media: self.media.clone(),
            album: None,
        }
    }
}

/// Takes one message: hands it to intake, which stores it (or refuses a
/// second copy) before this returns, so WhatsApp is acknowledged only for
/// what pincer holds. The bot's own messages, direct chats, `/chatid` and
/// the answers to approval prompts are WhatsApp's own.
pub(super) async fn on_message<C: WaClient>(shared: &Arc<Shared<C>>, msg: WaMessage) -> anyhow::Result<()> {
    let me = shared.client.own_ids();
    // On a personal number the bot's own posts come back: never answer them.
    if msg.from_me || me.number.as_deref().is_some_and(|n| msg.sender_number.as_deref() == Some(n)) {
        return Ok(());
    }
    if shared.ports.directory.was_sent(&msg.address(), &msg.message_id).await? {
        return Ok(());
    }
    if !msg.is_group {
        tracing::debug!(chat = %msg.chat, "a direct message to the linked number was ignored; pincer serves groups");
        return Ok(());
    }
    shared.health.inbound().await;
    // Read once: a cluster's standby stores and acts on nothing (`role`).
    let role = shared.roles.now();
    let prompt_code = match &msg.quoted_id {
        Some(quoted) => shared.approvals.code_of_prompt(&msg.chat, quoted),
        None => None,
    };
    let command = Cmd::parse(&msg.text, prompt_code.is_some());
    if command == Some(Cmd::Chatid) {
        if role.acts() {
            chat_id(shared, &msg);
        }
        return Ok(());
    }
    match shared.intake.take(&shared.ports, msg.arrival(&me), command).await {
        Ok(taken) => act(shared, role, &msg, &me, taken, prompt_code).await,
        Err(refused) => {
            // Not stored, so not acked: WhatsApp may bring it again. The chat is
            // told now (by the device that acts), from its own task: the hook
            // never waits on a send.
            if refused.tell && role.acts() {
                tell_not_taken(shared, &msg, &refused.error);
            }
            Err(refused.into())
        }
    }
}

/// What a taken message causes in its chat, from the device that acts.
async fn act<C: WaClient>(
    shared: &Arc<Shared<C>>,
    role: Role,
    msg: &WaMessage,
    me: &OwnIds,
    taken: Taken<Cmd>,
    prompt_code: Option<String>,
) -> anyhow::Result<()> {
    match taken {
        Taken::Unregistered { first: true } => unregistered(shared, msg),
        // Commands are not stored as messages are. On one machine the device
        // runs them; on a cluster the first node to see one does, holder or
        // not, so one sent while no node holds the number waits (its answer
        // in the outbox) like a message. An approval's answer is the holder's:
        // it alone has the prompt (the next holder shows it again).
        Taken::Command { group, command, by_admin } if command.travels() && role != Role::Alone => {
            if shared.ports.directory.first_to_see_command(&msg.address(), &msg.message_id).await? {
                return run_command(shared, &group, msg, command, by_admin, prompt_code).await;
            }
        }
        Taken::Command { group, command, by_admin } if role.acts() => {
            return run_command(shared, &group, msg, command, by_admin, prompt_code).await
        }
        Taken::Engaged { group } if role.acts() => return engaged(shared, &group, msg).await,
        Taken::Duplicate if role.acts_on_copy() => {
            if let Some(group) = shared.intake.engaged_copy(&shared.ports, &msg.arrival(me)).await {
                return engaged(shared, &group, msg).await;
            }
        }
        Taken::Unregistered { first: false }
        | Taken::Observed
        | Taken::Duplicate
        | Taken::Command { .. }
        | Taken::Engaged { .. } => {}
    }
    Ok(())
}

/// Tells the chat its message was not taken.
fn tell_not_taken<C: WaClient>(shared: &Shared<C>, msg: &WaMessage, error: &crate::router::RouteError) {
    let text = text::not_taken(error);
    let (client, jid) = (shared.client.clone(), msg.chat.clone());
    tokio::spawn(async move {
        if let Err(e) = client.send_text(&jid, &text).await {
            tracing::warn!(%jid, %e, "cannot tell the chat that its message was not taken");
        }
    });
}

/// Says once how to register a group that is not; asking WhatsApp for the
/// subject must not hold up the receive path.
fn unregistered<C: WaClient>(shared: &Shared<C>, msg: &WaMessage) {
    let (client, jid) = (shared.client.clone(), msg.chat.clone());
    tokio::spawn(async move {
        let subject = client.group_subject(&jid).await.unwrap_or_default();
        tracing::warn!(
            %jid, %subject,
            "a message from a WhatsApp group that is not registered was ignored; register it with \
             `pincer groups add NAME --whatsapp {jid}`"
        );
    });
}

/// A message the agent will answer: the receipt, the status message, and
/// "composing…" while the turn runs.
async fn engaged<C: WaClient>(shared: &Arc<Shared<C>>, group: &GroupRecord, msg: &WaMessage) -> anyhow::Result<()> {
    let ports = &shared.ports;
    let mut progress = ports.progress_for(group);
    progress.every = progress.every.max(STATUS_EVERY);
    let followed = ports.follow(&group.name).await?;
    if progress.mode != ProgressMode::Off {
        receipt(shared, msg, &progress.reaction);
        let (status, directory) = (shared.status.clone(), ports.directory.clone());
        shared.progress.follow(&group.name, followed.activity(), status, msg.address(), progress, directory);
    }
    let (client, chat) = (shared.client.clone(), msg.chat.clone());
    shared.typing.start(&group.name, followed, TYPING_REPEAT, move |on| {
        let (client, chat) = (client.clone(), chat.clone());
        async move { client.composing(&chat, on).await.map_err(|e| e.to_string()) }
    });
    Ok(())
}

/// Puts the receipt reaction on a message the agent will answer, from its
/// own task: the hook never waits on a send, and a failure only costs the emoji.
fn receipt<C: WaClient>(shared: &Shared<C>, msg: &WaMessage, emoji: &str) {
    if emoji.is_empty() {
        return;
    }
    let (client, emoji) = (shared.client.clone(), emoji.to_owned());
    let (chat, sender, id) = (msg.chat.clone(), msg.sender.clone(), msg.message_id.clone());
    tokio::spawn(async move {
        let reacted = tokio::time::timeout(STATUS_TIMEOUT, client.react(&chat, &sender, &id, &emoji)).await;
        match reacted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(%chat, %e, "cannot put the receipt reaction on a WhatsApp message"),
            Err(_) => tracing::debug!(%chat, "no answer from WhatsApp to the receipt reaction in time"),
        }
    });
}

/// `/chatid`: answered in any group, registered or not (it is how a group
/// gets registered), directly rather than through the outbox (a group that
/// is not registered has none), from its own task: sending must not hold up
/// the receive path.
fn chat_id<C: WaClient>(shared: &Shared<C>, msg: &WaMessage) {
    let you =
        msg.sender_number.as_deref().map_or_else(String::new, |n| format!("\nYour number: {n} (for --admin {n})"));
    let text = format!("Group id: {}\nRegister it with: pincer groups add NAME --whatsapp {}{you}", msg.chat, msg.chat);
    let (client, jid) = (shared.client.clone(), msg.chat.clone());
    tokio::spawn(async move {
        if let Err(e) = client.send_text(&jid, &text).await {
            tracing::warn!(%jid, %e, "cannot answer /chatid");
        }
    });
}

async fn run_command<C: WaClient>(
    shared: &Shared<C>,
    group: &GroupRecord,
    msg: &WaMessage,
    cmd: Cmd,
    by_admin: bool,
    prompt_code: Option<String>,
) -> anyhow::Result<()> {
    let session = match cmd {
        Cmd::Status => SessionCommand::Status,
        Cmd::Stop => SessionCommand::Stop,
        Cmd::New => SessionCommand::New,
        Cmd::Tasks(args) => TasksAction::parse(&args).map_or_else(SessionCommand::Usage, SessionCommand::Tasks),
        Cmd::Budget(args) => BudgetAction::parse(&args).map_or_else(SessionCommand::Usage, SessionCommand::Budget),
        Cmd::Chatid => {
            chat_id(shared, msg);
            return Ok(());
        }
        Cmd::Help => SessionCommand::Usage(HELP),
        Cmd::Answer { verdict, code } => {
            let Some(code) = code.or(prompt_code) else { return Ok(()) };
            let by = Answerer { number: msg.sender_number.as_deref(), name: &msg.sender_name };
            let told = shared.approvals.answer(&msg.chat, &code, verdict, &by);
            shared.ports.outbox.say(&group.name, OutboundKind::Answer, &told).await;
            return Ok(());
        }
    };
    Ok(shared.ports.session_command(group, session, by_admin).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GroupSettings;

    fn group(requires_trigger: bool) -> GroupRecord {
        GroupRecord {
            name: "g".parse().unwrap(),
            created_at_us: 0,
            session_id: None,
            settings: GroupSettings { requires_trigger, ..GroupSettings::default() },
            active: true,
            inactive_reason: None,
        }
    }

    fn msg(text: &str) -> WaMessage {
        WaMessage { text: text.into(), is_group: true, ..WaMessage::default() }
    }

    /// Whether `msg` engages as intake sees it (`quoted_by_pincer`: the store
    /// says pincer sent the quoted message).
    fn engages(msg: &WaMessage, g: &GroupRecord, assistant: &str, me: &OwnIds, quoted_by_pincer: bool) -> bool {
        let arrival = msg.arrival(me);
        let replies_to_bot = arrival.addressed.replies_to_bot || quoted_by_pincer;
        intake::engages(&arrival, &g.settings, assistant, replies_to_bot)
    }

    #[test]
    fn the_trigger_a_mention_or_a_reply_to_the_bot_engages() {
        let me = OwnIds { number: Some("4915100000009".into()), lid: Some("123456789".into()) };
        let g = group(true);
        assert!(engages(&msg("@Andy hi"), &g, "Andy", &me, false));
        assert!(engages(&msg("@andy, hi"), &g, "Andy", &me, false));
        assert!(!engages(&msg("lunch?"), &g, "Andy", &me, false));
        assert!(!engages(&msg("hi @Andy"), &g, "Andy", &me, false));
        let by_number = WaMessage { mentions: vec!["4915100000009".into()], ..msg("@4915100000009 what now") };
        assert!(engages(&by_number, &g, "Andy", &me, false));
        let by_lid = WaMessage { mentions: vec!["123456789".into()], ..msg("@123456789 what now") };
        assert!(engages(&by_lid, &g, "Andy", &me, false));
        let someone_else = WaMessage { mentions: vec!["4915100000001".into()], ..msg("@Bob what now") };
        assert!(!engages(&someone_else, &g, "Andy", &me, false));
        assert!(engages(&msg("and then?"), &g, "Andy", &me, true));
        assert!(engages(&msg("anything"), &group(false), "Andy", &me, false));
    }

    #[test]
    fn a_quote_of_the_bot_addresses_it_and_one_of_anyone_else_asks_the_store() {
        let me = OwnIds { number: Some("4915100000009".into()), lid: Some("123456789".into()) };
        let quoting = |sender: &str| WaMessage {
            quoted_id: Some("3EB0ORIG".into()),
            quoted_sender: Some(sender.into()),
            ..msg("and then?")
        };
        let of_me = quoting("123456789").arrival(&me).addressed;
        assert_eq!(of_me, Addressed { replies_to_bot: true, ..Addressed::default() });
        let of_bob = quoting("4915100000001").arrival(&me).addressed;
        assert_eq!(of_bob, Addressed { replies_to: Some("3EB0ORIG".into()), ..Addressed::default() });
        assert_eq!(msg("hi").arrival(&me).addressed, Addressed::default());
    }

    #[test]
    fn a_quote_is_shown_as_who_and_first_words() {
        let quoting = WaMessage {
            quoted_sender: Some("4915100000001".into()),
            quoted_text: Some("lunch at noon?".into()),
            ..msg("sounds good")
        };
        assert_eq!(quoting.reply_to().as_deref(), Some("4915100000001: lunch at noon?"));
        assert_eq!(msg("x").reply_to(), None);
    }
}

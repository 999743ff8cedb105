//! Tool approvals in the chat: the prompt with Allow / Deny / Always allow
//! buttons, who may press them, and what the prompt says once it is decided.
//!
//! The session decides what needs approval and denies when no answer comes in
//! time; this module only asks. A press from someone who is not one of the
//! group's admins is refused in the button's answer and changes nothing. The
//! prompt shows the tool's whole input, or sends it as a file first when it
//! is too long (`view`); "Always allow" is offered, and accepted, only when
//! the prompt itself shows all of it. A prompt withdrawn (a cluster gateway
//! that lost its lease: the next one shows it) is left as it is.

mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use teloxide::prelude::*;
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup, InputFile, MessageId, ParseMode};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::format::Chunk;
use super::outbound;
use super::target::{TelegramTarget, TgBot};
use crate::channel::approvals::{wait_for_end, Ended};
use crate::channel::ApprovalAsk;
use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest};

/// A button press, as carried in `callback_data` (`ap:<id>:<a|d|A>`, well
/// under Telegram's 64 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Press {
    pub id: u64,
    pub choice: Approval,
}

impl Press {
    pub fn parse(data: &str) -> Option<Press> {
        let mut parts = data.split(':');
        if parts.next()? != "ap" {
            return None;
        }
        let id = parts.next()?.parse().ok()?;
        let choice = match parts.next()? {
            "a" => Approval::Allow,
            "d" => Approval::Deny,
            "A" => Approval::AlwaysAllow,
            _ => return None,
        };
        parts.next().is_none().then_some(Press { id, choice })
    }

    fn data(&self) -> String {
        let code = match self.choice {
            Approval::Allow => "a",
            Approval::Deny => "d",
            Approval::AlwaysAllow => "A",
        };
        format!("ap:{}:{code}", self.id)
    }
}

/// A prompt in a chat, waiting for an admin.
struct Entry {
    chat_id: i64,
    admins: Vec<String>,
    /// The prompt showed the whole input, so "Always allow" may be pressed.
    offer_always: bool,
    decide: oneshot::Sender<ApprovalAnswer>,
}

/// Prompts waiting for a press, by approval id. Bounded by the engine's
/// approval queue: every entry is one tool call the CLI is waiting on.
#[derive(Default)]
pub(super) struct Waiting(Mutex<HashMap<u64, Entry>>);

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles a press; returns what the presser is told.
    pub fn press(&self, press: Press, chat_id: Option<i64>, by_id: i64, by_name: &str) -> String {
        let mut waiting = self.lock();
        let Some(entry) = waiting.get(&press.id) else {
            return "This request is no longer waiting (it was answered or timed out).".to_owned();
        };
        if chat_id != Some(entry.chat_id) {
            return "This button does not belong to this chat.".to_owned();
        }
        if !entry.admins.contains(&by_id.to_string()) {
            tracing::info!(approval = press.id, by_id, "a non-admin pressed an approval button; refused");
            return "Sorry, only this group's admins can answer tool requests.".to_owned();
        }
        if press.choice == Approval::AlwaysAllow && !entry.offer_always {
            // No such button was shown; only a hand-made callback gets here.
            return "\"Always allow\" is not offered for this request: its input was too long to show in the \
                    prompt. Allow it once or deny it."
                .to_owned();
        }
        let Some(entry) = waiting.remove(&press.id) else {
            return "This request is no longer waiting.".to_owned();
        };
        let answer = ApprovalAnswer { verdict: press.choice, by: format!("telegram:{by_id} ({by_name})") };
        match entry.decide.send(answer) {
            Ok(()) => match press.choice {
                Approval::Allow => "Allowed.",
                Approval::Deny => "Denied.",
                Approval::AlwaysAllow => "Allowed, now and from now on in this group.",
            }
            .to_owned(),
            Err(_) => "This request is no longer waiting.".to_owned(),
        }
    }
}

/// Shows each approval request in its group's chat until pincer stops.
/// `waiting` is the adapter's: the button presses it gets are decided there.
pub(super) async fn run(
    bot: TgBot,
    waiting: Arc<Waiting>,
    asks: mpsc::Receiver<ApprovalAsk>,
    shutdown: CancellationToken,
) {
    crate::channel::approvals::serve_asks(asks, shutdown, |next| ask(bot.clone(), waiting.clone(), next)).await
}

async fn ask(bot: TgBot, waiting: Arc<Waiting>, ask: ApprovalAsk) {
    let ApprovalAsk { to, admins, request, withdrawn } = ask;
    let ApprovalRequest { id, group, tool_name, summary, provenance, timeout, respond } = request;
    let Some(target) = TelegramTarget::from_address(&to) else {
        tracing::error!(%group, chat = %to, "an approval request for a chat that is not Telegram's; denied");
        return;
    };
    let view = view::view_noting(id, &tool_name, &summary, timeout, provenance.as_deref());
    let (decide, decided) = oneshot::channel();
    let entry = Entry { chat_id: target.chat_id, admins, offer_always: view.offer_always, decide };
    waiting.lock().insert(id, entry);

    let button = |label: &str, choice| InlineKeyboardButton::callback(label.to_owned(), Press { id, choice }.data());
    let mut rows = vec![vec![button("Allow", Approval::Allow), button("Deny", Approval::Deny)]];
    if view.offer_always {
        rows.push(vec![button("Always allow", Approval::AlwaysAllow)]);
    }
    let message = match post(&bot, target, &view, InlineKeyboardMarkup::new(rows)).await {
        Ok(message) => message,
        Err(e) => {
            tracing::error!(%group, tool = %tool_name, %e, "cannot post an approval request; denied");
            waiting.lock().remove(&id);
            return;
        }
    };
    let outcome = match wait_for_end(&withdrawn, decided, respond).await {
        Ended::Answered { answer, late: false } => {
            let line = match answer.verdict {
                Approval::Allow => "✅ Allowed",
                Approval::Deny => "❌ Denied",
                Approval::AlwaysAllow => "✅ Always allowed in this group",
            };
            let by = answer.by.split_once(" (").map_or(answer.by.as_str(), |(_, name)| name.trim_end_matches(')'));
            format!("{line} by {by}.")
        }
        Ended::Answered { late: true, .. } => "⌛ The answer came too late: denied.".to_owned(),
        Ended::GaveUp => {
            waiting.lock().remove(&id);
            "⌛ No answer in time: denied.".to_owned()
        }
        Ended::Forgotten => "⌛ No longer waiting: denied.".to_owned(),
        Ended::Withdrawn => {
            // Another gateway settles it now; an edit from here would race its.
            waiting.lock().remove(&id);
            return tracing::debug!(%group, approval = id, "an approval prompt was withdrawn; left as it is");
        }
    };
    let (html, plain) = view.settled(&outcome);
    settle(&bot, target.chat_id, message, Chunk { html, plain }).await;
}

/// Sends the input's file (if the view has one), then the prompt with its buttons.
async fn post(
    bot: &TgBot,
    target: TelegramTarget,
    view: &view::View,
    keyboard: InlineKeyboardMarkup,
) -> Result<MessageId, teloxide::RequestError> {
    if let Some(doc) = &view.document {
        let file = InputFile::memory(doc.text.clone().into_bytes()).file_name(doc.file_name.clone());
        let mut request = bot.send_document(ChatId(target.chat_id), file);
        if let Some(thread) = target.thread() {
            request = request.message_thread_id(thread);
        }
        request.await?;
    }
    let prompt = Chunk { html: view.html.clone(), plain: view.plain.clone() };
    outbound::send_chunk(bot, target, &prompt, Some(keyboard)).await
}

/// Replaces a prompt's text with its outcome and removes its buttons.
async fn settle(bot: &TgBot, chat_id: i64, message: MessageId, chunk: Chunk) {
    let edit = bot.edit_message_text(ChatId(chat_id), message, chunk.html).parse_mode(ParseMode::Html).await;
    if let Err(e) = edit {
        tracing::debug!(chat_id, %e, "cannot update an approval prompt; trying plain text");
        let _ = bot.edit_message_text(ChatId(chat_id), message, chunk.plain).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn button_data_round_trips_and_fits_telegram() {
        for choice in [Approval::Allow, Approval::Deny, Approval::AlwaysAllow] {
            let press = Press { id: u64::MAX, choice };
            let data = press.data();
            assert!(data.len() <= 64, "{data}");
            assert_eq!(Press::parse(&data), Some(press));
        }
        for bad in ["", "ap", "ap:1", "ap:x:a", "ap:1:z", "ap:1:a:extra", "xx:1:a"] {
            assert_eq!(Press::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_admins_of_the_right_chat_decide() {
        let waiting = Waiting::default();
        let (decide, mut decided) = oneshot::channel();
        waiting.lock().insert(7, Entry { chat_id: -5, admins: vec!["42".into()], offer_always: true, decide });
        let press = Press { id: 7, choice: Approval::Allow };
        assert!(waiting.press(press, Some(-5), 99, "Mallory").contains("only this group's admins"));
        assert!(waiting.press(press, Some(-6), 42, "Alice").contains("does not belong"));
        assert!(decided.try_recv().is_err(), "nothing decided yet");
        assert_eq!(waiting.press(press, Some(-5), 42, "Alice"), "Allowed.");
        let answer = decided.try_recv().unwrap();
        assert_eq!(answer.verdict, Approval::Allow);
        assert_eq!(answer.by, "telegram:42 (Alice)");
        assert!(waiting.press(press, Some(-5), 42, "Alice").contains("no longer waiting"));
    }

    #[test]
    fn always_is_refused_where_it_was_not_offered() {
        let waiting = Waiting::default();
        let (decide, mut decided) = oneshot::channel();
        waiting.lock().insert(8, Entry { chat_id: -5, admins: vec!["42".into()], offer_always: false, decide });
        let always = Press { id: 8, choice: Approval::AlwaysAllow };
        assert!(waiting.press(always, Some(-5), 42, "Alice").contains("not offered"));
        assert!(decided.try_recv().is_err(), "nothing decided");
        assert_eq!(waiting.press(Press { id: 8, choice: Approval::Allow }, Some(-5), 42, "Alice"), "Allowed.");
    }
}

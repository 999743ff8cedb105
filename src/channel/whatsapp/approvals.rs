//! Tool approvals without buttons (ordinary WhatsApp accounts have none):
//! pincer posts the tool, a short view of its input and a four-character code;
//! an admin answers `allow CODE`, `deny CODE` or `always CODE`, or replies to
//! the prompt with one of those words. Anyone else is told they are not an
//! admin and nothing changes. The session denies when no answer comes within
//! `approval_timeout`; this module then says so in the chat. The prompt shows
//! the tool's whole input, or comes after it in numbered messages when it is
//! long (`view`); `always` is offered, and accepted, only when the prompt
//! itself shows all of it.

mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::client::WaClient;
use crate::channel::approvals::{wait_for_end, Ended};
use crate::channel::ApprovalAsk;
use crate::domain::{Approval, ApprovalAnswer, ApprovalRequest};
use crate::outbox::Outbox;

/// Letters and digits that cannot be mistaken for each other when typed.
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// A prompt in a group, waiting for an admin.
struct Entry {
    chat: String,
    /// The prompt's message id, once posted: a reply to it answers it.
    prompt_id: Option<String>,
    admins: Vec<String>,
    /// The prompt showed the whole input, so `always` may be answered.
    offer_always: bool,
    decide: oneshot::Sender<ApprovalAnswer>,
}

/// Prompts waiting for an answer, by code. Bounded by the engine's approval
/// queue: every entry is one tool call the CLI is waiting on.
#[derive(Default)]
pub(super) struct Waiting(Mutex<HashMap<String, Entry>>);

/// Who answered, as the adapter knows them.
pub(super) struct Answerer<'a> {
    /// The sender's phone number (digits), when WhatsApp tells it.
    pub number: Option<&'a str>,
    pub name: &'a str,
}

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a prompt for `chat` under a fresh code.
    fn open(&self, chat: &str, admins: Vec<String>, decide: oneshot::Sender<ApprovalAnswer>) -> String {
        let mut waiting = self.lock();
        let code = loop {
            let code = code();
            if !waiting.contains_key(&code) {
                break code;
            }
        };
        let entry = Entry { chat: chat.to_owned(), prompt_id: None, admins, offer_always: false, decide };
        waiting.insert(code.clone(), entry);
        code
    }

    /// Whether `always` is accepted for `code` (only once its prompt shows the whole input).
    fn offer_always(&self, code: &str, offer: bool) {
        if let Some(entry) = self.lock().get_mut(code) {
            entry.offer_always = offer;
        }
    }

    fn posted(&self, code: &str, prompt_id: String) {
        if let Some(entry) = self.lock().get_mut(code) {
            entry.prompt_id = Some(prompt_id);
        }
    }

    fn forget(&self, code: &str) {
        self.lock().remove(code);
    }

    /// The code of the prompt a message replies to, if it is one.
    pub fn code_of_prompt(&self, chat: &str, prompt_id: &str) -> Option<String> {
        let waiting = self.lock();
        waiting
            .iter()
            .find(|(_, e)| e.chat == chat && e.prompt_id.as_deref() == Some(prompt_id))
            .map(|(c, _)| c.clone())
    }

    /// Handles an answer in `chat`; returns what the chat is told.
    pub fn answer(&self, chat: &str, code: &str, verdict: Approval, by: &Answerer<'_>) -> String {
        let mut waiting = self.lock();
        let Some(entry) = waiting.get(code).filter(|e| e.chat == chat) else {
            return format!("No tool request {code} is waiting here (it was answered or timed out).");
        };
        if !by.number.is_some_and(|n| entry.admins.iter().any(|a| a == n)) {
            tracing::info!(code, by = by.name, "a non-admin answered a tool request; refused");
            return format!("Sorry {}, only this group's admins can answer tool requests.", by.name);
        }
        if verdict == Approval::AlwaysAllow && !entry.offer_always {
            return format!(
                "*always* is not offered for {code}: its input was too long to show in the request itself. \
                 Answer *allow {code}* or *deny {code}*."
            );
        }
        let Some(entry) = waiting.remove(code) else {
            return format!("No tool request {code} is waiting here.");
        };
        let number = by.number.unwrap_or_default();
        let answer = ApprovalAnswer { verdict, by: format!("whatsapp:{number} ({})", by.name) };
        match entry.decide.send(answer) {
            Ok(()) => match verdict {
                Approval::Allow => format!("✅ {code} allowed by {}.", by.name),
                Approval::Deny => format!("❌ {code} denied by {}.", by.name),
                Approval::AlwaysAllow => {
                    format!("✅ {code} allowed by {}, now and from now on in this group.", by.name)
                }
            },
            Err(_) => format!("Tool request {code} is no longer waiting."),
        }
    }
}

/// A random four-character code.
fn code() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..4].iter().map(|b| CODE_ALPHABET[usize::from(*b) % CODE_ALPHABET.len()] as char).collect()
}

/// What showing prompts takes: the client to post them, the outbox for
/// what is said about them later, and the adapter's prompts waiting.
pub(super) struct Asker<C> {
    pub client: Arc<C>,
    pub outbox: Outbox,
    pub waiting: Arc<Waiting>,
}

/// Shows each approval request in its group until pincer stops.
pub(super) async fn run<C: WaClient>(
    shared: Arc<Asker<C>>,
    asks: mpsc::Receiver<ApprovalAsk>,
    shutdown: CancellationToken,
) {
    crate::channel::approvals::serve_asks(asks, shutdown, |next| ask(shared.clone(), next)).await
}

async fn ask<C: WaClient>(shared: Arc<Asker<C>>, ask: ApprovalAsk) {
    let ApprovalAsk { to, admins, request, withdrawn } = ask;
    let ApprovalRequest { group, tool_name, summary, provenance, timeout, respond, .. } = request;
    let (decide, decided) = oneshot::channel();
    let code = shared.waiting.open(&to.chat, admins, decide);
    let view = match view::view_noting(&code, &tool_name, &summary, timeout, provenance.as_deref()) {
        Ok(view) => view,
        Err(too_long) => {
            tracing::warn!(%group, tool = %tool_name, "a tool input too long to show on WhatsApp; denied without asking");
            shared.waiting.forget(&code);
            let by = "pincer (its input is too long to show the admins in full on WhatsApp; do it in smaller steps)";
            let by = by.to_owned();
            let _ = respond.send(ApprovalAnswer { verdict: Approval::Deny, by });
            shared.outbox.notice(&group, &too_long.notice).await;
            return;
        }
    };
    shared.waiting.offer_always(&code, view.offer_always);
    match post(&*shared, &to.chat, &view).await {
        Ok(id) => shared.waiting.posted(&code, id),
        Err(e) => {
            tracing::error!(%group, tool = %tool_name, %e, "cannot post an approval request; denied");
            shared.waiting.forget(&code);
            return;
        }
    }
    let late = match wait_for_end(&withdrawn, decided, respond).await {
        // The answer was told in the chat when it was given.
        Ended::Answered { late, .. } => late,
        Ended::GaveUp => {
            shared.waiting.forget(&code);
            true
        }
        Ended::Forgotten => false,
        Ended::Withdrawn => {
            // The number's next holder shows it again and says how it ends.
            shared.waiting.forget(&code);
            false
        }
    };
    if late {
        let text = format!("⌛ No answer to {code} in time: {tool_name} was denied.");
        shared.outbox.notice(&group, &text).await;
    }
}

/// Sends the input's parts (if any), then the prompt; returns the prompt's id.
async fn post<C: WaClient>(shared: &Asker<C>, chat: &str, view: &view::View) -> Result<String, super::client::WaError> {
    for part in &view.parts {
        shared.client.send_text(chat, part).await?;
    }
    shared.client.send_text(chat, &view.prompt).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Answerer<'static> {
        Answerer { number: Some("4915100000001"), name: "Alice" }
    }

    #[test]
    fn codes_are_short_and_unambiguous() {
        for _ in 0..200 {
            let c = code();
            assert_eq!(c.len(), 4);
            assert!(c.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{c}");
        }
    }

    #[test]
    fn only_admins_of_the_right_group_decide() {
        let waiting = Waiting::default();
        let (decide, mut decided) = oneshot::channel();
        let code = waiting.open("g1@g.us", vec!["4915100000001".into()], decide);
        waiting.offer_always(&code, true);
        waiting.posted(&code, "PROMPT1".into());
        assert_eq!(waiting.code_of_prompt("g1@g.us", "PROMPT1"), Some(code.clone()));
        assert_eq!(waiting.code_of_prompt("g2@g.us", "PROMPT1"), None);

        let mallory = Answerer { number: Some("4915199999999"), name: "Mallory" };
        assert!(waiting.answer("g1@g.us", &code, Approval::Allow, &mallory).contains("only this group's admins"));
        let unknown = Answerer { number: None, name: "Someone" };
        assert!(waiting.answer("g1@g.us", &code, Approval::Allow, &unknown).contains("only this group's admins"));
        assert!(waiting.answer("g2@g.us", &code, Approval::Allow, &alice()).contains("No tool request"));
        assert!(decided.try_recv().is_err(), "nothing decided yet");

        let told = waiting.answer("g1@g.us", &code, Approval::AlwaysAllow, &alice());
        assert!(told.contains("allowed by Alice, now and from now on"), "{told}");
        let answer = decided.try_recv().unwrap();
        assert_eq!(answer.verdict, Approval::AlwaysAllow);
        assert_eq!(answer.by, "whatsapp:4915100000001 (Alice)");
        assert!(waiting.answer("g1@g.us", &code, Approval::Deny, &alice()).contains("No tool request"));
    }

    #[test]
    fn always_is_refused_where_it_was_not_offered() {
        let waiting = Waiting::default();
        let (decide, mut decided) = oneshot::channel();
        let code = waiting.open("g1@g.us", vec!["4915100000001".into()], decide);
        let told = waiting.answer("g1@g.us", &code, Approval::AlwaysAllow, &alice());
        assert!(told.contains("not offered"), "{told}");
        assert!(decided.try_recv().is_err(), "nothing decided");
        assert!(waiting.answer("g1@g.us", &code, Approval::Allow, &alice()).contains("allowed by Alice"));
    }
}

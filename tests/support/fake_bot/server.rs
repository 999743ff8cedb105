//! Starting [`FakeBot`] on loopback, routing every request to its method,
//! and what tests read of what the bot did and wait for. Touches every
//! sibling but the door; none of them touches it.

use std::{collections::VecDeque, pin::pin, sync::Arc, time::Duration};

use axum::{
    body::Bytes,
    extract::{ConnectInfo, State},
    http::{HeaderMap, Uri},
    response::Response,
    Router,
};
use serde_json::Value;

use super::super::serve::Cutter;
use super::answer::{respond, TgError};
use super::faults::inject;
use super::files::download;
use super::model::{Call, Sent, TgChat, Webhook, PATIENCE};
use super::params::{normalize_method, parse_params, split_path};
use super::state::{FakeBot, Shared};
use super::updates::{deliver_to_webhook, get_updates};

impl FakeBot {
    /// Binds 127.0.0.1 on a free port and serves from a spawned task (needs a
    /// tokio runtime).
    pub async fn start() -> FakeBot {
        let shared = Arc::new(Shared::new());
        // Every path goes to one handler: the token and method are path
        // segments, and the method name is matched case-insensitively.
        let app = Router::new().fallback(handle).with_state(shared.clone());
        // Cuttable, so a call can lose its connection instead of being answered.
        let (addr, shutdown) = super::super::serve::serve_loopback_cuttable(app, "fake Bot API").await;
        tokio::spawn(deliver_to_webhook(shared.clone()));
        FakeBot { addr, shared, _shutdown: shutdown }
    }

    /// `http://127.0.0.1:PORT`, for `[telegram] api_url`. teloxide appends
    /// `/bot<TOKEN>/<Method>` as path segments, so no trailing slash is needed
    /// (one after a path prefix would even double it).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes a chat known without anyone talking in it, so sends to it get the
    /// right chat JSON and refusals. Chats seen in [`Self::say`] are known.
    pub fn add_chat(&self, chat: &TgChat) {
        self.shared.lock().chats.insert(chat.id, chat.clone());
    }

    /// Every request so far, in the order they were answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The calls of one method (Telegram's spelling).
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        self.shared.lock().calls.iter().filter(|c| c.method == method).cloned().collect()
    }

    /// The messages the bot sent to the chat, oldest first, as they stand now.
    pub fn sent(&self, chat_id: i64) -> Vec<Sent> {
        let inner = self.shared.lock();
        inner.sent.iter().filter(|s| s.chat_id == chat_id).map(|meta| inner.sent_view(meta)).collect()
    }

    /// How many messages the bot sent, to every chat: cheap enough to poll
    /// while a load bench sends thousands.
    pub fn sent_count(&self) -> usize {
        self.shared.lock().sent.len()
    }

    /// The emoji the bot's reaction on a message holds now (none: empty).
    pub fn reactions(&self, chat_id: i64, message_id: i64) -> Vec<String> {
        self.shared.lock().reactions.get(&(chat_id, message_id)).cloned().unwrap_or_default()
    }

    /// Any stored message (either side) as Telegram's Message JSON.
    pub fn message(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        self.shared.lock().messages.get(&(chat_id, message_id)).cloned()
    }

    /// The webhook the bot set, if any.
    pub fn webhook(&self) -> Option<Webhook> {
        self.shared.lock().webhook.clone()
    }

    /// Waits until `f` holds, re-checking whenever a call is recorded; panics
    /// after [`PATIENCE`] naming `what` and listing the calls.
    pub async fn wait_for<F: Fn(&FakeBot) -> bool>(&self, what: &str, f: F) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut woken = pin!(self.shared.activity.notified());
            woken.as_mut().enable();
            if f(self) {
                return;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                panic!("fake Bot API: waited {PATIENCE:?} for {what}; calls so far:\n{}", self.dump_calls());
            }
            // Also re-check now and then: `f` may look at more than the calls.
            let nap = (deadline - now).min(Duration::from_millis(250));
            let _ = tokio::time::timeout(nap, woken).await;
        }
    }

    /// Waits until at least `n` messages were sent to the chat; returns them all.
    pub async fn wait_sent(&self, chat_id: i64, n: usize) -> Vec<Sent> {
        self.wait_for(&format!("{n} message(s) sent to chat {chat_id}"), |bot| bot.sent(chat_id).len() >= n).await;
        self.sent(chat_id)
    }

    /// The calls, one a line, with the polls summed up: they are many and dull.
    pub(super) fn dump_calls(&self) -> String {
        let calls = self.calls();
        let polls = calls.iter().filter(|c| c.method == "getUpdates").count();
        let mut lines: Vec<String> = calls
            .iter()
            .filter(|c| c.method != "getUpdates")
            .map(|c| {
                let outcome = c.error.as_deref().map_or_else(|| "ok".to_owned(), |e| format!("ERR {e}"));
                let mut params = c.params.to_string();
                if params.len() > 300 {
                    let cut = (0..=300).rev().find(|&i| params.is_char_boundary(i)).unwrap_or(0);
                    params.truncate(cut);
                    params.push('…');
                }
                format!("  {} [{outcome}] {params}", c.method)
            })
            .collect();
        lines.push(format!("  (and {polls} getUpdates)"));
        lines.join("\n")
    }
}

impl Drop for FakeBot {
    fn drop(&mut self) {
        // Long polls and the webhook sender end now, so graceful shutdown does
        // not wait out a poll timeout.
        self.shared.lock().closed = true;
        self.shared.updates.notify_waiters();
        // Hung calls too, as a server that goes away closes their connections.
        self.shared.released.notify_waiters();
    }
}

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(cutter): ConnectInfo<Cutter>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(path) = uri.path().strip_prefix("/file/bot").and_then(|rest| rest.split_once('/')).map(|(_, p)| p) {
        return download(&shared, path);
    }
    let Some((token, raw_method)) = split_path(uri.path()) else {
        // What Telegram answers for a path that is no method call at all.
        let outcome = Err(TgError { code: 404, description: "Not Found".into(), retry_after: None });
        shared.record(uri.path(), Value::Null, &outcome);
        return respond(&outcome);
    };
    let method = normalize_method(raw_method);
    let params = match parse_params(&headers, uri.query(), &body) {
        Ok(params) => params,
        Err(e) => {
            let outcome = Err(e);
            shared.record(&method, Value::Null, &outcome);
            return respond(&outcome);
        }
    };
    let slow = shared.lock().slow.get(&method.to_ascii_lowercase()).copied();
    if let Some(delay) = slow {
        // Dropped with the connection when the client gives up first.
        tokio::time::sleep(delay).await;
    }
    // Read in one go with the fault, so a release in between is not missed.
    let (fault, releases) = {
        let mut inner = shared.lock();
        (inner.take_net_fault(&method), inner.releases)
    };
    if let Some(fault) = fault {
        return inject(&shared, fault, &method, params, releases, &cutter).await;
    }
    let outcome =
        if !token.split_once(':').is_some_and(|(id, _)| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) {
            Err(TgError { code: 401, description: "Unauthorized".into(), retry_after: None })
        } else {
            let fault = shared.lock().faults.get_mut(&method.to_ascii_lowercase()).and_then(VecDeque::pop_front);
            match fault {
                Some(fault) => Err(fault.into()),
                None if method == "getUpdates" => get_updates(&shared, &params).await,
                None => {
                    let outcome = shared.lock().call(&method, &params);
                    // A webhook set now must get the updates queued before it.
                    if method == "setWebhook" {
                        shared.updates.notify_waiters();
                    }
                    outcome
                }
            }
        };
    shared.record(&method, params, &outcome);
    respond(&outcome)
}

//! A fake Telegram Bot API server on loopback, spoken to by the real teloxide
//! client (`[telegram] api_url = <FakeBot::api_url()>`).
//!
//! Tests play the people in the chats ([`FakeBot::say`], [`FakeBot::press`],
//! [`FakeBot::set_member_status`]) and assert on what the bot did
//! ([`FakeBot::calls`], [`FakeBot::sent`]). Every request is recorded, whether
//! it succeeded or not, under Telegram's lowerCamel method name.
//!
//! It rejects what Telegram rejects, with the descriptions teloxide-core maps to
//! its `ApiError` variants, so a formatting or size bug in pincer fails here
//! instead of in production:
//! - `parse_mode: "HTML"` is parsed like Telegram's parser (tdlib's
//!   `parse_html`): only Telegram's tags, properly nested and closed; and,
//!   stricter than Telegram, a bare `<` or an `&` that starts no supported entity
//!   (`&lt; &gt; &amp; &quot;`, numeric) is an error too, as the Bot API docs
//!   require them escaped.
//! - Length is counted in UTF-16 units of the visible text after entity parsing
//!   and trimming, 4096 at most.
//! - `callback_data` is 1-64 bytes; editing to identical content is "message is
//!   not modified"; editing text without `reply_markup` drops the keyboard.
//!
//! Telegram's own quirks are reproduced because pincer must cope with them:
//! - In a forum, every message in a topic that replies to nothing carries
//!   `reply_to_message` = the topic's `forum_topic_created` service message.
//! - In a non-forum supergroup, a reply carries `message_thread_id` (the root of
//!   its reply chain) without `is_topic_message`.
//! - teloxide sends `POST /bot<TOKEN>/SendMessage` (PascalCase); Telegram and
//!   this fake match method names case-insensitively.
//! - `allowed_updates` sticks from one `getUpdates`/`setWebhook` to the next, and
//!   updates of other kinds are never delivered.
//! - While a webhook is set, queued updates are POSTed to it (with the
//!   `X-Telegram-Bot-Api-Secret-Token` header) instead of served to `getUpdates`.
//!
//! Network faults are injected on demand, for tests of retries and outages. A
//! faulted call has no effect (no message is created), is recorded with
//! `ok: false` and an `error` naming the fault, and wakes [`FakeBot::wait_for`].
//! What teloxide-core 0.13 (teloxide 0.17, `Bot::new`'s default client) makes
//! of each, which the timing of tests depends on:
//! - [`FakeBot::outage`] answers a 5xx status with the HTML page Telegram's
//!   nginx front gives (`<html>…502 Bad Gateway…`). On any 5xx status
//!   teloxide's `process_response` first sleeps `DELAY_ON_SERVER_ERROR`, 10 s,
//!   inside the request future, then fails to parse the page as JSON: the call
//!   ends after ≥ 10 s with `RequestError::InvalidJson { raw: "<html>…" }` (the
//!   status is lost). A 5xx with Telegram's JSON body ([`FakeBot::fail_next`]
//!   with [`FakeError::custom`]) sleeps as long and ends with
//!   `RequestError::Api(ApiError::Unknown(description))`. So a client that
//!   retries at once, one call at a time, makes one attempt per 10 s of outage
//!   (plus the last one, failed if the outage ended during its sleep).
//! - [`FakeBot::drop_connections`] and [`FakeBot::drop_next`] close the
//!   connection without an answer: `RequestError::Network` at once (hyper's
//!   "connection closed before message completed"; reqwest does not resend a
//!   request it had written).
//! - [`FakeBot::hang_next`] and [`FakeBot::hang_calls`] never answer until
//!   [`FakeBot::release_hangs`] or the fake is dropped, then close the
//!   connection. teloxide's default client gives up first, after its 17 s total
//!   timeout (`default_reqwest_settings`), with `RequestError::Network` (a
//!   timeout), and the fake never learns that it did.
//!
//! - [`FakeBot::slow_calls`] answers a call as usual, only after a delay (a
//!   slow uplink): past 17 s teloxide's default client has given up on it,
//!   and the call, no longer awaited, has no effect.
//!
//! Faults act between the bot and the API only: updates still reach a webhook.
//!
//! `sendDocument`, `sendPhoto` and `sendAudio` keep an uploaded file's name
//! and bytes ([`Sent::file`]); a photo that is no image, or over 10 MB, is
//! refused like Telegram does ("IMAGE_PROCESS_FAILED").
//!
//! `deleteMessage` deletes the bot's own messages only ("message can't be
//! deleted" otherwise, "message to delete not found" the second time); a
//! deleted message stays in [`FakeBot::sent`] marked [`Sent::deleted`], and
//! edits of it are "message to edit not found". `setMessageReaction` takes
//! one of Telegram's reaction emoji ("REACTION_INVALID" otherwise) on a
//! message that exists ([`FakeBot::reactions`]).
//!
//! Not modelled: `sendVideo`, `sendVoice` and `sendMediaGroup` (pincer sends one
//! file a message), inline mode, MarkdownV2 parsing (its text is
//! counted as is), HTTPS-only webhooks, rate limits (inject them with
//! [`FakeBot::fail_next`]), a call that takes effect but whose answer is lost.
//!
//! The door only declares the parts and re-exports what the tests use. From
//! the top: `server` (starting, routing, observing) over `updates` (what
//! users do; long polls and the webhook), `sending` (the bot's methods),
//! `files` and `faults`; below them `state` (the memory and [`FakeBot`]'s
//! fields), `html` (Telegram's text parsing), `params`, `answer`,
//! `net_fault` and `model` (the types tests build and read). No cycles.
#![allow(dead_code)]

mod answer;
mod faults;
mod files;
mod html;
mod model;
mod net_fault;
mod params;
mod sending;
mod server;
mod state;
mod updates;

// Each test crate and bench uses a part of these.
#[allow(unused_imports)]
pub use model::{
    Call, ChatKind, FakeError, FileRef, Incoming, Sent, SentFile, TgChat, TgUser, Webhook, BOT_FIRST_NAME, BOT_ID,
    BOT_USERNAME, DOWNLOAD_LIMIT, MAX_CALLBACK_DATA, MAX_CAPTION_UTF16, MAX_TEXT_UTF16, PATIENCE,
};
pub use state::FakeBot;

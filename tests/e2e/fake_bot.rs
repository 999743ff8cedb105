//! Self-tests of the fake Telegram Bot API: the real teloxide client talks to
//! it, so every JSON shape it serves must deserialize into teloxide's types, and
//! every refusal must come back as the `ApiError` pincer matches on. No CLI needed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::{extract::State, http::HeaderMap, routing::post, Router};
use serde_json::{json, Value};
use teloxide::prelude::*;
use teloxide::types::{
    AllowedUpdate, BotCommand, ChatAction, ChatMemberKind, InlineKeyboardButton, InlineKeyboardMarkup,
    MessageEntityKind, MessageId, ParseMode, ReplyParameters, Seconds, ThreadId, UpdateKind,
};
use teloxide::{ApiError, RequestError};

use crate::support::fake_bot::{
    ChatKind, FakeBot, FakeError, Incoming, TgChat, TgUser, BOT_ID, BOT_USERNAME, MAX_TEXT_UTF16,
};

fn client(fake: &FakeBot) -> Bot {
    Bot::new("123:TEST").set_api_url(fake.api_url().parse().unwrap())
}

fn forum() -> TgChat {
    TgChat { id: -1_001_000_000_200, kind: ChatKind::Supergroup { forum: true }, title: "Research".into() }
}

fn team() -> TgChat {
    TgChat::supergroup(-1_001_000_000_300, "Team")
}

fn alice() -> TgUser {
    TgUser { id: 42, first_name: "Alice".into(), username: Some("alice".into()) }
}

fn bob() -> TgUser {
    TgUser::new(43, "Bob")
}

/// Everything queued so far, confirmed so the next poll starts after it.
async fn drain(bot: &Bot) -> Vec<Update> {
    let updates = bot.get_updates().timeout(1).await.unwrap();
    if let Some(last) = updates.last() {
        bot.get_updates().offset(last.id.as_offset()).timeout(0).await.unwrap();
    }
    updates
}

fn message(update: &Update) -> &Message {
    match &update.kind {
        UpdateKind::Message(m) => m,
        other => panic!("not a message: {other:?}"),
    }
}

fn api_error(result: Result<Message, RequestError>) -> ApiError {
    match result {
        Err(RequestError::Api(e)) => e,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn button(data: &str) -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Allow", data)]])
}

#[tokio::test]
async fn get_me_describes_the_bot() {
    let fake = FakeBot::start().await;
    let me = client(&fake).get_me().await.unwrap();
    assert_eq!(me.id, UserId(BOT_ID as u64));
    assert!(me.is_bot);
    assert_eq!(me.first_name, "Andy");
    assert_eq!(me.username(), BOT_USERNAME);
    assert!(me.can_read_all_group_messages);
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].method.as_str(), calls[0].ok), ("getMe", true), "teloxide's /GetMe is recorded as getMe");
}

#[tokio::test]
async fn a_topic_message_replying_to_another_arrives_with_thread_reply_and_entities() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let first = fake.say_with(Incoming { topic: Some(7), ..Incoming::new(&forum(), &bob(), "lunch at noon?") });
    let text = format!("/status@{BOT_USERNAME} 😀 ask @alice");
    let second =
        fake.say_with(Incoming { topic: Some(7), reply_to: Some(first), ..Incoming::new(&forum(), &alice(), &text) });
    assert!(second > first && first > 7, "message ids count up past the topic's: {first}, {second}");

    let updates = drain(&bot).await;
    assert_eq!(updates.len(), 2);
    assert!(updates[0].id < updates[1].id);

    let plain = message(&updates[0]);
    assert_eq!(plain.id, MessageId(first as i32));
    assert_eq!(plain.chat.id, ChatId(forum().id));
    assert!(plain.chat.is_supergroup());
    assert_eq!(plain.thread_id, Some(ThreadId(MessageId(7))));
    assert!(plain.is_topic_message);
    let root = plain.reply_to_message().expect("a topic message replies to the topic's creation");
    assert_eq!(root.id, MessageId(7));
    assert!(root.forum_topic_created().is_some(), "{root:?}");

    let reply = message(&updates[1]);
    assert_eq!(reply.from.as_ref().unwrap().id, UserId(42));
    assert_eq!(reply.text(), Some(text.as_str()));
    assert_eq!(reply.thread_id, Some(ThreadId(MessageId(7))));
    let replied = reply.reply_to_message().expect("the reply carries the replied-to message");
    assert_eq!(replied.id, MessageId(first as i32));
    assert_eq!(replied.text(), Some("lunch at noon?"));
    assert!(replied.reply_to_message().is_none(), "Telegram does not nest replies");

    let entities = reply.parse_entities().unwrap();
    let found: Vec<(&MessageEntityKind, &str)> = entities.iter().map(|e| (e.kind(), e.text())).collect();
    let command = format!("/status@{BOT_USERNAME}");
    assert_eq!(found, [(&MessageEntityKind::BotCommand, command.as_str()), (&MessageEntityKind::Mention, "@alice")]);
    assert_eq!(fake.pending_updates(), 0, "the offset confirmed them");
}

#[tokio::test]
async fn a_reply_in_a_plain_supergroup_carries_a_thread_but_is_no_topic_message() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let question = fake.say(&team(), &bob(), "lunch?");
    fake.say_with(Incoming { reply_to: Some(question), ..Incoming::new(&team(), &alice(), "yes") });
    let updates = drain(&bot).await;
    let first = message(&updates[0]);
    assert_eq!((first.thread_id, first.reply_to_message().is_none()), (None, true));
    let reply = message(&updates[1]);
    assert_eq!(reply.thread_id, Some(ThreadId(MessageId(question as i32))));
    assert!(!reply.is_topic_message);
}

#[tokio::test]
async fn get_updates_holds_the_poll_until_an_update_arrives() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let started = Instant::now();
    assert!(bot.get_updates().timeout(1).await.unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(900), "an empty poll waits its timeout out");

    let poll = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(10).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    fake.say(&team(), &alice(), "hello");
    let updates = poll.await.unwrap();
    assert_eq!(updates.len(), 1);
    assert!(started.elapsed() < Duration::from_secs(2), "the poll returned when the update came");
}

#[tokio::test]
async fn offsets_confirm_and_limit_caps_the_batch() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    for i in 0..5 {
        fake.say(&team(), &alice(), &format!("m{i}"));
    }
    let two = bot.get_updates().limit(2).await.unwrap();
    assert_eq!(two.len(), 2);
    let again = bot.get_updates().await.unwrap();
    assert_eq!(again.len(), 5, "nothing is forgotten without an offset");
    let rest = bot.get_updates().offset(two[1].id.as_offset()).await.unwrap();
    assert_eq!(rest.len(), 3);
    assert_eq!(message(&rest[0]).text(), Some("m2"));
    assert_eq!(fake.pending_updates(), 3);
}

#[tokio::test]
async fn a_second_poller_terminates_the_first() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let first = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(10).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(1).await }
    });
    let first = first.await.unwrap();
    assert!(matches!(first, Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates))), "{first:?}");
    assert!(second.await.unwrap().unwrap().is_empty());
}

#[tokio::test]
async fn a_button_press_arrives_as_a_callback_query_and_is_answered_once() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.add_chat(&team());
    let prompt = bot.send_message(ChatId(team().id), "Allow Bash?").reply_markup(button("p1:a")).await.unwrap();
    assert_eq!(prompt.reply_markup().unwrap().inline_keyboard[0][0].text, "Allow");

    let id = fake.press(&team(), &alice(), i64::from(prompt.id.0), "p1:a");
    let updates = drain(&bot).await;
    let UpdateKind::CallbackQuery(query) = &updates[0].kind else { panic!("{:?}", updates[0]) };
    assert_eq!(query.id.0, id);
    assert_eq!(query.from.id, UserId(42));
    assert_eq!(query.data.as_deref(), Some("p1:a"));
    let pressed = query.regular_message().expect("the message the button is on");
    assert_eq!((pressed.id, pressed.chat.id), (prompt.id, ChatId(team().id)));
    assert_eq!(pressed.text(), Some("Allow Bash?"));

    bot.answer_callback_query(query.id.clone()).text("ok").await.unwrap();
    let twice = bot.answer_callback_query(query.id.clone()).await;
    assert!(matches!(twice, Err(RequestError::Api(ApiError::InvalidQueryId))), "{twice:?}");
    let answers = fake.calls_to("answerCallbackQuery");
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].params["text"], "ok");
}

#[tokio::test]
async fn membership_changes_arrive_and_decide_whether_sends_work() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.set_member_status(&team(), "kicked");
    let updates = drain(&bot).await;
    let UpdateKind::MyChatMember(change) = &updates[0].kind else { panic!("{:?}", updates[0]) };
    assert_eq!(change.chat.id, ChatId(team().id));
    assert_eq!(change.new_chat_member.user.id, UserId(BOT_ID as u64));
    assert!(matches!(change.old_chat_member.kind, ChatMemberKind::Member(_)));
    assert!(matches!(change.new_chat_member.kind, ChatMemberKind::Banned(_)));
    let refused = bot.send_message(ChatId(team().id), "hello").await;
    assert_eq!(api_error(refused), ApiError::BotKickedFromSupergroup);

    fake.set_member_status(&team(), "administrator");
    let updates = drain(&bot).await;
    let UpdateKind::MyChatMember(change) = &updates[0].kind else { panic!("{:?}", updates[0]) };
    assert!(change.new_chat_member.is_administrator());
    bot.send_message(ChatId(team().id), "back").await.unwrap();
    assert_eq!(fake.sent(team().id).len(), 1);
}

#[tokio::test]
async fn blocked_chats_refuse_with_the_forbidden_errors_telegram_gives() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let private = TgChat::private(&alice());
    let group = TgChat::group(-4_000_001, "Old group");
    for chat in [&private, &group, &team()] {
        fake.add_chat(chat);
        fake.block(chat.id);
    }
    assert_eq!(api_error(bot.send_message(ChatId(private.id), "hi").await), ApiError::BotBlocked);
    assert_eq!(
        api_error(bot.send_message(ChatId(group.id), "hi").await),
        ApiError::Unknown("Forbidden: bot was kicked from the group chat".into()),
        "teloxide has no variant for Telegram's wording here"
    );
    assert_eq!(api_error(bot.send_message(ChatId(team().id), "hi").await), ApiError::BotKickedFromSupergroup);
    let typing = bot.send_chat_action(ChatId(team().id), ChatAction::Typing).await;
    assert!(matches!(typing, Err(RequestError::Api(ApiError::BotKickedFromSupergroup))), "{typing:?}");

    fake.unblock(team().id);
    bot.send_message(ChatId(team().id), "hi").await.unwrap();
    let failed: Vec<_> = fake.calls().into_iter().filter(|c| !c.ok).map(|c| c.error.unwrap()).collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
}

#[tokio::test]
async fn the_length_limit_counts_visible_utf16_units() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let chat = ChatId(team().id);

    let too_long = bot.send_message(chat, "a".repeat(MAX_TEXT_UTF16 + 1)).await;
    assert_eq!(api_error(too_long), ApiError::MessageIsTooLong);
    let emoji = bot.send_message(chat, "😀".repeat(MAX_TEXT_UTF16 / 2 + 1)).await;
    assert_eq!(api_error(emoji), ApiError::MessageIsTooLong, "an emoji is two UTF-16 units");

    // 4090 + 6 decoded entities = exactly 4096 visible; the tags and escapes do not count.
    let exact = format!("<b>{}&amp;&lt;&gt;&quot;&#33;&#x41;</b>", "x".repeat(MAX_TEXT_UTF16 - 6));
    let sent = bot.send_message(chat, exact.clone()).parse_mode(ParseMode::Html).await.unwrap();
    assert_eq!(sent.text().unwrap().encode_utf16().count(), MAX_TEXT_UTF16);
    assert!(sent.text().unwrap().ends_with("&<>\"!A"));
    let over = format!("<i>{}</i>", "y".repeat(MAX_TEXT_UTF16 + 1));
    assert_eq!(api_error(bot.send_message(chat, over).parse_mode(ParseMode::Html).await), ApiError::MessageIsTooLong);

    let trimmed = bot.send_message(chat, format!("\n\n{}\n\n", "z".repeat(MAX_TEXT_UTF16))).await.unwrap();
    assert_eq!(trimmed.text().unwrap().len(), MAX_TEXT_UTF16, "surrounding whitespace is trimmed, not counted");
    assert_eq!(api_error(bot.send_message(chat, " \n ").await), ApiError::MessageTextIsEmpty);
    assert_eq!(
        api_error(bot.send_message(chat, "<b></b>").parse_mode(ParseMode::Html).await),
        ApiError::MessageTextIsEmpty
    );

    let sent = fake.sent(team().id);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].raw_text, exact);
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
}

#[tokio::test]
async fn html_telegram_cannot_parse_is_refused() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let cases = [
        "<b>never closed",
        "<b><i>crossed</b></i>",
        "stray </b> end",
        "a < b",
        "AT&T",
        "&nbsp;is not supported",
        "line<br>break",
        "<p>paragraph</p>",
        "<span>plain span</span>",
        "<a href=\"https://x.org\">unclosed link",
        "<tg-emoji>no id</tg-emoji>",
    ];
    for html in cases {
        let result = bot.send_message(ChatId(team().id), html).parse_mode(ParseMode::Html).await;
        match result {
            Err(RequestError::Api(ApiError::CantParseEntities(why))) => {
                assert!(why.starts_with("Bad Request: can't parse entities: "), "{why}");
            }
            other => panic!("{html:?} was not refused: {other:?}"),
        }
    }
    // The same text without parse_mode is fine.
    bot.send_message(ChatId(team().id), "a < b & <br>").await.unwrap();
    assert_eq!(fake.sent(team().id).len(), 1);
}

#[tokio::test]
async fn html_becomes_visible_text_and_entities() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let html = "<b>bold</b> <STRONG><i>both</i></STRONG> <a href='https://example.com/?a=1&amp;b=2'>link</a> \
                <code>x &lt; y</code>\n<pre><code class=\"language-rust\">fn main() {}</code></pre>\n\
                <blockquote expandable>quote</blockquote> <span class=\"tg-spoiler\">s</span> 2 &gt; 1 😀<u>u</u>";
    let sent = bot.send_message(ChatId(team().id), html).parse_mode(ParseMode::Html).await.unwrap();
    assert_eq!(sent.text().unwrap(), "bold both link x < y\nfn main() {}\nquote s 2 > 1 😀u");
    let entities = sent.parse_entities().unwrap();
    let found: Vec<(MessageEntityKind, &str)> = entities.iter().map(|e| (e.kind().clone(), e.text())).collect();
    assert_eq!(
        found,
        [
            (MessageEntityKind::Bold, "bold"),
            (MessageEntityKind::Bold, "both"),
            (MessageEntityKind::Italic, "both"),
            (MessageEntityKind::TextLink { url: "https://example.com/?a=1&b=2".parse().unwrap() }, "link"),
            (MessageEntityKind::Code, "x < y"),
            (MessageEntityKind::Pre { language: Some("rust".into()) }, "fn main() {}"),
            (MessageEntityKind::ExpandableBlockquote, "quote"),
            (MessageEntityKind::Spoiler, "s"),
            (MessageEntityKind::Underline, "u"),
        ]
    );
    assert_eq!(fake.sent(team().id)[0].text, sent.text().unwrap());
}

#[tokio::test]
async fn callback_data_over_64_bytes_is_refused() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let chat = ChatId(team().id);
    let refused = bot.send_message(chat, "pick").reply_markup(button(&"d".repeat(65))).await;
    assert_eq!(api_error(refused), ApiError::ButtonDataInvalid);
    // Bytes, not characters: 33 two-byte characters are 66 bytes.
    let refused = bot.send_message(chat, "pick").reply_markup(button(&"é".repeat(33))).await;
    assert_eq!(api_error(refused), ApiError::ButtonDataInvalid);
    bot.send_message(chat, "pick").reply_markup(button(&"d".repeat(64))).await.unwrap();
    let sent = fake.sent(team().id);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].reply_markup.as_ref().unwrap()["inline_keyboard"][0][0]["callback_data"], "d".repeat(64));
}

#[tokio::test]
async fn injected_faults_answer_the_next_call_only() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.fail_next("SendMessage", FakeError::RetryAfter(3));
    fake.fail_next("sendMessage", FakeError::custom(400, "Bad Request: chat not found"));
    let first = bot.send_message(ChatId(team().id), "one").await;
    assert!(matches!(first, Err(RequestError::RetryAfter(s)) if s == Seconds::from_seconds(3)), "{first:?}");
    assert_eq!(api_error(bot.send_message(ChatId(team().id), "two").await), ApiError::ChatNotFound);
    bot.send_message(ChatId(team().id), "three").await.unwrap();
    let tries: Vec<bool> = fake.calls_to("sendMessage").iter().map(|c| c.ok).collect();
    assert_eq!(tries, [false, false, true]);
    assert_eq!(fake.calls_to("sendMessage")[0].error.as_deref(), Some("Too Many Requests: retry after 3"));
    assert_eq!(fake.sent(team().id).len(), 1);
}

#[tokio::test]
async fn edits_change_what_was_sent() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let chat = ChatId(team().id);
    let prompt = bot
        .send_message(chat, "Allow <b>Bash</b>?")
        .parse_mode(ParseMode::Html)
        .reply_markup(button("p:a"))
        .await
        .unwrap();

    let edited =
        bot.edit_message_text(chat, prompt.id, "Allowed by <i>Alice</i>").parse_mode(ParseMode::Html).await.unwrap();
    assert_eq!(edited.text(), Some("Allowed by Alice"));
    assert!(edited.edit_date().is_some());
    assert!(edited.reply_markup().is_none(), "an edit without reply_markup drops the keyboard");
    let sent = fake.sent(team().id);
    assert_eq!(sent.len(), 1, "an edit is no new message");
    assert_eq!((sent[0].text.as_str(), sent[0].raw_text.as_str()), ("Allowed by Alice", "Allowed by <i>Alice</i>"));
    assert_eq!((sent[0].reply_markup.as_ref(), sent[0].edits), (None, 1));

    let same = bot.edit_message_text(chat, prompt.id, "Allowed by <i>Alice</i>").parse_mode(ParseMode::Html).await;
    assert_eq!(api_error(same), ApiError::MessageNotModified);
    let long = bot.edit_message_text(chat, prompt.id, "x".repeat(MAX_TEXT_UTF16 + 1)).await;
    assert_eq!(api_error(long), ApiError::EditedMessageIsTooLong);
    let bad = bot.edit_message_text(chat, prompt.id, "<b>oops").parse_mode(ParseMode::Html).await;
    assert!(matches!(api_error(bad), ApiError::CantParseEntities(_)));
    let missing = bot.edit_message_text(chat, MessageId(999), "x").await;
    assert_eq!(api_error(missing), ApiError::MessageToEditNotFound);

    let with_keys = bot.edit_message_reply_markup(chat, prompt.id).reply_markup(button("p:b")).await.unwrap();
    assert_eq!(with_keys.reply_markup().unwrap().inline_keyboard.len(), 1);
    assert_eq!(fake.sent(team().id)[0].edits, 2);
    let user_message = fake.say(&team(), &alice(), "mine");
    let theirs = bot.edit_message_text(chat, MessageId(user_message as i32), "x").await;
    assert_eq!(api_error(theirs), ApiError::MessageCantBeEdited);
}

#[tokio::test]
async fn sends_into_a_topic_and_replies_come_back_as_telegram_shapes_them() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.add_chat(&forum());
    let question = fake.say_with(Incoming { topic: Some(7), ..Incoming::new(&forum(), &alice(), "q") });
    let answer = bot
        .send_message(ChatId(forum().id), "a")
        .message_thread_id(ThreadId(MessageId(7)))
        .reply_parameters(ReplyParameters::new(MessageId(question as i32)))
        .await
        .unwrap();
    assert_eq!(answer.thread_id, Some(ThreadId(MessageId(7))));
    assert!(answer.is_topic_message);
    assert_eq!(answer.reply_to_message().unwrap().id, MessageId(question as i32));
    let missing =
        bot.send_message(ChatId(forum().id), "a").reply_parameters(ReplyParameters::new(MessageId(999))).await;
    assert_eq!(api_error(missing), ApiError::MessageToReplyNotFound);
    assert_eq!(fake.sent(forum().id)[0].thread_id, Some(7));

    // A user replying to the bot's answer: the reply embeds the bot's message.
    fake.say_with(Incoming {
        topic: Some(7),
        reply_to: Some(i64::from(answer.id.0)),
        ..Incoming::new(&forum(), &bob(), "thanks")
    });
    let updates = drain(&bot).await;
    let thanks = message(updates.last().unwrap());
    assert_eq!(thanks.reply_to_message().unwrap().from.as_ref().unwrap().id, UserId(BOT_ID as u64));
}

#[tokio::test]
async fn unknown_methods_get_404_and_everything_is_recorded() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let result = bot.pin_chat_message(ChatId(team().id), MessageId(1)).await;
    assert!(
        matches!(&result, Err(RequestError::Api(ApiError::Unknown(d))) if d == "Not Found: method not found"),
        "{result:?}"
    );
    let commands = [BotCommand::new("/status", "Show the session"), BotCommand::new("new", "Start afresh")];
    bot.set_my_commands(commands).await.unwrap();
    let bad = bot.set_my_commands([BotCommand::new("Status", "Upper case")]).await;
    assert!(bad.is_err(), "Telegram wants lowercase commands");
    bot.delete_my_commands().await.unwrap();
    bot.send_chat_action(ChatId(team().id), ChatAction::Typing).await.unwrap();

    let calls = fake.calls();
    let seen: Vec<(&str, bool)> = calls.iter().map(|c| (c.method.as_str(), c.ok)).collect();
    assert_eq!(
        seen,
        [
            ("pinChatMessage", false),
            ("setMyCommands", true),
            ("setMyCommands", false),
            ("deleteMyCommands", true),
            ("sendChatAction", true),
        ]
    );
    assert_eq!(calls[1].params["commands"][0]["command"], "/status", "as teloxide's bot_commands() sends it");
    assert_eq!(calls[4].params["action"], "typing");
}

#[tokio::test]
async fn allowed_updates_stick_and_filter_what_is_delivered() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    bot.get_updates().allowed_updates([AllowedUpdate::Message]).timeout(0).await.unwrap();
    fake.add_chat(&team());
    let prompt = bot.send_message(ChatId(team().id), "pick").reply_markup(button("x")).await.unwrap();
    fake.press(&team(), &alice(), i64::from(prompt.id.0), "x");
    fake.say(&team(), &alice(), "hello");
    let updates = bot.get_updates().timeout(1).await.unwrap();
    assert_eq!(updates.len(), 1, "the press was not asked for: {updates:?}");
    assert_eq!(message(&updates[0]).text(), Some("hello"));
}

/// Records what a webhook receiver got: the secret header and the update.
type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;

async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let app = Router::new()
        .route(
            "/hook",
            post(|State(received): State<Received>, headers: HeaderMap, body: axum::body::Bytes| async move {
                let secret = headers.get("x-telegram-bot-api-secret-token").map(|v| v.to_str().unwrap().to_owned());
                received.lock().unwrap().push((secret, serde_json::from_slice(&body).unwrap()));
                "ok"
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

#[tokio::test]
async fn with_a_webhook_set_updates_are_posted_to_it() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    let (url, received) = receiver().await;
    bot.set_webhook(url.parse().unwrap()).secret_token("s3cret".to_owned()).await.unwrap();
    assert_eq!(fake.webhook().unwrap().secret_token.as_deref(), Some("s3cret"));
    let info = bot.get_webhook_info().await.unwrap();
    assert_eq!(info.url.unwrap().as_str(), url);

    let polled = bot.get_updates().await;
    assert!(
        matches!(polled, Err(RequestError::Api(ApiError::Unknown(ref d))) if d.starts_with("Conflict:")),
        "{polled:?}"
    );

    let id = fake.say(&team(), &alice(), "via webhook");
    fake.wait_for("the update was delivered", |f| f.pending_updates() == 0).await;
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.as_deref(), Some("s3cret"));
    // From text, as teloxide reads a webhook body (its Update does not deserialize from a Value).
    let update: Update = serde_json::from_str(&got[0].1.to_string()).unwrap();
    assert_eq!(message(&update).id, MessageId(id as i32));

    // The helper for tests that post by hand, and its update builder.
    let update = fake.message_update(Incoming::new(&team(), &bob(), "by hand"));
    assert_eq!(FakeBot::post_webhook(&url, None, update).await, 200);
    assert_eq!(received.lock().unwrap()[1].1["message"]["text"], "by hand");
    assert_eq!(fake.pending_updates(), 0, "a hand-made update is not queued");

    bot.delete_webhook().await.unwrap();
    assert!(bot.get_webhook_info().await.unwrap().url.is_none());
    assert!(bot.get_updates().timeout(0).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_fake_answers_malformed_requests_like_telegram_without_falling_over() {
    let fake = FakeBot::start().await;
    let base = fake.api_url();
    let http = teloxide::net::default_reqwest_settings().build().unwrap();
    let post = |path: &str, body: &'static str| {
        http.post(format!("{base}{path}")).header("content-type", "application/json").body(body).send()
    };

    let not_json = post("/bot123:TEST/sendMessage", "{not json").await.unwrap();
    assert_eq!(not_json.status().as_u16(), 400);
    let wrong_types = post("/bot123:TEST/sendMessage", r#"{"chat_id":[1],"text":{"a":1}}"#).await.unwrap();
    assert_eq!(wrong_types.status().as_u16(), 400);
    let no_chat = post("/bot123:TEST/sendMessage", r#"{"text":"x"}"#).await.unwrap();
    let body: Value = no_chat.json().await.unwrap();
    assert_eq!(body, json!({ "ok": false, "error_code": 400, "description": "Bad Request: chat_id is empty" }));
    let no_token = post("/sendMessage", "{}").await.unwrap();
    assert_eq!(no_token.status().as_u16(), 404);
    let bad_token = post("/botTEST/getMe", "{}").await.unwrap();
    assert_eq!(bad_token.status().as_u16(), 401);
    // Query-string parameters work as Telegram's do.
    let query = http.get(format!("{base}/bot123:TEST/sendMessage?chat_id=5&text=hi")).send().await.unwrap();
    assert_eq!(query.status().as_u16(), 200);
    assert_eq!(fake.sent(5)[0].text, "hi");
}

/// A plain client for what teloxide hides: statuses and bodies, without its
/// 10 s sleep on a 5xx.
fn http() -> reqwest::Client {
    teloxide::net::default_reqwest_settings().build().expect("an HTTP client")
}

/// POSTs `method` with a JSON body; returns the status and the body text.
async fn call_raw(http: &reqwest::Client, fake: &FakeBot, method: &str, body: Value) -> (u16, String) {
    let url = format!("{}/bot123:TEST/{method}", fake.api_url());
    let request = http.post(url).header("content-type", "application/json").body(body.to_string());
    let response = request.send().await.unwrap_or_else(|e| panic!("{method}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_else(|e| panic!("{method} body: {e}")))
}

/// What the fake recorded of each call of `method`: its error, `None` if it worked.
fn outcomes(fake: &FakeBot, method: &str) -> Vec<Option<String>> {
    fake.calls_to(method).into_iter().map(|c| c.error).collect()
}

fn network_error<T: std::fmt::Debug>(result: Result<T, RequestError>) -> Arc<reqwest::Error> {
    match result {
        Err(RequestError::Network(e)) => e,
        other => panic!("expected a network error, got {other:?}"),
    }
}

/// A short fault window: one call made at once lands in it even on a busy machine.
const WINDOW: Duration = Duration::from_secs(1);

/// Sleeps until a window opened before `opened` is over, however long the calls
/// in it took.
async fn outlive_window(opened: Instant) {
    tokio::time::sleep_until((opened + WINDOW + Duration::from_millis(10)).into()).await;
}

#[tokio::test]
async fn an_outage_answers_the_proxy_page_then_recovers_after_its_window() {
    let fake = FakeBot::start().await;
    let http = http();
    let hello = json!({ "chat_id": team().id, "text": "hello" });
    fake.outage(&["SendMessage"], 502, WINDOW);
    let opened = Instant::now();
    let (status, page) = call_raw(&http, &fake, "sendMessage", hello.clone()).await;
    assert_eq!(status, 502);
    assert!(page.starts_with("<html>") && page.contains("502 Bad Gateway"), "{page}");
    assert!(fake.sent(team().id).is_empty(), "a refused call sends nothing");

    outlive_window(opened).await;
    let (status, _) = call_raw(&http, &fake, "sendMessage", hello).await;
    assert_eq!(status, 200);
    assert_eq!(fake.sent(team().id).len(), 1);
    assert_eq!(outcomes(&fake, "sendMessage"), [Some("fault: 502".to_owned()), None]);
}

#[tokio::test]
async fn an_outage_of_no_named_method_hits_every_method_until_ended() {
    let fake = FakeBot::start().await;
    let http = http();
    fake.outage(&["sendMessage"], 502, Duration::from_secs(600));
    assert_eq!(call_raw(&http, &fake, "getMe", json!({})).await.0, 200, "getMe is not in that outage");

    fake.outage(&[], 503, Duration::from_secs(600));
    assert_eq!(call_raw(&http, &fake, "getUpdates", json!({ "timeout": 5 })).await.0, 503);
    assert_eq!(call_raw(&http, &fake, "getMe", json!({})).await.0, 503);
    fake.end_faults();
    assert_eq!(call_raw(&http, &fake, "getMe", json!({})).await.0, 200);
    let hello = json!({ "chat_id": team().id, "text": "hello" });
    assert_eq!(call_raw(&http, &fake, "sendMessage", hello).await.0, 200, "every outage ended");
    assert_eq!(outcomes(&fake, "getUpdates"), [Some("fault: 503".to_owned())]);
    assert_eq!(outcomes(&fake, "getMe"), [None, Some("fault: 503".to_owned()), None]);
}

/// Takes teloxide's 10 s: what pincer sees of a 5xx is this, and only this late.
#[tokio::test]
async fn teloxide_reports_a_5xx_only_after_its_delay_and_without_the_status() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.outage(&["sendMessage"], 502, Duration::from_secs(600));
    fake.fail_next("getMe", FakeError::custom(500, "Internal Server Error"));
    let started = Instant::now();
    let (page, json) = tokio::join!(bot.send_message(ChatId(team().id), "hello"), bot.get_me());
    assert!(started.elapsed() >= Duration::from_secs(10), "teloxide's DELAY_ON_SERVER_ERROR is 10 s");
    match page {
        Err(RequestError::InvalidJson { raw, .. }) => assert!(raw.contains("502 Bad Gateway"), "{raw}"),
        other => panic!("expected the proxy page as invalid JSON, got {other:?}"),
    }
    assert!(matches!(&json, Err(RequestError::Api(ApiError::Unknown(d))) if d == "Internal Server Error"), "{json:?}");
    assert!(fake.sent(team().id).is_empty());
}

#[tokio::test]
async fn a_dropped_connection_is_a_network_error_and_sends_nothing() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    // A pooled connection first: a request lost on a reused connection must not be resent.
    bot.get_me().await.unwrap();
    fake.drop_next("sendMessage");
    let lost = network_error(bot.send_message(ChatId(team().id), "one").await);
    assert!(!lost.is_timeout(), "closed, not timed out: {lost:?}");
    assert!(fake.sent(team().id).is_empty(), "nothing was sent, nor resent");
    bot.send_message(ChatId(team().id), "two").await.unwrap();
    let sent = fake.sent(team().id);
    assert_eq!(sent.iter().map(|s| s.text.as_str()).collect::<Vec<_>>(), ["two"]);
    assert_eq!(outcomes(&fake, "sendMessage"), [Some("fault: connection dropped".to_owned()), None]);
}

#[tokio::test]
async fn connections_drop_for_a_window_then_calls_work_again() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.drop_connections(&[], WINDOW);
    let opened = Instant::now();
    network_error(bot.get_updates().timeout(5).await);
    outlive_window(opened).await;
    assert!(bot.get_updates().timeout(0).await.unwrap().is_empty());
    assert_eq!(outcomes(&fake, "getUpdates"), [Some("fault: connection dropped".to_owned()), None]);
}

#[tokio::test]
async fn a_hung_call_is_never_answered_and_has_no_effect_until_released() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.hang_next("sendMessage");
    let mut hung = tokio::spawn({
        let bot = bot.clone();
        async move { bot.send_message(ChatId(team().id), "one").await }
    });
    fake.wait_for("the send to come in", |f| !f.calls_to("sendMessage").is_empty()).await;
    let waited = tokio::time::timeout(Duration::from_secs(1), &mut hung).await;
    assert!(waited.is_err(), "a hung call is not answered: {waited:?}");
    bot.get_me().await.expect("other calls are answered meanwhile");
    assert!(fake.sent(team().id).is_empty(), "a hung call has no effect");
    assert_eq!(outcomes(&fake, "sendMessage"), [Some("fault: hung".to_owned())]);

    fake.release_hangs();
    let closed = network_error(hung.await.unwrap());
    assert!(!closed.is_timeout(), "released by the fake, not by the client's timeout: {closed:?}");
    bot.send_message(ChatId(team().id), "two").await.unwrap();
    assert_eq!(fake.sent(team().id).iter().map(|s| s.text.as_str()).collect::<Vec<_>>(), ["two"]);
}

#[tokio::test]
async fn dropping_the_fake_ends_calls_hung_by_a_window() {
    let fake = FakeBot::start().await;
    let bot = client(&fake);
    fake.hang_calls(&[], Duration::from_secs(600));
    let hung = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_me().await }
    });
    fake.wait_for("getMe to come in", |f| !f.calls_to("getMe").is_empty()).await;
    drop(fake);
    let closed = network_error(hung.await.unwrap());
    assert!(!closed.is_timeout(), "ended by the fake going away, not by the client's timeout: {closed:?}");
}

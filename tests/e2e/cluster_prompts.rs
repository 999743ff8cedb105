//! Only the lease holder edits prompts (issue 45): a Telegram gateway that
//! hands its lease over while one of its approval prompts is open (`pincer
//! drain`: the node stays up) leaves that prompt's message alone; the next
//! gateway shows the request and settles it once. Three real nodes, one
//! PostgreSQL, the real CLI, the fake API and the fake Bot API.

use sqlx::PgConnection;

use crate::cluster::{alice, team, team_apart_from_its_gateway_among};
use crate::support::cluster::{holder, nodes};
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::{FakeBot, Sent};
use crate::support::harness::pincer_command;
use crate::support::postgres;

/// The Bot API's lease of the harness's bot token.
const GATEWAY: &str = "gw:telegram:123456";

/// The approval prompts (messages with buttons, or edited from them) in the team chat.
fn prompts(bot: &FakeBot) -> Vec<Sent> {
    bot.sent(team().id).into_iter().filter(|m| m.text.contains("touch approved.txt")).collect()
}

/// The edits of message `id` in the team chat, as the Bot API got them.
fn edits_of(bot: &FakeBot, id: i64) -> Vec<String> {
    let edits = bot.calls_to("editMessageText").into_iter();
    let of = edits
        .filter(|c| c.params["chat_id"].as_i64() == Some(team().id) && c.params["message_id"].as_i64() == Some(id));
    of.map(|c| c.params["text"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Replies in the team chat starting with `prefix` and holding `word`, once there is one.
async fn replies(bot: &FakeBot, prefix: &str, word: &str) -> usize {
    let count = |bot: &FakeBot| {
        bot.sent(team().id).iter().filter(|s| s.text.starts_with(prefix) && s.text.contains(word)).count()
    };
    bot.wait_for(word, |bot| count(bot) > 0).await;
    count(bot)
}

async fn no_request_left(db: &mut PgConnection) {
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM approvals").fetch_one(db).await.unwrap();
    assert_eq!(left, 0, "the answered request's row is gone");
}

#[tokio::test]
async fn a_gateway_that_hands_over_its_lease_leaves_its_open_prompt_to_the_next_which_settles_it_once() {
    let script = fake_api::scripted(vec![("TOUCH", Reply::bash("touch approved.txt && echo ran-here", "make a file"))]);
    let api = FakeApi::start(script).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let (nodes, mut db, owner, gateway) = team_apart_from_its_gateway_among(nodes(&api, &bot, &url), &url).await;

    bot.say(&team(), &alice(), "TOUCH please");
    bot.wait_for("the prompt, shown by the gateway", |b| !prompts(b).is_empty()).await;
    let first = prompts(&bot).remove(0);
    // The gateway drains while the prompt is open: alive, it no longer holds the lease.
    let old = nodes.iter().find(|n| n.id == gateway).unwrap();
    let out = pincer_command(old.sandbox.root(), &old.sandbox.write_config(), &["drain"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    bot.wait_for("the prompt, shown again by the next gateway", |b| prompts(b).len() >= 2).await;
    let next = holder(&mut db, GATEWAY).await.expect("another node holds the gateway");
    assert_ne!(next, gateway);

    let second = prompts(&bot).remove(1);
    let allow = second.button_data().into_iter().find(|d| d.ends_with(":a")).unwrap();
    bot.press(&team(), &alice(), second.message_id, &allow);
    let ran = replies(&bot, "AFTER_TOOL:", "ran-here").await;
    let owner_node = nodes.iter().find(|n| n.id == owner).unwrap();
    assert!(owner_node.sandbox.group_dir("team").join("approved.txt").exists(), "it ran on the owner");
    bot.wait_for("the next gateway's prompt shows who allowed it", |b| {
        b.sent(team().id).iter().any(|m| m.message_id == second.message_id && m.text.contains("Allowed by Alice"))
    })
    .await;
    // After a later message's answer, any edit or second run would have come.
    bot.say(&team(), &alice(), "MARKER");
    assert_eq!(replies(&bot, "ECHO:", "MARKER").await, 1);
    assert_eq!((ran, replies(&bot, "AFTER_TOOL:", "ran-here").await), (1, 1), "the tool ran once");
    no_request_left(&mut db).await;

    assert_eq!(edits_of(&bot, first.message_id), Vec::<String>::new(), "the old gateway left its prompt alone");
    let settled = edits_of(&bot, second.message_id);
    assert_eq!(settled.len(), 1, "the next gateway settled its prompt once: {settled:?}");
    assert_eq!(prompts(&bot).len(), 2, "shown once by each gateway");
}

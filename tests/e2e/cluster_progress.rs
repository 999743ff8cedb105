//! Live progress in a cluster (issue 45): a group that runs on one node and
//! whose chat is served by another (Telegram's gateway) shows its slow turn
//! as a group on one machine does: the gateway posts the status message,
//! with its Stop button, and "typing…", from the activity the owner mirrors
//! through the store; a press of Stop on the gateway interrupts the turn on
//! the owner.

use std::time::Duration;

use pincer::channel::telegram::STOP_BUTTON_DATA;

use crate::cluster::{alice, team, team_apart_from_its_gateway_among};
use crate::progress::answer_to;
use crate::support::cluster::{holder, nodes};
use crate::support::fake_api::{self, FakeApi, Reply};
use crate::support::fake_bot::FakeBot;
use crate::support::harness::PATIENCE;
use crate::support::postgres;

#[tokio::test]
async fn a_slow_turn_on_a_node_that_is_not_the_gateway_shows_its_status_and_stop_button_there() {
    let script = fake_api::scripted(vec![("SLOWREPLY", Reply::slow(Duration::from_secs(60), Reply::text("too late")))]);
    let api = FakeApi::start(script).await;
    let bot = FakeBot::start().await;
    let url = postgres::server().fresh_database();
    let mut nodes = nodes(&api, &bot, &url);
    for node in &mut nodes {
        node.sandbox.config.progress.after = Duration::from_secs(1);
    }
    let (_nodes, mut db, owner, gateway) = team_apart_from_its_gateway_among(nodes, &url).await;

    bot.say(&team(), &alice(), "SLOWREPLY please");
    let with_stop =
        |b: &FakeBot| b.sent(team().id).into_iter().find(|m| m.button_data() == [STOP_BUTTON_DATA] && !m.deleted);
    bot.wait_for("the status message with its Stop button", |b| with_stop(b).is_some()).await;
    assert_eq!(holder(&mut db, "team").await.as_deref(), Some(owner.as_str()), "the turn runs on {owner}");
    assert_eq!(holder(&mut db, "gw:telegram:123456").await.as_deref(), Some(gateway.as_str()));
    let status = with_stop(&bot).unwrap();
    assert!(status.text.starts_with("Working"), "{}", status.text);
    let typing = bot.calls_to("sendChatAction");
    assert!(typing.iter().any(|c| c.params["chat_id"].as_i64() == Some(team().id)), "typing… shown: {typing:?}");

    // Pressed once the turn is at the model (as a person would, seconds in).
    api.wait_for_main_requests(1, PATIENCE).await;
    let pressed = bot.press(&team(), &alice(), status.message_id, STOP_BUTTON_DATA);
    assert_eq!(answer_to(&bot, &pressed).await, "Stopping the agent.");
    bot.wait_for("the turn ends interrupted", |b| b.sent(team().id).iter().any(|s| s.text.starts_with("⚠️"))).await;
    bot.wait_for("the status message goes with its turn", |b| with_stop(b).is_none()).await;
    let texts: Vec<String> = bot.sent(team().id).into_iter().map(|s| s.text).collect();
    assert!(!texts.iter().any(|t| t.contains("too late")), "{texts:?}");
}

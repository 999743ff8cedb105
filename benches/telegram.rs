//! Telegram costs: rendering a reply (Markdown → Telegram HTML, split to the
//! 4096-unit limit), and a whole chat round trip through the daemon.
//!
//! - **Render:** `format::render` on generated replies of growing size, with
//!   headings, lists, inline code and fenced code blocks (the split must not
//!   break those). Reported per call, with the number of messages produced.
//! - **Round trip:** the daemon as `main` runs it (`app::run`), pincer long
//!   polling the fake Bot API from `tests/support`, the real CLI against the fake
//!   Messages API (which answers at once). Measured from a message being queued
//!   at the fake Bot API to pincer's `sendMessage` reaching it; the first
//!   message starts the CLI and is not counted. It is a private chat, the
//!   messages are 1.1 s apart and there are at most 19 of them, so teloxide's
//!   `Throttle` never holds a reply back (its defaults: one message a second per
//!   chat, 20 a minute per chat, 10 a minute per supergroup): what is measured is
//!   pincer, teloxide and the CLI, not the limiter.
//! - **Result → delivered:** from the result being stored (`results.at_us`) to
//!   the fake Bot API answering the `sendMessage` that carried it, per round
//!   trip: what a reply costs between the CLI's answer and the chat. Measured
//!   the same way on any pincer (it needs only the store's result times and the
//!   fake's call times), so it compares the in-memory path with the outbox.
//!
//! Run (N defaults to 15 round trips, 19 at most):
//!
//! ```text
//! cargo run -- setup && cargo bench --bench telegram
//! PINCER_BENCH_MESSAGES=19 cargo bench --bench telegram
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use pincer::channel::telegram::format;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use support::bench::{agent_reply, print_row, result_to_delivered, WallClock};
use support::fake_api::{echo, FakeApi};
use support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use support::harness::Sandbox;

const MESSAGES_ENV: &str = "PINCER_BENCH_MESSAGES";
/// Just over the per-chat limit of one message a second.
const SPACING: Duration = Duration::from_millis(1100);

fn main() {
    let n = std::env::var(MESSAGES_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    assert!((1..=19).contains(&n), "{MESSAGES_ENV}: 1 to 19 round trips (more would hit the 20-a-minute limit)");
    bench_render();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(bench_round_trip(n));
}

fn bench_render() {
    println!("render (Markdown → Telegram HTML, split at 4096 UTF-16 units)");
    println!("| reply size | messages | per call |");
    println!("| --- | --- | --- |");
    for kib in [1, 16, 256] {
        let text = agent_reply(kib);
        let rounds = (2048 / kib).max(8);
        let chunks = format::render(&text).len();
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(format::render(std::hint::black_box(&text)));
        }
        let per_call = start.elapsed() / rounds as u32;
        println!("| {kib} KiB | {chunks} | {per_call:.1?} |");
    }
}

async fn bench_round_trip(n: usize) {
    let api = FakeApi::start(echo()).await;
    let bot = FakeBot::start().await;
    let mut sandbox = Sandbox::new(&api);
    sandbox.use_telegram(&bot);
    let user = TgUser { id: 7, first_name: "Bench".into(), username: None };
    let chat = TgChat { id: user.id, kind: ChatKind::Private, title: user.first_name.clone() };
    let target = ChatAddress::telegram(chat.id, None);
    let settings = GroupSettings { chat: Some(target), requires_trigger: false, ..GroupSettings::default() };
    sandbox.add_group_with("bench", settings).await;
    let daemon = sandbox.spawn_daemon();
    let clock = WallClock::now();

    bot.say(&chat, &user, "warm-up");
    bot.wait_sent(chat.id, 1).await;
    let mut samples: Vec<Duration> = Vec::with_capacity(n);
    for i in 1..=n {
        tokio::time::sleep(SPACING).await;
        let start = Instant::now();
        bot.say(&chat, &user, &format!("message {i}"));
        bot.wait_sent(chat.id, i + 1).await;
        samples.push(start.elapsed());
    }
    daemon.stop().await;
    let sent = bot.calls_to("sendMessage").into_iter().filter(|c| c.ok).map(|c| c.at).collect::<Vec<_>>();
    let delivered = result_to_delivered(&sandbox.store().await, "bench", &sent, clock).await;
    print_row(&format!("chat round trip (fake Bot API → pincer → real CLI → sendMessage), {n} messages"), samples);
    print_row(&format!("result → delivered (result stored → sendMessage answered), {n} replies"), delivered);
}

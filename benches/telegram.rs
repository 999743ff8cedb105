//! Telegram costs: rendering a reply (Markdown → Telegram HTML, split to the
//! 4096-unit limit), and a whole chat round trip through the daemon.
//!
//! - **Render:** `format::render` on generated replies of growing size, with
//!   headings, lists, inline code and fenced code blocks (the split must not
//!   break those). Reported per call, with the number of messages produced.
//! - **Round trip:** the daemon as `main` runs it (`app::run`), teloxide long
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

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pincer::channel::telegram::format;
use pincer::domain::ChatAddress;
use pincer::domain::GroupName;
use pincer::store::{GroupSettings, HistoryEntry};

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

/// A reply of about `kib` KiB, shaped like what an agent writes.
fn reply(kib: usize) -> String {
    let block = "## Findings\n\nThe **build** failed in `src/app.rs` because of *one* missing import:\n\n\
                 - first point, with a [link](https://example.com)\n- second point\n\n\
                 ```rust\nfn main() {\n    println!(\"hello <world> & friends\");\n}\n```\n\n";
    block.repeat((kib * 1024).div_ceil(block.len()))
}

fn bench_render() {
    println!("render (Markdown → Telegram HTML, split at 4096 UTF-16 units)");
    println!("| reply size | messages | per call |");
    println!("| --- | --- | --- |");
    for kib in [1, 16, 256] {
        let text = reply(kib);
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
    // Pairs a wall-clock time with an Instant, to compare the fake's call times with the store's.
    let wall_clock = (SystemTime::now(), Instant::now());

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
    let delivered = result_to_delivered(&sandbox, &bot, wall_clock).await;
    print_row(&format!("chat round trip (fake Bot API → pincer → real CLI → sendMessage), {n} messages"), samples);
    print_row(&format!("result → delivered (result stored → sendMessage answered), {n} replies"), delivered);
}

/// Per reply after the warm-up: the fake's answer to its `sendMessage`, minus
/// the time its result was stored.
async fn result_to_delivered(sandbox: &Sandbox, bot: &FakeBot, wall_clock: (SystemTime, Instant)) -> Vec<Duration> {
    let store = sandbox.store().await;
    let group: GroupName = "bench".parse().expect("a group name");
    let results: Vec<i64> = store
        .history(&group, 1000)
        .await
        .expect("the history")
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { at_us, .. } => Some(*at_us),
            _ => None,
        })
        .collect();
    let sends: Vec<Instant> = bot.calls_to("sendMessage").into_iter().filter(|c| c.ok).map(|c| c.at).collect();
    assert_eq!(results.len(), sends.len(), "one reply per result");
    let us = |at: Instant| {
        let wall = wall_clock.0 + at.duration_since(wall_clock.1);
        wall.duration_since(UNIX_EPOCH).expect("after 1970").as_micros() as i64
    };
    results
        .iter()
        .zip(&sends)
        .skip(1)
        .map(|(stored, sent)| Duration::from_micros((us(*sent) - stored).max(0) as u64))
        .collect()
}

fn print_row(title: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let n = samples.len();
    let at = |p: f64| samples[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    println!("\n{title}");
    println!("| median | p95 | max |");
    println!("| --- | --- | --- |");
    println!("| {:.1?} | {:.1?} | {:.1?} |", at(0.5), at(0.95), samples[n - 1]);
    println!(
        "samples_ms {}",
        samples.iter().map(|d| format!("{:.2}", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>().join(" ")
    );
}

//! WhatsApp costs: rendering a reply (Markdown → WhatsApp markup, split at
//! 4000 characters), and a whole chat round trip through the daemon.
//!
//! - **Render:** `whatsapp::format::render` on generated replies of growing
//!   size (headings, lists, inline code, fenced code blocks). Per call, with
//!   the number of messages produced.
//! - **Round trip:** the daemon as `main` runs it (`app::run_with`, which
//!   `app::run` calls with the linked device), the adapter fed the crate's
//!   real message events through the tests' fake client (no WhatsApp server is
//!   reachable here), the real CLI against the fake Messages API (which answers
//!   at once). Measured from the event being handed to the adapter to the fake
//!   client taking pincer's reply; the first message starts the CLI and is not
//!   counted. Also **result → delivered**: from the result being stored to the
//!   fake taking the message that carries it.
//!
//! Run (N defaults to 40 round trips):
//!
//! ```text
//! cargo run -- setup && cargo bench --bench whatsapp
//! PINCER_BENCH_MESSAGES=100 cargo bench --bench whatsapp
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use pincer::channel::whatsapp::format;
use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use support::bench::{agent_reply, print_row, result_to_delivered, WallClock};
use support::fake_api::{echo, FakeApi};
use support::fake_wa::{FakeWa, Person};
use support::harness::Sandbox;

const MESSAGES_ENV: &str = "PINCER_BENCH_MESSAGES";
const GROUP: &str = "120363012345678901@g.us";
/// A pause between messages, so each is its own turn.
const SPACING: Duration = Duration::from_millis(100);

fn main() {
    let n = std::env::var(MESSAGES_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    assert!(n >= 1, "{MESSAGES_ENV}: at least one round trip");
    bench_render();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(bench_round_trip(n));
}

fn bench_render() {
    println!("render (Markdown → WhatsApp markup, split at 4000 characters)");
    println!("| reply size | messages | per call |");
    println!("| --- | --- | --- |");
    for kib in [1, 16, 256] {
        let text = agent_reply(kib);
        let rounds = (2048 / kib).max(8);
        let parts = format::render(&text).len();
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(format::render(std::hint::black_box(&text)));
        }
        let per_call = start.elapsed() / rounds as u32;
        println!("| {kib} KiB | {parts} | {per_call:.1?} |");
    }
}

async fn bench_round_trip(n: usize) {
    let api = FakeApi::start(echo()).await;
    let wa = FakeWa::new();
    let sandbox = Sandbox::new(&api);
    let settings = GroupSettings {
        chat: Some(ChatAddress::whatsapp_group(GROUP).expect("a group JID")),
        requires_trigger: false,
        ..GroupSettings::default()
    };
    sandbox.add_group_with("bench", settings).await;
    let daemon = sandbox.spawn_daemon_with_whatsapp(&wa);
    let clock = WallClock::now();
    let alice = Person { name: "Alice", number: "4915100000001", lid: None };

    wa.say(GROUP, &alice, "warm-up");
    wa.wait_sent(GROUP, 1).await;
    let mut samples = Vec::with_capacity(n);
    for i in 1..=n {
        tokio::time::sleep(SPACING).await;
        let start = Instant::now();
        wa.say(GROUP, &alice, &format!("message {i}"));
        wa.wait_sent(GROUP, i + 1).await;
        samples.push(start.elapsed());
    }
    daemon.stop().await;
    let sent = wa.sent(GROUP).into_iter().map(|s| s.at).collect::<Vec<_>>();
    let delivered = result_to_delivered(&sandbox.store().await, "bench", &sent, clock).await;
    print_row(&format!("chat round trip (message event → pincer → real CLI → reply sent), {n} messages"), samples);
    print_row(&format!("result → delivered (result stored → reply sent), {n} replies"), delivered);
}

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

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pincer::channel::whatsapp::format;
use pincer::domain::{ChatAddress, GroupName};
use pincer::store::{GroupSettings, HistoryEntry};

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

/// A reply of about `kib` KiB, shaped like what an agent writes.
fn reply(kib: usize) -> String {
    let block = "## Findings\n\nThe **build** failed in `src/app.rs` because of *one* missing import:\n\n\
                 - first point, with a [link](https://example.com)\n- second point\n\n\
                 ```rust\nfn main() {\n    println!(\"hello <world> & friends\");\n}\n```\n\n";
    block.repeat((kib * 1024).div_ceil(block.len()))
}

fn bench_render() {
    println!("render (Markdown → WhatsApp markup, split at 4000 characters)");
    println!("| reply size | messages | per call |");
    println!("| --- | --- | --- |");
    for kib in [1, 16, 256] {
        let text = reply(kib);
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
    let wall_clock = (SystemTime::now(), Instant::now());
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
    let delivered = result_to_delivered(&sandbox, &wa, wall_clock).await;
    print_row(&format!("chat round trip (message event → pincer → real CLI → reply sent), {n} messages"), samples);
    print_row(&format!("result → delivered (result stored → reply sent), {n} replies"), delivered);
}

/// Per reply after the warm-up: when the fake took it, minus when its result was stored.
async fn result_to_delivered(sandbox: &Sandbox, wa: &FakeWa, wall_clock: (SystemTime, Instant)) -> Vec<Duration> {
    let store = sandbox.store().await;
    let group: GroupName = "bench".parse().expect("a group name");
    let results: Vec<i64> = store
        .history(&group, 10_000)
        .await
        .expect("the history")
        .iter()
        .filter_map(|e| match e {
            HistoryEntry::Result { at_us, .. } => Some(*at_us),
            _ => None,
        })
        .collect();
    let sends: Vec<Instant> = wa.sent(GROUP).into_iter().map(|s| s.at).collect();
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
    println!("| median | p95 | p99 | max |");
    println!("| --- | --- | --- | --- |");
    println!("| {:.1?} | {:.1?} | {:.1?} | {:.1?} |", at(0.5), at(0.95), at(0.99), samples[n - 1]);
}

//! What serving `/metrics` costs a chat: two `pincer run` binaries side by
//! side, each with one private Telegram chat (a fake Bot API each) and the
//! real CLI against one fake Messages API. Side "on" serves `[http]` and is
//! scraped every second (Prometheus scrapes every 15 s to 1 m; this is the
//! worst case); side "off" serves no endpoint. The counters are bumped on
//! both (they are always on); what differs is the endpoint and its scrapes,
//! each reading the outbox backlog and the groups from the store.
//!
//! Measured per message, from the message queued at the fake Bot API to the
//! reply's `sendMessage` reaching it, interleaved: one message to each side
//! per round, the order alternating. Each chat gets a message at most every
//! 3.1 s, under Telegram's limits for a private chat (teloxide's `Throttle`
//! never holds a reply back), so a round takes about that long.
//!
//! ```text
//! cargo run -- setup && cargo bench --bench metrics            # 40 rounds
//! PINCER_BENCH_MESSAGES=60 cargo bench --bench metrics
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use pincer::domain::ChatAddress;
use pincer::store::GroupSettings;

use support::fake_api::{echo, FakeApi};
use support::fake_bot::{ChatKind, FakeBot, TgChat, TgUser};
use support::harness::{spawn_pincer_run, Sandbox};
use support::pipe::{ms, paired_median_ms, paired_percentile_ms, percentile};

const MESSAGES_ENV: &str = "PINCER_BENCH_MESSAGES";
/// The least time between two messages to one chat: under 20 a minute.
const PER_CHAT: Duration = Duration::from_millis(3100);
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

fn main() {
    let n = std::env::var(MESSAGES_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    assert!(n >= 2, "{MESSAGES_ENV}: at least 2 rounds");
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(bench(n));
}

/// One side: its daemon, its fake Bot API and its chat.
struct Side {
    bot: FakeBot,
    chat: TgChat,
    user: TgUser,
    _sandbox: Sandbox,
    child: tokio::process::Child,
    sent: usize,
}

impl Side {
    async fn start(api: &FakeApi, id: i64, name: &str, listen: Option<std::net::SocketAddr>) -> Side {
        let bot = FakeBot::start().await;
        let mut sandbox = Sandbox::new(api);
        sandbox.use_telegram(&bot);
        sandbox.config.http.listen = listen;
        let user = TgUser { id, first_name: name.into(), username: None };
        let chat = TgChat { id, kind: ChatKind::Private, title: name.into() };
        let target = ChatAddress::telegram(id, None);
        let settings = GroupSettings { chat: Some(target), requires_trigger: false, ..GroupSettings::default() };
        sandbox.add_group_with(name, settings).await;
        let config = sandbox.write_config();
        let child = spawn_pincer_run(sandbox.root(), &["--config".as_ref(), config.as_os_str()], &[]).await;
        Side { bot, chat, user, _sandbox: sandbox, child, sent: 0 }
    }

    /// Message queued at the Bot API → its reply's `sendMessage` there.
    async fn round_trip(&mut self, text: &str) -> Duration {
        let start = Instant::now();
        self.bot.say(&self.chat, &self.user, text);
        self.sent += 1;
        self.bot.wait_sent(self.chat.id, self.sent).await;
        start.elapsed()
    }
}

async fn bench(n: usize) {
    let api = FakeApi::start(echo()).await;
    let at = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut sides = [Side::start(&api, 7, "on", Some(at)).await, Side::start(&api, 8, "off", None).await];
    for side in &mut sides {
        side.round_trip("warm-up").await;
    }
    let url = format!("http://{at}/metrics");
    let scraper = tokio::spawn(async move {
        let client = reqwest::Client::new();
        loop {
            let ok = client.get(&url).send().await.is_ok_and(|r| r.status().is_success());
            assert!(ok, "the endpoint answers every scrape");
            tokio::time::sleep(SCRAPE_EVERY).await;
        }
    });
    let mut samples = [Vec::with_capacity(n), Vec::with_capacity(n)];
    let mut order = [0, 1];
    for round in 0..n {
        let round_start = Instant::now();
        for &i in &order {
            samples[i].push(sides[i].round_trip(&format!("round {round}")).await);
        }
        order.reverse();
        tokio::time::sleep(PER_CHAT.saturating_sub(round_start.elapsed())).await;
    }
    scraper.abort();
    for side in &mut sides {
        let _ = side.child.start_kill();
    }
    println!(
        "metrics on vs off: {n} messages per side, interleaved, /metrics scraped every {SCRAPE_EVERY:?} on \"on\""
    );
    println!("{:<40} {:>9} {:>9}", "side (Bot API → pincer → CLI → sendMessage)", "median", "p95");
    for (name, side) in ["/metrics served and scraped", "no endpoint"].iter().zip(&samples) {
        println!("{:<40} {:>6.1} ms {:>6.1} ms", name, ms(percentile(side, 50.0)), ms(percentile(side, 95.0)));
    }
    println!(
        "on minus off, paired by round: median {:+.2} ms, p95 {:+.2} ms",
        paired_median_ms(&samples[0], &samples[1]),
        paired_percentile_ms(&samples[0], &samples[1], 95.0)
    );
}

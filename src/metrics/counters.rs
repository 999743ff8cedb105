//! What `/metrics` shows: counters and histograms in the Prometheus text
//! format (prometheus-client), bumped where things happen.
//!
//! One set per process ([`counters`]): one pincer owns a data dir and serves
//! it from one process, and the places that count (the router, a session,
//! a delivery worker) need no handle threaded through for it. Label sets are
//! bounded: group names (a few hundred at most, chosen by the operator),
//! platforms, and fixed kinds; never a message text, a chat id or a user id.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlatformLabel {
    pub platform: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TurnLabels {
    pub group: String,
    /// `ok`, or the failure's kind (`overloaded`, `usage_limit`, …).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub group: String,
    /// A session event: `crashed`, `hung`, `limit_hold`, `restarted`, ….
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub platform: &'static str,
    /// `transient` (tried again) or `rejected`, `chat_gone`, `moved`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DownloadLabels {
    pub platform: &'static str,
    /// `saved`, `too_large` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `allowed`, `refused` or `failed` (egress); `ok` or `failed` (transcriptions).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfinementLabel {
    /// `bwrap`, `docker` or `none`.
    pub confinement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why a lease was lost: `fenced` (a write found it moved on) or
    /// `lapsed` (this node's deadline passed without a renewal).
    pub reason: &'static str,
}

/// Scraped each time from the store: the outbox now.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BacklogLabels {
    pub platform: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub group: String,
    /// `input`, `output`, `cache_read`, `cache_creation`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    pub group: String,
    /// `day_usd`, `month_usd`, `day_turns`: the part of the budget.
    pub part: &'static str,
}

/// Everything `/metrics` shows.
pub struct Counters {
    registry: Registry,
    pub messages_in: Family<PlatformLabel, Counter>,
    pub turns: Family<TurnLabels, Counter>,
    pub turn_seconds: Family<GroupLabel, Histogram>,
    pub turn_cost_usd: Family<GroupLabel, Counter<f64, AtomicU64>>,
    pub api_errors: Family<KindLabel, Counter>,
    pub session_events: Family<EventLabels, Counter>,
    pub delivery_failures: Family<DeliveryLabels, Counter>,
    pub live_sessions: Gauge,
    pub slot_waits: Counter,
    pub egress_decisions: Family<OutcomeLabel, Counter>,
    pub sandbox_launches: Family<ConfinementLabel, Counter>,
    pub outbox_backlog: Family<BacklogLabels, Gauge>,
    pub outbox_oldest_seconds: Family<BacklogLabels, Gauge>,
    pub tokens: Family<TokenLabels, Counter>,
    pub budget_used: Family<BudgetLabels, Gauge<f64, AtomicU64>>,
    pub media_downloads: Family<DownloadLabels, Counter>,
    pub transcriptions: Family<OutcomeLabel, Counter>,
    pub lease_claims: Family<KindLabel, Counter>,
    pub lease_losses: Family<ReasonLabel, Counter>,
    pub lease_handoffs: Counter,
    pub leases_held: Gauge,
}

fn turn_histogram() -> Histogram {
    // 0.5 s to ~4.5 h: a quick answer to a long agentic turn.
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
}

impl Counters {
    fn new() -> Counters {
        let mut registry = Registry::with_prefix("pincer");
        let c = Counters {
            messages_in: Family::default(),
            turns: Family::default(),
            turn_seconds: Family::new_with_constructor(turn_histogram as fn() -> Histogram),
            turn_cost_usd: Family::default(),
            api_errors: Family::default(),
            session_events: Family::default(),
            delivery_failures: Family::default(),
            live_sessions: Gauge::default(),
            slot_waits: Counter::default(),
            egress_decisions: Family::default(),
            sandbox_launches: Family::default(),
            outbox_backlog: Family::default(),
            outbox_oldest_seconds: Family::default(),
            tokens: Family::default(),
            budget_used: Family::default(),
            media_downloads: Family::default(),
            transcriptions: Family::default(),
            lease_claims: Family::default(),
            lease_losses: Family::default(),
            lease_handoffs: Counter::default(),
            leases_held: Gauge::default(),
            registry: Registry::default(),
        };
        c.register_turns(&mut registry);
        c.register_work(&mut registry);
        c.register_cluster(&mut registry);
        Counters { registry, ..c }
    }

    /// What the agents did: messages in, turns, their time, cost and errors.
    fn register_turns(&self, registry: &mut Registry) {
        registry.register("messages_in", "Chat messages stored for an agent, by platform", self.messages_in.clone());
        registry.register("turns", "CLI turns ended, by group and outcome", self.turns.clone());
        registry.register(
            "turn_seconds",
            "How long a turn took, by group (the CLI's duration)",
            self.turn_seconds.clone(),
        );
        registry.register(
            "turn_cost_usd",
            "What turns cost in USD as the CLI reports it, by group",
            self.turn_cost_usd.clone(),
        );
        registry.register("api_errors", "Turns that ended in an API error, by kind", self.api_errors.clone());
        registry.register(
            "session_events",
            "Session lifecycle events (started, resumed, crashed, hung, limit_hold, …), by group",
            self.session_events.clone(),
        );
        registry.register(
            "delivery_failures",
            "Failed attempts to send to a chat, by platform and kind",
            self.delivery_failures.clone(),
        );
    }

    /// What pincer ran and sent for them: sessions, sandboxes, the outbox, budgets, media.
    fn register_work(&self, registry: &mut Registry) {
        registry.register("live_sessions", "CLI processes running now", self.live_sessions.clone());
        registry.register("slot_waits", "Times a group waited for a free CLI slot", self.slot_waits.clone());
        registry.register(
            "egress_decisions",
            "What the agents' tools asked the egress proxy for, by outcome",
            self.egress_decisions.clone(),
        );
        registry.register("sandbox_launches", "CLI processes started, by confinement", self.sandbox_launches.clone());
        registry.register("outbox_backlog", "Messages waiting in the outbox, by platform", self.outbox_backlog.clone());
        registry.register(
            "outbox_oldest_seconds",
            "Age of the oldest message waiting in the outbox, by platform",
            self.outbox_oldest_seconds.clone(),
        );
        registry.register("tokens", "Tokens turns used, by group and kind", self.tokens.clone());
        registry.register(
            "budget_used_ratio",
            "What a group with a budget used of each part of it in the current period (1 = reached)",
            self.budget_used.clone(),
        );
        registry.register(
            "media_downloads",
            "Files from the chats fetched (saved), refused for their size (too_large) or not fetched (failed), by platform",
            self.media_downloads.clone(),
        );
        registry.register(
            "transcriptions",
            "Voice notes and audio sent to the transcription engine, by outcome (ok, failed)",
            self.transcriptions.clone(),
        );
    }

    /// What this node of a cluster claimed, lost and handed off (issue 36);
    /// on one machine they stay at zero.
    fn register_cluster(&self, registry: &mut Registry) {
        registry.register(
            "lease_claims",
            "Leases this node claimed, by kind (group, gateway)",
            self.lease_claims.clone(),
        );
        registry.register(
            "lease_losses",
            "Leases this node lost without letting them go, by reason (fenced: another node took it; lapsed: \
             no renewal in time)",
            self.lease_losses.clone(),
        );
        registry.register(
            "lease_handoffs",
            "Leases this node released cleanly (idle close, hand-off, shutdown)",
            self.lease_handoffs.clone(),
        );
        registry.register("leases_held", "Leases this node holds now (groups and gateways)", self.leases_held.clone());
    }

    /// The text `/metrics` serves (OpenMetrics text, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// A turn ended: counted by outcome, its duration and cost added.
    pub fn turn(&self, group: &str, outcome: &'static str, seconds: Option<f64>, cost_usd: Option<f64>) {
        self.turns.get_or_create(&TurnLabels { group: group.to_owned(), outcome }).inc();
        let label = GroupLabel { group: group.to_owned() };
        if let Some(seconds) = seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            self.turn_seconds.get_or_create(&label).observe(seconds);
        }
        if let Some(cost) = cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
            self.turn_cost_usd.get_or_create(&label).inc_by(cost);
        }
        if outcome != "ok" && outcome != "interrupted" && outcome != "other" {
            self.api_errors.get_or_create(&KindLabel { kind: outcome }).inc();
        }
    }

    /// A turn's tokens, added to its group's.
    pub fn tokens(&self, group: &str, used: &crate::domain::Tokens) {
        for (kind, n) in [
            ("input", used.input),
            ("output", used.output),
            ("cache_read", used.cache_read),
            ("cache_creation", used.cache_creation),
        ] {
            if n > 0 {
                self.tokens.get_or_create(&TokenLabels { group: group.to_owned(), kind }).inc_by(n);
            }
        }
    }

    /// The groups' budget use as the store says now (set before each scrape):
    /// `(group, part, used / limit)`; a group or part no longer budgeted goes.
    pub fn budgets(&self, used: &[(String, &'static str, f64)]) {
        self.budget_used.clear();
        for (group, part, ratio) in used {
            self.budget_used.get_or_create(&BudgetLabels { group: group.clone(), part }).set(*ratio);
        }
    }

    /// A chat's file fetched (`saved`), refused for its size (`too_large`) or not fetched (`failed`).
    pub fn media_download(&self, platform: &'static str, outcome: &'static str) {
        self.media_downloads.get_or_create(&DownloadLabels { platform, outcome }).inc();
    }

    /// A voice note transcribed (`ok`) or not (`failed`).
    pub fn transcription(&self, outcome: &'static str) {
        self.transcriptions.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn message_in(&self, platform: &'static str) {
        self.messages_in.get_or_create(&PlatformLabel { platform }).inc();
    }

    pub fn session_event(&self, group: &str, kind: &str) {
        self.session_events.get_or_create(&EventLabels { group: group.to_owned(), kind: kind.to_owned() }).inc();
    }

    pub fn delivery_failure(&self, platform: &'static str, kind: &'static str) {
        self.delivery_failures.get_or_create(&DeliveryLabels { platform, kind }).inc();
    }

    /// This node claimed a lease: `kind` is `group` or `gateway`.
    pub fn lease_claimed(&self, kind: &'static str) {
        self.lease_claims.get_or_create(&KindLabel { kind }).inc();
    }

    /// This node lost a lease it did not let go: `reason` is `fenced` or `lapsed`.
    pub fn lease_lost(&self, reason: &'static str) {
        self.lease_losses.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// This node released a lease cleanly: another may claim it at once.
    pub fn lease_released(&self) {
        self.lease_handoffs.inc();
    }

    /// The leases this node holds now, as the store says (set before each
    /// scrape by the endpoint).
    pub fn leases_held(&self, n: usize) {
        self.leases_held.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The outbox as the store says now (set before each scrape).
    pub fn outbox(&self, platform: &str, waiting: i64, oldest_seconds: i64) {
        let label = BacklogLabels { platform: platform.to_owned() };
        self.outbox_backlog.get_or_create(&label).set(waiting);
        self.outbox_oldest_seconds.get_or_create(&label).set(oldest_seconds);
    }
}

/// An OpenMetrics scrape as the classic Prometheus text format (0.0.4),
/// which tools that predate OpenMetrics read (Debian's `promtool`): a
/// counter family's HELP and TYPE name its `_total` samples, and `# UNIT`
/// and `# EOF` go. Everything else is the same in both.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// This process's counters.
pub fn counters() -> &'static Counters {
    static COUNTERS: LazyLock<Counters> = LazyLock::new(Counters::new);
    &COUNTERS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_counts_its_outcome_duration_and_cost_and_errors_by_kind() {
        let c = Counters::new();
        c.turn("family", "ok", Some(3.0), Some(0.25));
        c.turn("family", "overloaded", Some(1.0), None);
        c.turn("family", "ok", Some(f64::NAN), Some(-1.0));
        let text = c.encode();
        assert!(text.contains("pincer_turns_total{group=\"family\",outcome=\"ok\"} 2"), "{text}");
        assert!(text.contains("pincer_turn_cost_usd_total{group=\"family\"} 0.25"), "{text}");
        assert!(text.contains("pincer_turn_seconds_count{group=\"family\"} 2"), "a NaN is not observed: {text}");
        assert!(text.contains("pincer_api_errors_total{kind=\"overloaded\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        let classic = classic_text(&text);
        assert!(classic.contains("# TYPE pincer_turns_total counter\n"), "{classic}");
        assert!(classic.contains("# HELP pincer_turns_total CLI turns"), "{classic}");
        assert!(classic.contains("# TYPE pincer_turn_seconds histogram\n"), "histograms keep their name");
        assert!(!classic.contains("# EOF"));
    }

    #[test]
    fn a_nodes_leases_are_counted_by_kind_and_reason_and_held_as_a_gauge() {
        let c = Counters::new();
        c.lease_claimed("group");
        c.lease_claimed("group");
        c.lease_claimed("gateway");
        c.lease_lost("fenced");
        c.lease_lost("lapsed");
        c.lease_lost("lapsed");
        c.lease_released();
        c.leases_held(2);
        let text = c.encode();
        assert!(text.contains("pincer_lease_claims_total{kind=\"group\"} 2\n"), "{text}");
        assert!(text.contains("pincer_lease_claims_total{kind=\"gateway\"} 1\n"), "{text}");
        assert!(text.contains("pincer_lease_losses_total{reason=\"fenced\"} 1\n"), "{text}");
        assert!(text.contains("pincer_lease_losses_total{reason=\"lapsed\"} 2\n"), "{text}");
        assert!(text.contains("pincer_lease_handoffs_total 1\n"), "{text}");
        assert!(text.contains("pincer_leases_held 2\n"), "{text}");
        let classic = classic_text(&text);
        assert!(classic.contains("# TYPE pincer_lease_handoffs_total counter\n"), "{classic}");
        assert!(classic.contains("# TYPE pincer_leases_held gauge\n"), "{classic}");
    }

    #[test]
    fn on_one_machine_the_lease_counters_read_zero() {
        let text = Counters::new().encode();
        assert!(text.contains("pincer_lease_handoffs_total 0\n"), "{text}");
        assert!(text.contains("pincer_leases_held 0\n"), "{text}");
    }
}

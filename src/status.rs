//! What the status page (`endpoint`) and `pincer status` (`cli::status`)
//! both show: the store's overview and the daemon's live view, and the one
//! screen of text made of them. A leaf: it reads the store and domain types
//! only, so neither the HTTP endpoint nor the CLI reaches the chat adapters
//! through it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use chrono::{Datelike, TimeZone};
use serde::{Deserialize, Serialize};

use crate::domain::budget::Budget;
use crate::domain::media::human_bytes;
use crate::store::{GroupView, NodeView, Overview, Owner};

/// The running daemon's part of `pincer status`: what only it knows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveView {
    pub pid: u32,
    /// When this daemon started serving (unix seconds).
    pub up_since: u64,
    /// CLI processes running now, and how many may.
    pub live_sessions: usize,
    pub max_live_sessions: usize,
    /// The groups with a session actor now.
    pub groups: Vec<LiveGroup>,
}

/// One group's session as the daemon sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveGroup {
    pub name: String,
    /// A CLI process runs for it.
    pub live: bool,
    pub in_turn: bool,
    /// Messages written and not answered yet.
    pub pending: usize,
    pub background_tasks: usize,
    /// A usage limit holds its messages until then (unix seconds).
    pub held_until: Option<u64>,
}

/// What runs now, asked each time the page is drawn (the wiring reads the
/// router; the page does not name it).
pub type LiveSource = Arc<dyn Fn() -> LiveView + Send + Sync>;

/// Both halves, as `--json` prints them.
#[derive(Debug, Serialize)]
pub struct Status {
    /// None: no daemon answered on the control socket.
    pub daemon: Option<LiveView>,
    pub store: Overview,
    /// This machine's node id, when its config makes it a cluster node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The store's half now, with today and this month in `zone`, and each
/// group's budget over the `default` one.
pub async fn overview(
    health: &crate::store::Health,
    groups: &crate::store::Groups,
    zone: &str,
    default: Budget,
    now: SystemTime,
) -> anyhow::Result<Overview> {
    let (day, month) = period_starts(now, zone)?;
    let mut overview = health.overview(crate::domain::unix_us(now), day, month).await?;
    let groups = groups.groups().await?;
    for view in &mut overview.groups {
        let own = groups.iter().find(|g| g.name.as_str() == view.name).map(|g| g.settings.budget).unwrap_or_default();
        view.budget = own.over(default);
    }
    Ok(overview)
}

pub fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Where today and this month began in `zone`, as unix µs.
fn period_starts(now: SystemTime, zone: &str) -> anyhow::Result<(i64, i64)> {
    let tz: chrono_tz::Tz = zone.parse().map_err(|e| anyhow::anyhow!("timezone {zone:?}: {e}"))?;
    let local = tz.timestamp_opt(unix(now), 0).single().context("the clock is out of range")?;
    let midnight = |y, m, d| {
        tz.with_ymd_and_hms(y, m, d, 0, 0, 0).earliest().map(|t| t.timestamp() * 1_000_000).unwrap_or_default()
    };
    Ok((midnight(local.year(), local.month(), local.day()), midnight(local.year(), local.month(), 1)))
}

/// "3 m ago", "2 h ago", "4 d ago".
fn ago(now: i64, then: i64) -> String {
    let secs = u64::try_from(now - then).unwrap_or(0);
    let rounded = match secs {
        0..60 => Duration::from_secs(secs),
        60..3600 => Duration::from_secs(secs / 60 * 60),
        3600..86400 => Duration::from_secs(secs / 3600 * 3600),
        _ => Duration::from_secs(secs / 86400 * 86400),
    };
    format!("{} ago", humantime::format_duration(rounded))
}

/// The screen.
pub fn render(status: &Status, now: i64) -> String {
    let mut out = daemon_line(status.daemon.as_ref(), now);
    store_lines(&mut out, &status.store, now);
    if let Some(nodes) = &status.store.nodes {
        out.push_str("\nnodes:\n");
        for node in nodes {
            node_line(&mut out, node, status.node.as_deref() == Some(&node.id), now);
        }
    }
    out.push_str("\ngroups:\n");
    for g in &status.store.groups {
        let live = status.daemon.as_ref().and_then(|d| d.groups.iter().find(|l| l.name == g.name));
        group_lines(&mut out, g, live, now);
    }
    out
}

fn daemon_line(daemon: Option<&LiveView>, now: i64) -> String {
    match daemon {
        Some(d) => format!(
            "daemon: running (pid {}), up since {} ({}); {} of {} CLI slots in use\n",
            d.pid,
            crate::domain::printable_time(UNIX_EPOCH + Duration::from_secs(d.up_since)),
            ago(now, i64::try_from(d.up_since).unwrap_or(0)),
            d.live_sessions,
            d.max_live_sessions
        ),
        None => "daemon: not running (start it with `pincer run`)\n".to_owned(),
    }
}

/// The platforms, what waits, and the database's size.
fn store_lines(out: &mut String, s: &Overview, now: i64) {
    for p in &s.platforms {
        let detail = p.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
        let node = p.node.as_deref().map(|n| format!(" on {n}")).unwrap_or_default();
        out.push_str(&format!("{}{node}: {} ({}){detail}\n", p.platform, p.state, ago(now, p.since)));
    }
    out.push_str(&format!("messages waiting for their session: {}\n", s.waiting_messages));
    if s.outbox.is_empty() {
        out.push_str("outbox: empty\n");
    }
    for b in &s.outbox {
        out.push_str(&format!(
            "outbox: {} waiting for {}, the oldest for {}\n",
            b.waiting,
            b.platform,
            humantime::format_duration(Duration::from_secs(u64::try_from(b.oldest_seconds).unwrap_or(0)))
        ));
    }
    out.push_str(&format!("database: {}\n", human_bytes(s.db_bytes)));
}

/// One group: its state, what waits, what it spent, when it last did anything.
fn group_lines(out: &mut String, g: &GroupView, live: Option<&LiveGroup>, now: i64) {
    let state = match (g.active, live) {
        (false, _) => format!("inactive ({})", g.inactive_reason.as_deref().unwrap_or("no reason stored")),
        (true, Some(l)) if l.held_until.is_some() => "held by a usage limit".to_owned(),
        (true, Some(l)) if l.in_turn => format!("in a turn ({} pending)", l.pending),
        (true, Some(l)) if l.live => "live, idle".to_owned(),
        (true, _) => "idle".to_owned(),
    };
    out.push_str(&format!("  {}: {state}", g.name));
    if let Some(owner) = &g.owner {
        owner_words(out, owner.as_ref());
    }
    if let Some(tasks) = live.map(|l| l.background_tasks).filter(|n| *n > 0) {
        out.push_str(&format!(", {tasks} background task(s)"));
    }
    if g.waiting_messages > 0 {
        out.push_str(&format!(", {} waiting", g.waiting_messages));
    }
    spending(out, g);
    match g.last_activity {
        Some(at) => out.push_str(&format!("; last activity {}", ago(now, at))),
        None => out.push_str("; no activity yet"),
    }
    out.push('\n');
    if let Some((at, text)) = &g.last_error {
        out.push_str(&format!("    last error {}: {text}\n", ago(now, *at)));
    }
}

/// One node of a cluster: alive, which incarnation, its load, its gateways.
fn node_line(out: &mut String, n: &NodeView, here: bool, now: i64) {
    let state = if n.alive { "alive" } else { "expired" };
    let here = if here { " (this machine)" } else { "" };
    out.push_str(&format!(
        "  {}{here}: {state}, incarnation {}, {} of {} sessions live",
        n.id, n.incarnation, n.live, n.slots
    ));
    if !n.gateways.is_empty() {
        let names: Vec<&str> = n.gateways.iter().map(|g| g.strip_prefix("gw:").unwrap_or(g)).collect();
        out.push_str(&format!(", gateway {}", names.join(", ")));
    }
    out.push_str(&format!("; renewed {}\n", ago(now, n.renewed)));
}

/// `, owner node-a (epoch 4)`, `, owner node-b (expired, epoch 2)` or `, owner none`.
fn owner_words(out: &mut String, owner: Option<&Owner>) {
    match owner {
        Some(o) if o.alive => out.push_str(&format!(", owner {} (epoch {})", o.node, o.epoch)),
        Some(o) => out.push_str(&format!(", owner {} (expired, epoch {})", o.node, o.epoch)),
        None => out.push_str(", owner none"),
    }
}

/// `; $0.31 of $5.00 today, $4.50 this month, 3 of 10 turns today`.
fn spending(out: &mut String, g: &GroupView) {
    let of = |cents: Option<u64>| cents.map(|c| format!(" of ${}.{:02}", c / 100, c % 100)).unwrap_or_default();
    out.push_str(&format!(
        "; ${:.2}{} today, ${:.2}{} this month",
        g.cost_today_usd,
        of(g.budget.daily_cents),
        g.cost_month_usd,
        of(g.budget.monthly_cents)
    ));
    if let Some(turns) = g.budget.daily_turns {
        out.push_str(&format!(", {} of {turns} turns today", g.turns_today));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Backlog, PlatformView};

    fn status(daemon: Option<LiveView>) -> Status {
        Status {
            daemon,
            store: Overview {
                db_bytes: 3 * 1024 * 1024,
                platforms: vec![
                    PlatformView {
                        platform: "telegram".into(),
                        node: None,
                        state: "connected".into(),
                        detail: None,
                        since: 1_000,
                    },
                    PlatformView {
                        platform: "whatsapp".into(),
                        node: Some("db-2".into()),
                        state: "logged_out".into(),
                        detail: None,
                        since: 1_000,
                    },
                ],
                waiting_messages: 2,
                outbox: vec![Backlog { platform: "telegram".into(), waiting: 4, oldest_seconds: 95 }],
                groups: vec![GroupView {
                    name: "family".into(),
                    active: true,
                    inactive_reason: None,
                    last_activity: Some(4_000),
                    waiting_messages: 2,
                    cost_today_usd: 0.31,
                    cost_month_usd: 4.5,
                    turns_today: 3,
                    budget: Budget { daily_cents: Some(500), monthly_cents: None, daily_turns: Some(10) },
                    last_error: Some((3_000, "API Error: 529 overloaded".into())),
                    owner: None,
                }],
                nodes: None,
            },
            node: None,
        }
    }

    #[test]
    fn the_screen_says_what_runs_what_waits_and_what_it_cost() {
        let live = LiveView {
            pid: 7,
            up_since: 500,
            live_sessions: 1,
            max_live_sessions: 4,
            groups: vec![LiveGroup {
                name: "family".into(),
                live: true,
                in_turn: true,
                pending: 1,
                background_tasks: 2,
                held_until: None,
            }],
        };
        let text = render(&status(Some(live)), 4_060);
        assert!(text.contains("daemon: running (pid 7)") && text.contains("1 of 4 CLI slots"), "{text}");
        assert!(text.contains("telegram: connected (51m ago)"), "{text}");
        assert!(text.contains("whatsapp on db-2: logged_out (51m ago)"), "each node's own device: {text}");
        assert!(text.contains("outbox: 4 waiting for telegram, the oldest for 1m 35s"), "{text}");
        assert!(text.contains("family: in a turn (1 pending), 2 background task(s), 2 waiting"), "{text}");
        assert!(
            text.contains("$0.31 of $5.00 today, $4.50 this month, 3 of 10 turns today; last activity 1m ago"),
            "{text}"
        );
        assert!(text.contains("last error 17m ago: API Error: 529 overloaded"), "{text}");
        assert!(text.contains("database: 3.0 MB"), "{text}");
    }

    fn node(id: &str, alive: bool, gateways: &[&str]) -> NodeView {
        NodeView {
            id: id.into(),
            incarnation: 3,
            alive,
            live: 2,
            slots: 8,
            gateways: gateways.iter().map(|g| (*g).to_owned()).collect(),
            started: 1_000,
            renewed: 4_058,
        }
    }

    fn owner(node: &str, epoch: i64, alive: bool) -> Owner {
        Owner { node: node.into(), incarnation: 3, epoch, since: 2_000, alive }
    }

    #[test]
    fn a_cluster_shows_its_nodes_and_each_groups_owner() {
        let mut s = status(None);
        s.node = Some("node-b".into());
        s.store.nodes = Some(vec![node("node-a", true, &["gw:telegram:77"]), node("node-b", false, &[])]);
        let mut other = s.store.groups[0].clone();
        other.name = "team".into();
        other.owner = Some(None);
        s.store.groups[0].owner = Some(Some(owner("node-a", 4, true)));
        let mut moving = other.clone();
        moving.name = "work".into();
        moving.owner = Some(Some(owner("node-b", 2, false)));
        s.store.groups.extend([other, moving]);
        let text = render(&s, 4_060);
        let nodes = text.find("\nnodes:\n").expect("a nodes section");
        assert!(nodes < text.find("\ngroups:\n").unwrap(), "{text}");
        assert!(
            text.contains(
                "  node-a: alive, incarnation 3, 2 of 8 sessions live, gateway telegram:77; renewed 2s ago\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  node-b (this machine): expired, incarnation 3, 2 of 8 sessions live; renewed"),
            "{text}"
        );
        assert!(text.contains("  family: idle, owner node-a (epoch 4), 2 waiting"), "{text}");
        assert!(text.contains("  team: idle, owner none, 2 waiting"), "{text}");
        assert!(text.contains("  work: idle, owner node-b (expired, epoch 2), 2 waiting"), "{text}");
    }

    #[test]
    fn the_json_names_nodes_and_owners_only_on_a_cluster() {
        let one = serde_json::to_value(status(None)).unwrap();
        assert!(one["store"].get("nodes").is_none(), "{one}");
        assert!(one["store"]["groups"][0].get("owner").is_none(), "{one}");
        assert!(!render(&status(None), 4_060).contains("owner"));
        let mut s = status(None);
        s.store.nodes = Some(vec![node("node-a", true, &["gw:telegram:77"])]);
        s.store.groups[0].owner = Some(Some(owner("node-a", 4, true)));
        let mut team = s.store.groups[0].clone();
        team.owner = Some(None);
        s.store.groups.push(team);
        let json = serde_json::to_value(&s).unwrap();
        let n = &json["store"]["nodes"][0];
        assert_eq!(
            (&n["id"], &n["incarnation"], &n["alive"], &n["live"], &n["slots"]),
            (&"node-a".into(), &3.into(), &true.into(), &2.into(), &8.into())
        );
        assert_eq!(n["gateways"], serde_json::json!(["gw:telegram:77"]));
        let owner = &json["store"]["groups"][0]["owner"];
        assert_eq!((&owner["node"], &owner["epoch"]), (&"node-a".into(), &4.into()), "{json}");
        assert!(json["store"]["groups"][1]["owner"].is_null(), "{json}");
    }

    #[test]
    fn without_a_daemon_it_says_how_to_start_one() {
        let text = render(&status(None), 4_060);
        assert!(text.starts_with("daemon: not running (start it with `pincer run`)"), "{text}");
        assert!(text.contains("family: idle"), "{text}");
    }

    #[test]
    fn today_and_this_month_begin_at_local_midnight() {
        // 2026-11-24 10:00 UTC is 11:00 in Berlin.
        let now = UNIX_EPOCH + Duration::from_secs(1_795_514_400);
        let (day, month) = period_starts(now, "Europe/Berlin").unwrap();
        assert_eq!(day, 1_795_474_800 * 1_000_000, "2026-11-23 23:00 UTC");
        assert_eq!(month, 1_793_487_600 * 1_000_000, "2026-10-31 23:00 UTC");
    }
}

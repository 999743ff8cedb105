//! An [`Activity`] as one cluster node writes it for another: the node that
//! runs a group mirrors what its agent is doing into the store, and the node
//! serving the group's chat shows it (issue 45: progress for every group,
//! whichever node runs it). `Instant`s mean nothing on another machine, so
//! times travel as ages at the moment of writing; the reader puts them back
//! against its own clock, off by the hand-over's delay (well under a second,
//! which a "Working… 12 s" line does not show).
//!
//! The text is read from the shared database, so it is bounded and checked
//! like anything from outside: a body over [`MAX_BODY`] or of the wrong shape
//! reads as nothing, and every string and list is cut to what a status
//! message shows.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{Activity, BackgroundWork, Step, TurnActivity, TurnDone, WorkKind, RECENT_STEPS};

/// The longest body written or read (the store's CHECK says the same).
pub const MAX_BODY: usize = 16 * 1024;
/// The longest string kept (a step's words, a task's label).
const MAX_TEXT: usize = 300;
/// The most background work kept.
const MAX_BACKGROUND: usize = 16;
/// The oldest age believed: a day (a longer one is taken as a day).
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

#[derive(Serialize, Deserialize, Default)]
struct Wire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    turn: Option<TurnWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    background: Vec<WorkWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_done: Option<DoneWire>,
}

#[derive(Serialize, Deserialize)]
struct TurnWire {
    number: u64,
    age_ms: u64,
    steps: u32,
    #[serde(default)]
    now: Option<StepWire>,
    #[serde(default)]
    recent: Vec<StepWire>,
}

#[derive(Serialize, Deserialize)]
struct StepWire {
    words: String,
    age_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct WorkWire {
    id: String,
    teammate: bool,
    label: String,
    age_ms: u64,
    #[serde(default)]
    doing: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct DoneWire {
    number: u64,
    took_ms: u64,
    steps: u32,
    #[serde(default)]
    cost_usd: Option<f64>,
    ok: bool,
}

/// `activity` as text for another node, its times as ages at `now`.
pub fn encode(activity: &Activity, now: Instant) -> String {
    let age = |at: Instant| millis(now.saturating_duration_since(at));
    let step = |s: &Step| StepWire { words: cut(&s.words), age_ms: age(s.at) };
    let wire = Wire {
        turn: activity.turn.as_ref().map(|t| TurnWire {
            number: t.number,
            age_ms: age(t.started),
            steps: t.steps,
            now: t.now.as_ref().map(step),
            recent: t.recent.iter().rev().take(RECENT_STEPS).rev().map(step).collect(),
        }),
        background: activity
            .background
            .iter()
            .take(MAX_BACKGROUND)
            .map(|w| WorkWire {
                id: cut(&w.id),
                teammate: w.kind == WorkKind::Teammate,
                label: cut(&w.label),
                age_ms: age(w.started),
                doing: w.doing.as_deref().map(cut),
            })
            .collect(),
        last_done: activity.last_done.as_ref().map(|d| DoneWire {
            number: d.number,
            took_ms: millis(d.took),
            steps: d.steps,
            cost_usd: d.cost_usd,
            ok: d.ok,
        }),
    };
    fitted(wire)
}

/// The text of `wire`, dropping the least telling parts (the oldest
/// background work, then the recent steps) until it fits [`MAX_BODY`].
fn fitted(mut wire: Wire) -> String {
    loop {
        // Plain data of strings and numbers: serializing it cannot fail.
        let body = serde_json::to_string(&wire).unwrap_or_default();
        if body.len() <= MAX_BODY {
            return body;
        }
        if !wire.background.is_empty() {
            wire.background.remove(0);
        } else if let Some(turn) = wire.turn.as_mut().filter(|t| !t.recent.is_empty()) {
            turn.recent.remove(0);
        } else {
            return "{}".to_owned();
        }
    }
}

/// What another node wrote, with its ages taken back from `now`; `None` for
/// a body too long or not of this shape.
pub fn decode(body: &str, now: Instant) -> Option<Activity> {
    if body.len() > MAX_BODY {
        return None;
    }
    let wire: Wire = serde_json::from_str(body).ok()?;
    let at = |age_ms: u64| now.checked_sub(Duration::from_millis(age_ms).min(MAX_AGE)).unwrap_or(now);
    let step = |s: StepWire| Step { words: cut(&s.words), at: at(s.age_ms) };
    let turn = wire.turn.map(|t| {
        let skip = t.recent.len().saturating_sub(RECENT_STEPS);
        TurnActivity {
            number: t.number,
            started: at(t.age_ms),
            steps: t.steps,
            now: t.now.map(step),
            recent: t.recent.into_iter().skip(skip).map(step).collect(),
        }
    });
    let background = wire
        .background
        .into_iter()
        .take(MAX_BACKGROUND)
        .map(|w| BackgroundWork {
            id: cut(&w.id),
            kind: if w.teammate { WorkKind::Teammate } else { WorkKind::Task },
            label: cut(&w.label),
            started: at(w.age_ms),
            doing: w.doing.as_deref().map(cut),
        })
        .collect();
    let last_done = wire.last_done.map(|d| TurnDone {
        number: d.number,
        took: Duration::from_millis(d.took_ms).min(MAX_AGE),
        steps: d.steps,
        cost_usd: d.cost_usd.filter(|c| c.is_finite() && *c >= 0.0),
        ok: d.ok,
    });
    Some(Activity { turn, background, last_done })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// At most [`MAX_TEXT`] characters, without control characters.
fn cut(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(MAX_TEXT).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(now: Instant) -> Activity {
        let step = |words: &str, ago: u64| Step { words: words.into(), at: now - Duration::from_secs(ago) };
        Activity {
            turn: Some(TurnActivity {
                number: 7,
                started: now - Duration::from_secs(12),
                steps: 3,
                now: Some(step("Running `make`", 2)),
                recent: vec![step("Reading notes.md", 9), step("Running `make`", 2)],
            }),
            background: vec![BackgroundWork {
                id: "bash_1".into(),
                kind: WorkKind::Teammate,
                label: "researcher".into(),
                started: now - Duration::from_secs(30),
                doing: Some("Searching the web".into()),
            }],
            last_done: Some(TurnDone {
                number: 6,
                took: Duration::from_secs(4),
                steps: 1,
                cost_usd: Some(0.25),
                ok: true,
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_activity_read_back_later_keeps_its_ages_against_the_readers_clock() {
        let written = Instant::now();
        let activity = busy(written);
        let body = encode(&activity, written);
        // Read on the same clock: the same activity.
        assert_eq!(decode(&body, written), Some(activity.clone()));
        // Read 1 s later (the hand-over's delay, on another node's clock): the
        // ages as written, against the reader's now (1 s short, as said above).
        tokio::time::advance(Duration::from_secs(1)).await;
        let read = decode(&body, Instant::now()).unwrap();
        let turn = read.turn.unwrap();
        assert_eq!(Instant::now().duration_since(turn.started), Duration::from_secs(12));
        assert_eq!(Instant::now().duration_since(turn.now.unwrap().at), Duration::from_secs(2));
        assert_eq!(turn.recent.len(), 2);
        assert_eq!(read.background[0].kind, WorkKind::Teammate);
        assert_eq!(read.last_done.unwrap().took, Duration::from_secs(4), "a duration is no age");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_always_fits_what_the_store_takes() {
        let now = Instant::now();
        let mut activity = busy(now);
        let work = activity.background[0].clone();
        // 40 tasks of 300-character labels, cut to 16, are still more than fits: the oldest go.
        activity.background = (0..40)
            .map(|i| BackgroundWork {
                id: format!("t{i}"), label: format!("{i}{}", "🦀".repeat(400)), ..work.clone()
            })
            .collect();
        let body = encode(&activity, now);
        assert!(body.len() <= MAX_BODY, "{}", body.len());
        let read = decode(&body, now).unwrap();
        assert!(!read.background.is_empty() && read.background.len() < 16, "{}", read.background.len());
        assert!(read.background.last().unwrap().label.starts_with("15"), "the newest stay");
        assert!(read.turn.is_some(), "the turn stays");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_activity_is_a_short_body() {
        let body = encode(&Activity::default(), Instant::now());
        assert_eq!(body, "{}");
        assert_eq!(decode(&body, Instant::now()), Some(Activity::default()));
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_database_holds_is_bounded_and_checked_on_reading() {
        let now = Instant::now();
        assert_eq!(decode("not json", now), None);
        assert_eq!(decode(&format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_BODY)), now), None, "too long");
        let long = "x".repeat(5000);
        let steps: Vec<String> = (0..50).map(|i| format!("{{\"words\":\"{long}\\u0007\",\"age_ms\":{i}}}")).collect();
        let body = format!(
            "{{\"turn\":{{\"number\":1,\"age_ms\":18446744073709551615,\"steps\":2,\"recent\":[{}]}},\
             \"last_done\":{{\"number\":0,\"took_ms\":1,\"steps\":0,\"cost_usd\":-3.0,\"ok\":true}}}}",
            steps[..2].join(",")
        );
        let read = decode(&body, now).unwrap();
        let turn = read.turn.unwrap();
        assert!(turn.recent.iter().all(|s| s.words.chars().count() == MAX_TEXT && !s.words.contains('\u{7}')));
        assert!(now.duration_since(turn.started) <= MAX_AGE, "an age past a day is a day");
        assert_eq!(read.last_done.unwrap().cost_usd, None, "a negative cost is none");
        let short: Vec<String> = (0..8).map(|i| format!("{{\"words\":\"step {i}\",\"age_ms\":{i}}}")).collect();
        let many = format!("{{\"turn\":{{\"number\":1,\"age_ms\":0,\"steps\":8,\"recent\":[{}]}}}}", short.join(","));
        let recent = decode(&many, now).unwrap().turn.unwrap().recent;
        assert_eq!(recent.len(), RECENT_STEPS, "the newest few steps");
        assert_eq!(recent.last().unwrap().words, "step 7");
    }
}

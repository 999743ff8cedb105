//! The words, at fixed times.

use super::*;
use crate::domain::activity::{Step, WorkKind};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn work(label: &str, started: Instant) -> BackgroundWork {
    BackgroundWork { id: label.to_owned(), kind: WorkKind::Task, label: label.to_owned(), started, doing: None }
}

fn step(words: &str, at: Instant) -> Step {
    Step { words: words.to_owned(), at }
}

#[test]
fn elapsed_reads_as_people_say_it() {
    assert_eq!(elapsed(secs(0)), "0 s");
    assert_eq!(elapsed(secs(12)), "12 s");
    assert_eq!(elapsed(secs(120)), "2 m");
    assert_eq!(elapsed(secs(134)), "2 m 14 s");
    assert_eq!(elapsed(secs(3600)), "1 h");
    assert_eq!(elapsed(secs(3780 + 59)), "1 h 3 m");
    assert_eq!(coarse(secs(59)), "<1 m");
    assert_eq!(coarse(secs(4 * 60 + 59)), "4 m");
    assert_eq!(coarse(secs(3600 + 3 * 60 + 7)), "1 h 3 m");
}

#[test]
fn a_turn_says_its_time_steps_what_it_does_and_the_background() {
    let t0 = Instant::now();
    let now = t0 + secs(12 * 60);
    let turn = TurnActivity {
        number: 1,
        started: now - secs(134),
        steps: 12,
        now: Some(step("Running `cargo test`", now)),
        recent: vec![step("Reading notes.md", now), step("Running `cargo test`", now)],
    };
    let background = [work("crawl", now - secs(4 * 60 + 10)), work("researcher", now - secs(11 * 60))];
    assert_eq!(
        super::turn(&turn, &background, ProgressMode::Status, now),
        "Working… 2 m 14 s · 12 steps\nRunning `cargo test`\n\
         2 background tasks running: crawl (4 m), researcher (11 m)"
    );
    let verbose = super::turn(&turn, &[], ProgressMode::Verbose, now);
    assert_eq!(verbose, "Working… 2 m 14 s · 12 steps\n· Reading notes.md\n· Running `cargo test`");
}

#[test]
fn the_summary_says_how_the_turn_ended() {
    let done = TurnDone { number: 3, took: secs(134), steps: 12, cost_usd: Some(0.314), ok: true };
    assert_eq!(summary(&done), "Done in 2 m 14 s · 12 steps · $0.31");
    let failed = TurnDone { ok: false, cost_usd: None, steps: 1, ..done };
    assert_eq!(summary(&failed), "Failed or stopped after 2 m 14 s · 1 step");
}

#[test]
fn on_demand_shows_the_background_and_the_last_turn_when_idle() {
    let now = Instant::now() + secs(600);
    let idle = Activity::default();
    assert_eq!(on_demand(&idle, now), "The agent is idle.");
    let after = Activity {
        turn: None,
        background: vec![work("crawl", now - secs(240))],
        last_done: Some(TurnDone { number: 1, took: secs(8), steps: 2, cost_usd: None, ok: true }),
    };
    assert_eq!(on_demand(&after, now), "1 background task running: crawl (4 m)\nLast turn: Done in 8 s · 2 steps");
}

#[test]
fn long_words_are_cut_to_one_short_line() {
    let long = "x".repeat(200);
    assert_eq!(shorten(&long, 80).chars().count(), 81);
    assert_eq!(shorten("first\nsecond", 80), "first…");
    assert_eq!(shorten("  Reading a.md\n", 80), "Reading a.md");
}

#[test]
fn the_text_changes_on_the_next_second_of_the_turn_or_minute_of_the_work() {
    let t0 = Instant::now();
    let mut a = Activity { background: vec![work("crawl", t0)], ..Activity::default() };
    assert_eq!(changes_at(&a, t0 + Duration::from_millis(61_500)), Some(t0 + secs(120)));
    a.turn = Some(TurnActivity { number: 1, started: t0, steps: 0, now: None, recent: vec![] });
    assert_eq!(changes_at(&a, t0 + Duration::from_millis(61_500)), Some(t0 + secs(62)));
    assert_eq!(changes_at(&Activity::default(), t0), None);
}

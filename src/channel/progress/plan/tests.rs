//! Each rule of the plan, on a virtual clock: the test moves time from one
//! deadline of the plan to the next, as the driver does, and logs the actions.

use super::*;
use crate::domain::activity::{BackgroundWork, Step, TurnActivity, TurnDone, WorkKind};

/// A plan driven like the driver drives it, with a log of what it did when.
struct Sim {
    plan: Plan,
    activity: Activity,
    t0: Instant,
    now: Instant,
    /// (milliseconds since the start, action).
    log: Vec<(u64, Action)>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Sim {
    fn new(settings: ProgressSettings) -> Sim {
        let t0 = Instant::now();
        Sim { plan: Plan::new(&settings), activity: Activity::default(), t0, now: t0, log: Vec::new() }
    }

    fn status() -> Sim {
        Sim::new(ProgressSettings::default())
    }

    fn at(&self, ms_since: u64) -> Instant {
        self.t0 + ms(ms_since)
    }

    /// Moves the clock to `ms_since`, acting at each deadline on the way.
    fn run_to(&mut self, ms_since: u64) {
        let end = self.at(ms_since);
        for _ in 0..10_000 {
            match self.plan.next_deadline(self.now) {
                Some(at) if at <= end => {
                    assert!(at >= self.now, "a deadline in the past");
                    self.now = at;
                    if !self.act() {
                        // A deadline with nothing to do must move on, or the driver would spin.
                        assert_ne!(self.plan.next_deadline(self.now), Some(self.now), "spins at {:?}", self.now);
                    }
                }
                _ => {
                    self.now = end;
                    self.act();
                    return;
                }
            }
        }
        panic!("too many wake-ups");
    }

    /// Changes the activity at `ms_since`.
    fn set(&mut self, ms_since: u64, change: impl FnOnce(&mut Activity, Instant)) {
        self.run_to(ms_since);
        change(&mut self.activity, self.now);
        self.plan.observe(&self.activity, self.now);
        self.act();
    }

    fn act(&mut self) -> bool {
        let mut any = false;
        while let Some(action) = self.plan.poll(self.now) {
            self.log.push(((self.now - self.t0).as_millis() as u64, action));
            any = true;
        }
        any
    }

    fn kinds(&self) -> Vec<(u64, &'static str)> {
        let kind = |a: &Action| match a {
            Action::Post { .. } => "post",
            Action::Edit { .. } => "edit",
            Action::Finish { .. } => "finish",
            Action::Delete => "delete",
        };
        self.log.iter().map(|(at, a)| (*at, kind(a))).collect()
    }

    fn texts(&self) -> Vec<&str> {
        self.log
            .iter()
            .filter_map(|(_, a)| match a {
                Action::Post { text, .. } | Action::Edit { text, .. } | Action::Finish { text } => Some(text.as_str()),
                Action::Delete => None,
            })
            .collect()
    }
}

fn start_turn(number: u64) -> impl FnOnce(&mut Activity, Instant) {
    move |a, now| a.turn = Some(TurnActivity { number, started: now, steps: 0, now: None, recent: vec![] })
}

fn step(words: &'static str) -> impl FnOnce(&mut Activity, Instant) {
    move |a, now| {
        let t = a.turn.as_mut().expect("a turn");
        t.steps += 1;
        let s = Step { words: words.to_owned(), at: now };
        t.now = Some(s.clone());
        t.recent.push(s);
    }
}

fn end_turn(ok: bool) -> impl FnOnce(&mut Activity, Instant) {
    move |a, now| {
        let t = a.turn.take().expect("a turn");
        a.last_done =
            Some(TurnDone { number: t.number, took: now - t.started, steps: t.steps, cost_usd: Some(0.31), ok });
    }
}

fn start_work(label: &'static str) -> impl FnOnce(&mut Activity, Instant) {
    move |a, now| {
        a.background.push(BackgroundWork {
            id: label.to_owned(),
            kind: WorkKind::Task,
            label: label.to_owned(),
            started: now,
            doing: None,
        })
    }
}

fn end_work(label: &'static str) -> impl FnOnce(&mut Activity, Instant) {
    move |a, _| a.background.retain(|w| w.label != label)
}

#[test]
fn a_turn_that_answers_within_after_shows_nothing() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.set(1000, step("Reading notes.md"));
    sim.set(4900, end_turn(true));
    sim.run_to(60_000);
    assert!(sim.log.is_empty(), "{:?}", sim.log);
    assert!(sim.plan.idle());
    assert_eq!(sim.plan.next_deadline(sim.now), None, "nothing left to wake for");
}

#[test]
fn a_slow_turn_gets_one_message_edited_no_faster_than_every_with_the_newest_state() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.set(1000, step("Reading notes.md"));
    sim.set(5500, step("Running `cargo test`"));
    sim.set(6000, step("Searching the web: lease fencing"));
    sim.set(6500, step("Fetching docs.rs"));
    sim.run_to(11_000);
    assert_eq!(sim.kinds(), [(5000, "post"), (8000, "edit"), (11_000, "edit")]);
    assert_eq!(sim.texts()[0], "Working… 5 s · 1 step\nReading notes.md");
    // Coalesced: the steps between two edits are never sent, only the newest.
    assert_eq!(sim.texts()[1], "Working… 8 s · 4 steps\nFetching docs.rs");
    assert!(!sim.texts().iter().any(|t| t.contains("cargo test")));
    assert!(matches!(&sim.log[0].1, Action::Post { stop: true, .. }));
    let spacing = sim.log.windows(2).map(|w| w[1].0 - w[0].0);
    assert!(spacing.clone().all(|gap| gap >= 3000), "{:?}", spacing.collect::<Vec<_>>());
}

#[test]
fn the_answer_deletes_the_message_at_once_not_held_by_the_throttle() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.run_to(8000);
    sim.set(8500, end_turn(true));
    assert_eq!(sim.kinds(), [(5000, "post"), (8000, "edit"), (8500, "delete")]);
    sim.run_to(60_000);
    assert_eq!(sim.log.len(), 3, "nothing after the turn");
    assert!(sim.plan.idle());
}

#[test]
fn with_summary_the_message_becomes_one_line_and_a_failed_turn_says_so() {
    let summary = ProgressSettings { when_done: WhenDone::Summary, ..ProgressSettings::default() };
    let mut sim = Sim::new(summary.clone());
    sim.set(0, start_turn(1));
    sim.set(1000, step("Reading notes.md"));
    sim.set(134_000, end_turn(true));
    assert_eq!(
        sim.log.last().unwrap(),
        &(134_000, Action::Finish { text: "Done in 2 m 14 s · 1 step · $0.31".into() })
    );
    assert!(sim.plan.idle());

    let mut sim = Sim::new(summary);
    sim.set(0, start_turn(7));
    sim.set(6000, end_turn(false));
    assert_eq!(sim.log.last().unwrap(), &(6000, Action::Finish { text: "Failed or stopped after 6 s · $0.31".into() }));
}

#[test]
fn background_work_is_listed_in_the_turn_then_on_its_own_line_until_the_last_ends() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.set(1000, start_work("crawl"));
    sim.set(6000, end_turn(true));
    assert!(sim.texts()[0].contains("1 background task running: crawl (<1 m)"));
    assert_eq!(sim.kinds().last(), Some(&(6000, "delete")));
    sim.set(30_000, start_work("researcher"));
    sim.run_to(100_000);
    sim.set(100_000, end_work("crawl"));
    sim.set(110_000, end_work("researcher"));
    let after: Vec<_> = sim.log.iter().skip_while(|(at, _)| *at <= 6000).cloned().collect();
    assert_eq!(
        after,
        [
            // Posted anew, `every` after the answer, so below it.
            (9000, Action::Post { text: "1 background task running: crawl (<1 m)".into(), stop: false }),
            (
                30_000,
                Action::Edit {
                    text: "2 background tasks running: crawl (<1 m), researcher (<1 m)".into(),
                    stop: false
                }
            ),
            // Only when a shown age changes: a minute after each start.
            (
                61_000,
                Action::Edit { text: "2 background tasks running: crawl (1 m), researcher (<1 m)".into(), stop: false }
            ),
            (
                90_000,
                Action::Edit { text: "2 background tasks running: crawl (1 m), researcher (1 m)".into(), stop: false }
            ),
            (100_000, Action::Edit { text: "1 background task running: researcher (1 m)".into(), stop: false }),
            // The last one ended: gone at once.
            (110_000, Action::Delete),
        ]
    );
    assert!(sim.plan.idle());
}

#[test]
fn a_new_turn_deletes_the_background_line_and_gets_its_own_message_if_slow() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.set(1000, start_work("crawl"));
    sim.set(2000, end_turn(true));
    sim.run_to(10_000);
    assert_eq!(sim.kinds(), [(5000, "post")], "the background line");
    sim.set(20_000, start_turn(2));
    assert_eq!(sim.kinds().last(), Some(&(20_000, "delete")));
    sim.run_to(25_000);
    assert_eq!(sim.kinds().last(), Some(&(25_000, "post")));
    assert_eq!(sim.plan.shown(), Some(Purpose::Turn(2)));
}

#[test]
fn a_turn_replaced_by_the_next_ends_its_message_first() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.run_to(6000);
    sim.set(7000, |a, now| {
        end_turn(true)(a, now);
        start_turn(2)(a, now);
    });
    assert_eq!(sim.kinds(), [(5000, "post"), (7000, "delete")]);
    sim.run_to(12_000);
    assert_eq!(sim.kinds().last(), Some(&(12_000, "post")));
}

#[test]
fn off_shows_nothing_ever() {
    let mut sim = Sim::new(ProgressSettings { mode: ProgressMode::Off, ..ProgressSettings::default() });
    sim.set(0, start_turn(1));
    sim.set(1000, start_work("crawl"));
    sim.set(60_000, end_turn(true));
    sim.run_to(600_000);
    assert!(sim.log.is_empty());
    assert_eq!(sim.plan.next_deadline(sim.now), None);
}

#[test]
fn verbose_lists_the_last_steps() {
    let mut sim = Sim::new(ProgressSettings { mode: ProgressMode::Verbose, ..ProgressSettings::default() });
    sim.set(0, start_turn(1));
    sim.set(1000, step("Reading notes.md"));
    sim.set(2000, step("Running `cargo test`"));
    sim.run_to(5000);
    assert_eq!(sim.texts()[0], "Working… 5 s · 2 steps\n· Reading notes.md\n· Running `cargo test`");
}

#[test]
fn an_edit_of_a_gone_message_posts_a_new_one_at_the_next_allowed_time() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.run_to(8000);
    let (_, edit) = sim.log.last().cloned().unwrap();
    assert!(matches!(edit, Action::Edit { .. }));
    sim.plan.failed(&edit, &StatusError::Gone("deleted".into()), sim.now);
    assert!(sim.plan.idle());
    sim.run_to(11_000);
    assert_eq!(sim.kinds(), [(5000, "post"), (8000, "edit"), (11_000, "post")]);
    assert_eq!(sim.texts()[2], "Working… 11 s");
}

#[test]
fn a_rate_limited_edit_is_dropped_and_the_next_waits_for_retry_after() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.run_to(8000);
    let (_, edit) = sim.log.pop().unwrap();
    sim.plan.failed(&edit, &StatusError::RateLimited { retry_after: Some(ms(10_000)) }, sim.now);
    sim.run_to(17_999);
    assert_eq!(sim.kinds(), [(5000, "post")], "nothing while held");
    sim.run_to(18_000);
    // The newest state, not the dropped one.
    assert_eq!(sim.log.last().unwrap(), &(18_000, Action::Edit { text: "Working… 18 s".into(), stop: true }));
}

#[test]
fn a_failed_edit_is_sent_again_with_the_next_state() {
    let mut sim = Sim::status();
    sim.set(0, start_turn(1));
    sim.set(1000, start_work("crawl"));
    sim.set(2000, end_turn(true));
    sim.run_to(5000);
    let (_, post) = sim.log.last().cloned().unwrap();
    assert!(matches!(post, Action::Post { .. }));
    sim.set(10_000, start_work("index"));
    let (_, edit) = sim.log.last().cloned().unwrap();
    sim.plan.failed(&edit, &StatusError::Failed("network".into()), sim.now);
    sim.run_to(13_000);
    // Same text as the failed edit, because the chat never got it.
    assert_eq!(sim.log.last().unwrap(), &(13_000, edit));
}

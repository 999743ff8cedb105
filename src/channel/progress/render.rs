//! The words of progress: elapsed times, a turn's status message, the summary
//! line, the background line, and the `/status` view. Plain text; the
//! platform escapes it. A step's words and a task's label come already
//! summarised from the session; they are only shortened here, so a long label
//! cannot make a status message outgrow its platform's limit.

use std::time::Duration;

use tokio::time::Instant;

use crate::domain::activity::{Activity, BackgroundWork, ProgressMode, TurnActivity, TurnDone};

/// Longest a step's words or a task's label is shown, in characters.
const MAX_WORDS: usize = 80;
const MAX_LABEL: usize = 40;

/// An elapsed time as people say it: "12 s", "2 m 14 s", "1 h 3 m".
pub fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 if s.is_multiple_of(60) => format!("{} m", s / 60),
        60..=3599 => format!("{} m {} s", s / 60, s % 60),
        _ if s % 3600 < 60 => format!("{} h", s / 3600),
        _ => format!("{} h {} m", s / 3600, s % 3600 / 60),
    }
}

/// A background task's age, to the minute: it changes once a minute, so the
/// background line is not edited every few seconds.
pub fn coarse(d: Duration) -> String {
    match d.as_secs() {
        0..=59 => "<1 m".to_owned(),
        60..=3599 => format!("{} m", d.as_secs() / 60),
        _ => elapsed(Duration::from_secs(d.as_secs() / 60 * 60)),
    }
}

/// When `elapsed(now - start)` next shows something else.
fn elapsed_changes(start: Instant, now: Instant) -> Instant {
    let s = now.saturating_duration_since(start).as_secs();
    let step = if s < 3600 { 1 } else { 60 };
    start + Duration::from_secs((s / step + 1) * step)
}

/// When `coarse(now - start)` next shows something else.
fn coarse_changes(start: Instant, now: Instant) -> Instant {
    let m = now.saturating_duration_since(start).as_secs() / 60;
    start + Duration::from_secs((m + 1) * 60)
}

/// A turn's status message: elapsed time, steps done, what it does now, the
/// background work beside it, and (verbose) the last few steps.
pub fn turn(turn: &TurnActivity, background: &[BackgroundWork], mode: ProgressMode, now: Instant) -> String {
    let mut head = format!("Working… {}", elapsed(now.saturating_duration_since(turn.started)));
    match turn.steps {
        0 => {}
        1 => head.push_str(" · 1 step"),
        n => head.push_str(&format!(" · {n} steps")),
    }
    let mut lines = vec![head];
    if mode == ProgressMode::Verbose && turn.recent.len() > 1 {
        lines.extend(turn.recent.iter().map(|s| format!("· {}", shorten(&s.words, MAX_WORDS))));
    } else if let Some(step) = &turn.now {
        lines.push(shorten(&step.words, MAX_WORDS));
    }
    if !background.is_empty() {
        lines.push(background_line(background, mode, now));
    }
    // How to stop it is the port's to add: a button on Telegram, a line on
    // WhatsApp, nothing in a terminal.
    lines.join("\n")
}

/// The line shown while background work runs after a turn:
/// "2 background tasks running: crawl (4 m), researcher (11 m)".
pub fn background_line(work: &[BackgroundWork], mode: ProgressMode, now: Instant) -> String {
    let items: Vec<String> = work
        .iter()
        .map(|w| {
            let age = coarse(now.saturating_duration_since(w.started));
            match (&w.doing, mode) {
                (Some(doing), ProgressMode::Verbose) => {
                    format!("{} ({age}, {})", shorten(&w.label, MAX_LABEL), shorten(doing, MAX_LABEL))
                }
                _ => format!("{} ({age})", shorten(&w.label, MAX_LABEL)),
            }
        })
        .collect();
    let count = match work.len() {
        1 => "1 background task".to_owned(),
        n => format!("{n} background tasks"),
    };
    format!("{count} running: {}", items.join(", "))
}

/// The one line a finished turn's status message becomes:
/// "Done in 2 m 14 s · 12 steps · $0.31".
pub fn summary(done: &TurnDone) -> String {
    let took = elapsed(done.took);
    let mut line = if done.ok { format!("Done in {took}") } else { format!("Failed or stopped after {took}") };
    match done.steps {
        0 => {}
        1 => line.push_str(" · 1 step"),
        n => line.push_str(&format!(" · {n} steps")),
    }
    if let Some(cost) = done.cost_usd {
        line.push_str(&format!(" · ${cost:.2}"));
    }
    line
}

/// What `/status` shows of the agent's work now.
pub fn on_demand(activity: &Activity, now: Instant) -> String {
    if let Some(t) = &activity.turn {
        return turn(t, &activity.background, ProgressMode::Verbose, now);
    }
    let mut lines = Vec::new();
    if !activity.background.is_empty() {
        lines.push(background_line(&activity.background, ProgressMode::Verbose, now));
    } else {
        lines.push("The agent is idle.".to_owned());
    }
    if let Some(done) = &activity.last_done {
        lines.push(format!("Last turn: {}", summary(done)));
    }
    lines.join("\n")
}

/// When the text of a turn's message (or, without a turn, of the background
/// line) next changes by time alone, if it shows any clock.
pub fn changes_at(activity: &Activity, now: Instant) -> Option<Instant> {
    let turn = activity.turn.as_ref().map(|t| elapsed_changes(t.started, now));
    let work = activity.background.iter().map(|w| coarse_changes(w.started, now));
    turn.into_iter().chain(work).min()
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    let one_line = text.lines().next().unwrap_or_default();
    match one_line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None if one_line.len() < text.len() => format!("{one_line}…"),
        None => one_line.to_owned(),
    }
}

#[cfg(test)]
mod tests;

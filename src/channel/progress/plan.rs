//! What one chat is shown of its agent's [`Activity`], and when: a pure state
//! machine with no I/O, fed the newest activity ([`Plan::observe`]) and the
//! outcome of what it asked for ([`Plan::failed`]), asked what to do now
//! ([`Plan::poll`]) and when to ask again ([`Plan::next_deadline`]).
//!
//! The rules it keeps:
//! - nothing for a turn that ends within `after`; then one message per turn,
//!   edited in place;
//! - posts and edits at most one per `every`, each carrying only the newest
//!   state, never the text already shown;
//! - a turn's end is acted on at once, never held by the throttle: its
//!   message is deleted, or finished into a summary line;
//! - after the turn, while background work runs, one line posted as a new
//!   message (at least `every` after the turn ended, so the answer is there
//!   first), deleted when the last work ends;
//! - at most one message alive: a new turn deletes the background line
//!   rather than taking it over, because that line sits above the new
//!   question, and the turn's own message is posted (only if the turn is
//!   slow) below it;
//! - a rate limit drops the edit and holds the next one for `retry_after`.
//!
//! [`Activity`]: crate::domain::activity::Activity

use std::time::Duration;

use tokio::time::Instant;

use super::port::{ProgressSettings, StatusError};
use super::render;
use crate::domain::activity::{Activity, ProgressMode, WhenDone};

/// What to do to the chat's status message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Post a new status message (`stop`: with a Stop control).
    Post { text: String, stop: bool },
    /// Replace the text of the message alive.
    Edit { text: String, stop: bool },
    /// Replace its text one last time (the summary): it is no longer pincer's
    /// to edit or delete afterwards.
    Finish { text: String },
    /// Delete the message that was alive.
    Delete,
}

/// What the message alive is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A turn's status, by its number.
    Turn(u64),
    /// The line about background work after a turn.
    Background,
}

#[derive(Debug)]
struct Shown {
    purpose: Purpose,
    /// What the chat shows; empty when unknown (an edit failed), so the next
    /// state is sent whatever it is.
    text: String,
}

/// The progress state of one chat.
#[derive(Debug)]
pub struct Plan {
    mode: ProgressMode,
    after: Duration,
    every: Duration,
    when_done: WhenDone,
    activity: Activity,
    shown: Option<Shown>,
    /// The last post or edit, or the end of the last turn: the throttle counts from it.
    last_send: Option<Instant>,
    /// The platform asked to wait until then.
    hold_until: Option<Instant>,
}

impl Plan {
    pub fn new(settings: &ProgressSettings) -> Plan {
        Plan {
            mode: settings.mode,
            after: settings.after,
            every: settings.every,
            when_done: settings.when_done,
            activity: Activity::default(),
            shown: None,
            last_send: None,
            hold_until: None,
        }
    }

    /// The newest activity, seen at `now`.
    pub fn observe(&mut self, activity: &Activity, now: Instant) {
        let before = self.activity.turn.as_ref().map(|t| t.number);
        if before.is_some() && before != activity.turn.as_ref().map(|t| t.number) {
            // The answer is on its way: what is posted next comes after it.
            self.last_send = Some(self.last_send.map_or(now, |at| at.max(now)));
        }
        self.activity = activity.clone();
    }

    /// Whether no status message is alive.
    pub fn idle(&self) -> bool {
        self.shown.is_none()
    }

    /// What the message alive is about, if one is.
    pub fn shown(&self) -> Option<Purpose> {
        self.shown.as_ref().map(|s| s.purpose)
    }

    /// What to do at `now`, if anything. Call again until it says nothing.
    pub fn poll(&mut self, now: Instant) -> Option<Action> {
        if self.mode == ProgressMode::Off {
            return None;
        }
        if let Some(end) = self.end() {
            return Some(end);
        }
        let (purpose, text) = self.wanted(now)?;
        if self.allowed_at().is_some_and(|at| now < at) {
            return None;
        }
        let stop = matches!(purpose, Purpose::Turn(_));
        match &mut self.shown {
            None => {
                self.shown = Some(Shown { purpose, text: text.clone() });
                self.last_send = Some(now);
                Some(Action::Post { text, stop })
            }
            Some(shown) if shown.text != text => {
                shown.text.clone_from(&text);
                self.last_send = Some(now);
                Some(Action::Edit { text, stop })
            }
            Some(_) => None,
        }
    }

    /// When [`Plan::poll`] may have something to do next, if ever without a
    /// new activity.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if self.mode == ProgressMode::Off {
            return None;
        }
        if self.ending() {
            return Some(now);
        }
        let allowed = self.allowed_at().map_or(now, |at| at.max(now));
        if let Some(t) = &self.activity.turn {
            let slow_at = t.started + self.after;
            if now < slow_at {
                return Some(slow_at.max(allowed));
            }
        }
        let (_, text) = self.wanted(now)?;
        match &self.shown {
            Some(shown) if shown.text == text => render::changes_at(&self.activity, now).map(|at| at.max(allowed)),
            _ => Some(allowed),
        }
    }

    /// `action` (the last one [`Plan::poll`] gave) did not happen.
    pub fn failed(&mut self, action: &Action, error: &StatusError, now: Instant) {
        if let StatusError::RateLimited { retry_after } = error {
            self.hold_until = Some(now + retry_after.unwrap_or(self.every));
        }
        match (action, error) {
            (Action::Post { .. }, _) | (Action::Edit { .. }, StatusError::Gone(_)) => self.shown = None,
            (Action::Edit { .. }, _) => {
                if let Some(shown) = &mut self.shown {
                    shown.text.clear();
                }
            }
            (Action::Finish { .. } | Action::Delete, _) => {}
        }
    }

    /// The earliest a post or edit may go out, if anything holds them.
    fn allowed_at(&self) -> Option<Instant> {
        [self.last_send.map(|at| at + self.every), self.hold_until].into_iter().flatten().max()
    }

    /// Whether the message alive is about something that ended.
    fn ending(&self) -> bool {
        let turn = self.activity.turn.as_ref().map(|t| t.number);
        match self.shown.as_ref().map(|s| s.purpose) {
            Some(Purpose::Turn(n)) => turn != Some(n),
            Some(Purpose::Background) => turn.is_some() || self.activity.background.is_empty(),
            None => false,
        }
    }

    /// Deletes or finishes the message alive when what it is about ended.
    fn end(&mut self) -> Option<Action> {
        if !self.ending() {
            return None;
        }
        let purpose = self.shown.take()?.purpose;
        let done = self.activity.last_done.as_ref();
        match (purpose, done, self.when_done) {
            (Purpose::Turn(n), Some(done), WhenDone::Summary) if done.number == n => {
                Some(Action::Finish { text: render::summary(done) })
            }
            _ => Some(Action::Delete),
        }
    }

    /// What the chat should show at `now`, if anything.
    fn wanted(&self, now: Instant) -> Option<(Purpose, String)> {
        let a = &self.activity;
        match &a.turn {
            Some(t) if now >= t.started + self.after => {
                Some((Purpose::Turn(t.number), render::turn(t, &a.background, self.mode, now)))
            }
            Some(_) => None,
            None if a.background.is_empty() => None,
            None => Some((Purpose::Background, render::background_line(&a.background, self.mode, now))),
        }
    }
}

#[cfg(test)]
mod tests;

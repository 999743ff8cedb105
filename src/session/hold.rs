//! The usage-limit hold, decided without I/O: which messages a usage limit
//! refused are written again once after its reset, which are given up on,
//! what the chat is told, and when the resend is due.
//!
//! Invariants: a message is sent again after a limit at most once (a second
//! limit gives up on it); a scheduled run's message is never held (the
//! scheduler retries runs by its own rule); an unknown or absurd reset time
//! holds nothing; a resend that comes due while the group's budget is
//! reached waits until the budget opens (`postpone`). Held messages stay
//! `sent` in the store, so a pincer that restarts meanwhile sends them again
//! at its start.

use std::time::{Duration, SystemTime};

use chrono_tz::Tz;
use tokio::time::Instant;

use super::api_error::{self, LimitPlan, UsageLimit};
use super::pending::PendingMessage;
use crate::domain::{GroupName, InboundId};

/// Messages held back by a usage limit go out again this long after the
/// announced reset, so a clock slightly ahead of the API's does not meet the
/// limit still in force.
pub(super) const RESEND_MARGIN: Duration = Duration::from_secs(2);

/// Messages a usage limit refused, waiting to be written again once.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) messages: Vec<PendingMessage>,
    /// When they go out again, by the wall clock (what the chat was told) and the monotonic one.
    pub(super) at: SystemTime,
    pub(super) deadline: Instant,
}

/// What a usage limit's result means for the chat and the store.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LimitOutcome {
    /// The chat's line(s) about it.
    pub(super) text: String,
    /// Messages given up on (marked failed).
    pub(super) failed: Vec<InboundId>,
}

#[derive(Debug, Default)]
pub(super) struct UsageHold {
    held: Option<Held>,
}

impl UsageHold {
    /// When the held messages are due (monotonic).
    pub(super) fn due(&self) -> Option<Instant> {
        self.held.as_ref().map(|h| h.deadline)
    }

    /// When the chat was told they go out again.
    pub(super) fn resend_at(&self) -> Option<SystemTime> {
        self.held.as_ref().map(|h| h.at)
    }

    /// The resend is due (or cancelled): the held messages, once.
    pub(super) fn take(&mut self) -> Option<Held> {
        self.held.take()
    }

    /// The resend came due while the group's budget is reached: the same
    /// messages go out at `at` instead (when the budget opens again), still once.
    pub(super) fn postpone(&mut self, held: Held, (at, deadline): (SystemTime, Instant)) {
        let mut later = Held { at, deadline, ..held };
        if let Some(newer) = self.held.take() {
            // A limit met meanwhile: its messages go with these, at the later time.
            later.messages.extend(newer.messages);
            if newer.deadline > later.deadline {
                (later.at, later.deadline) = (newer.at, newer.deadline);
            }
        }
        self.held = Some(later);
    }

    /// A usage limit refused these messages. Each is held back to be written
    /// again once after the reset, unless it already was, the reset time is
    /// unknown, or someone (a scheduled run) waits for it: those are given up on.
    pub(super) fn hold(
        &mut self,
        group: &GroupName,
        limit: &UsageLimit,
        refused: Vec<PendingMessage>,
        watched: impl Fn(InboundId) -> bool,
        (now, mono_now): (SystemTime, Instant),
        zone: Tz,
    ) -> LimitOutcome {
        let (mut hold, mut again, mut not_resent) = (Vec::new(), Vec::new(), Vec::new());
        // Checked: the reset time is the CLI's word, and may be anything.
        let resend = limit.resets_at.and_then(|reset| {
            let (at, wait) = api_error::resend_at(reset, now, RESEND_MARGIN)?;
            Some((reset.max(now), at, mono_now.checked_add(wait)?))
        });
        for m in refused {
            if m.after_limit {
                again.push(m.id);
            } else if resend.is_none() || watched(m.id) {
                not_resent.push(m.id);
            } else {
                hold.push(m);
            }
        }
        let mut lines = Vec::new();
        if let (false, Some((reset, at, deadline))) = (hold.is_empty(), resend) {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::ResendAt(reset), hold.len(), zone, now));
            tracing::info!(%group, messages = hold.len(), at = %humantime::format_rfc3339_seconds(at), "usage limit reached; holding messages until it resets");
            match self.held.as_mut() {
                Some(held) => {
                    held.messages.extend(hold);
                    if deadline > held.deadline {
                        (held.at, held.deadline) = (at, deadline);
                    }
                }
                None => self.held = Some(Held { messages: hold, at, deadline }),
            }
        }
        if !again.is_empty() {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::GaveUp, again.len(), zone, now));
        }
        if !not_resent.is_empty() || lines.is_empty() {
            lines.push(api_error::usage_limit_text(limit, LimitPlan::NotResent, not_resent.len(), zone, now));
        }
        LimitOutcome { text: lines.join("\n"), failed: [again, not_resent].concat() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::pending::Pending;
    use crate::session::rights::Voice;

    fn refused(ids: &[i64]) -> Vec<PendingMessage> {
        let mut pending = Pending::default();
        for id in ids {
            pending.push(InboundId(*id), format!("m{id}"), std::time::Instant::now(), Voice::Admin);
        }
        pending.answer()
    }

    fn limit(resets_in: Option<Duration>, now: SystemTime) -> UsageLimit {
        UsageLimit { resets_at: resets_in.map(|d| now + d), limit_type: Some("five_hour".into()) }
    }

    fn group() -> GroupName {
        "team".parse().unwrap()
    }

    #[test]
    fn refused_messages_are_held_until_the_reset_plus_a_margin() {
        let (mut hold, now, mono) = (UsageHold::default(), SystemTime::now(), Instant::now());
        let hour = Duration::from_secs(3600);
        let out =
            hold.hold(&group(), &limit(Some(hour), now), refused(&[1, 2]), |_| false, (now, mono), chrono_tz::UTC);
        assert!(out.failed.is_empty(), "{out:?}");
        assert_eq!(hold.due(), Some(mono + hour + RESEND_MARGIN));
        assert_eq!(hold.resend_at(), Some(now + hour + RESEND_MARGIN));
        let held = hold.take().unwrap();
        assert_eq!(held.messages.iter().map(|m| m.id).collect::<Vec<_>>(), [InboundId(1), InboundId(2)]);
        assert!(hold.take().is_none(), "resent once");
    }

    #[test]
    fn a_message_already_resent_once_or_watched_or_without_a_reset_time_is_given_up() {
        let (mut hold, now, mono) = (UsageHold::default(), SystemTime::now(), Instant::now());
        let mut messages = refused(&[1, 2]);
        messages[0].after_limit = true;
        let soon = limit(Some(Duration::from_secs(60)), now);
        let out = hold.hold(&group(), &soon, messages, |id| id == InboundId(2), (now, mono), chrono_tz::UTC);
        assert_eq!(out.failed, [InboundId(1), InboundId(2)]);
        assert!(hold.due().is_none(), "nothing held");

        let out = hold.hold(&group(), &limit(None, now), refused(&[3]), |_| false, (now, mono), chrono_tz::UTC);
        assert_eq!(out.failed, [InboundId(3)], "unknown reset time");
        assert!(!out.text.is_empty());
    }

    #[test]
    fn an_absurd_reset_time_holds_nothing_and_does_not_panic() {
        let (mut hold, now, mono) = (UsageHold::default(), SystemTime::now(), Instant::now());
        // The last second a wall-clock time can hold: the margin cannot be added.
        let far_away = SystemTime::UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
        let far = UsageLimit { resets_at: Some(far_away), limit_type: None };
        let out = hold.hold(&group(), &far, refused(&[1]), |_| false, (now, mono), chrono_tz::UTC);
        assert_eq!(out.failed, [InboundId(1)]);
    }

    #[test]
    fn a_postponed_resend_keeps_its_messages_and_goes_at_the_new_time() {
        let (mut hold, now, mono) = (UsageHold::default(), SystemTime::now(), Instant::now());
        let minute = Duration::from_secs(60);
        hold.hold(&group(), &limit(Some(minute), now), refused(&[1]), |_| false, (now, mono), chrono_tz::UTC);
        let due = hold.take().unwrap();
        let day = Duration::from_secs(86_400);
        hold.postpone(due, (now + day, mono + day));
        assert_eq!((hold.due(), hold.resend_at()), (Some(mono + day), Some(now + day)));
        assert_eq!(hold.take().unwrap().messages.len(), 1, "the same message, still once");
    }

    #[test]
    fn a_later_limit_extends_the_hold_and_keeps_every_message() {
        let (mut hold, now, mono) = (UsageHold::default(), SystemTime::now(), Instant::now());
        let (soon, later) = (Duration::from_secs(60), Duration::from_secs(600));
        hold.hold(&group(), &limit(Some(later), now), refused(&[1]), |_| false, (now, mono), chrono_tz::UTC);
        hold.hold(&group(), &limit(Some(soon), now), refused(&[2]), |_| false, (now, mono), chrono_tz::UTC);
        assert_eq!(hold.due(), Some(mono + later + RESEND_MARGIN), "the later reset wins");
        assert_eq!(hold.take().unwrap().messages.len(), 2);
    }
}

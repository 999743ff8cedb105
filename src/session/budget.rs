//! A group's budget in its session: queued messages are taken only while
//! the budget (the group's own over `[budget]`) is not reached. Reached,
//! they wait in the store; the chat is told once per period, and the
//! session looks again when the period turns or its settings change.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::domain::budget::{Budget, Reached};
use crate::domain::{unix_us, GroupName};
use crate::store::Store;

/// What the session knows of its budget between two looks.
#[derive(Debug, Default)]
pub(super) struct BudgetGate {
    /// Reached until then (monotonic): no need to read the store before.
    closed_until: Option<Instant>,
    /// The end of the period the chat was last told about.
    told_until_us: Option<i64>,
}

/// What a look at the budget found.
#[derive(Debug, PartialEq)]
pub(super) enum Look {
    Open,
    /// Reached: `tell` is the chat's notice when it has not heard it yet.
    Closed {
        tell: Option<String>,
    },
}

impl BudgetGate {
    /// When to look again (for the actor's `select!`).
    pub fn reopen_at(&self) -> Option<Instant> {
        self.closed_until
    }

    /// The budget may have changed (settings reloaded): look again at the next pull.
    pub fn forget(&mut self) {
        self.closed_until = None;
    }

    /// Whether queued messages may be taken now.
    pub async fn look(&mut self, store: &Store, group: &GroupName, budget: Budget, zone: chrono_tz::Tz) -> Look {
        if !budget.is_set() {
            self.closed_until = None;
            return Look::Open;
        }
        if self.closed_until.is_some_and(|until| Instant::now() < until) {
            return Look::Closed { tell: None };
        }
        let now = SystemTime::now();
        let reached = match store.budget_reached(group, &budget, now, zone).await {
            Ok(reached) => reached,
            Err(e) => {
                // The store that cannot sum results cannot store the next one either: that is reported there.
                tracing::warn!(%group, %e, "cannot read what the group spent; its budget is not checked now");
                return Look::Open;
            }
        };
        match reached {
            None => {
                self.closed_until = None;
                Look::Open
            }
            Some(r) => self.closed(r, unix_us(now), group, zone),
        }
    }

    fn closed(&mut self, r: Reached, now_us: i64, group: &GroupName, zone: chrono_tz::Tz) -> Look {
        let until_us = r.until_us();
        let wait = Duration::from_micros(u64::try_from(until_us - now_us).unwrap_or(0));
        // A second past the turn of the period, so the next look is inside the new one.
        self.closed_until = Some(Instant::now() + wait + Duration::from_secs(1));
        let tell = (self.told_until_us != Some(until_us)).then(|| {
            self.told_until_us = Some(until_us);
            let at = chrono::DateTime::from_timestamp_micros(until_us).map(|t| t.with_timezone(&zone));
            let when = match at {
                Some(at) => format!(
                    "{} ({}, in {})",
                    at.format("%Y-%m-%d %H:%M"),
                    zone,
                    humantime::format_duration(Duration::from_secs(wait.as_secs() / 60 * 60))
                ),
                None => "the next period".to_owned(),
            };
            r.chat_text(&when, group.as_str())
        });
        tracing::info!(%group, ?r, "the group's budget is reached; its messages wait");
        Look::Closed { tell }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn closed_it_wakes_just_after_the_period_turns_and_tells_once_per_period() {
        let mut gate = BudgetGate::default();
        let group: GroupName = "family".parse().unwrap();
        let now_us = 1_000_000_000;
        let hour = 3_600_000_000;
        let start = Instant::now();
        let first = gate.closed(Reached::Turns { limit: 1, until_us: now_us + hour }, now_us, &group, chrono_tz::UTC);
        assert!(matches!(first, Look::Closed { tell: Some(_) }), "{first:?}");
        assert_eq!(gate.reopen_at(), Some(start + Duration::from_secs(3601)));
        let again =
            gate.closed(Reached::Turns { limit: 1, until_us: now_us + hour }, now_us + 5, &group, chrono_tz::UTC);
        assert_eq!(again, Look::Closed { tell: None }, "the same period is not told twice");
        let next = gate.closed(
            Reached::Turns { limit: 1, until_us: now_us + 25 * hour },
            now_us + hour,
            &group,
            chrono_tz::UTC,
        );
        assert!(matches!(next, Look::Closed { tell: Some(_) }), "a new period is told again");
        gate.forget();
        assert_eq!(gate.reopen_at(), None, "changed settings are looked at again at once");
    }
}

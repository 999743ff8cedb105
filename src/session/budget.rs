//! A group's budget in its session: queued messages are taken only while
//! the budget (the group's own over `[budget]`) is not reached. Reached,
//! they wait in the store and the group is *held*: quiet (its wakes are
//! answered, so it is not busy and no "typing…" shows), the chat told once
//! per period that it is held and until when, `/status` saying so; the
//! session looks again when the period turns or its settings change.
//!
//! The spend a look counts is the results' cost, or what passed the
//! credential proxy when that is more (`Store::budget_spent`). Besides
//! before a pull, the session looks after each result, so work the CLI
//! would start by itself (a background task's follow-up turn) and a usage
//! limit's resend do not run past a reached budget.

use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::domain::budget::Reached;
use crate::domain::{from_unix_us, unix_us, GroupName};
use crate::store::StoreError;

/// What the session knows of its budget between two looks.
#[derive(Debug, Default)]
pub(super) struct BudgetGate {
    /// Reached until then (monotonic): no need to read the store before.
    closed_until: Option<Instant>,
    /// The same, by the wall clock: when the held group goes on.
    held_until: Option<SystemTime>,
    /// The end of the period the chat was last told about.
    told_until_us: Option<i64>,
    /// Results read when the budget was last looked at after one.
    results_looked: u64,
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

    /// Until when the group is held, if it is (for `/status`).
    pub fn held_until(&self) -> Option<SystemTime> {
        self.held_until
    }

    /// The budget may have changed (settings reloaded): look again at the next pull.
    pub fn forget(&mut self) {
        self.closed_until = None;
        self.held_until = None;
    }

    /// Whether a result was read since the last look after one (`read`:
    /// the results read so far); counts this one as looked at.
    pub fn results_since(&mut self, read: u64) -> bool {
        let new = read > self.results_looked;
        self.results_looked = read;
        new
    }

    /// Whether queued messages may be taken at `now`. `reached` reads the
    /// group's spend (once, only when the answer is not known already);
    /// `set` is whether the group has a budget at all.
    pub async fn look<F, Fut>(
        &mut self,
        set: bool,
        reached: F,
        now: SystemTime,
        group: &GroupName,
        zone: chrono_tz::Tz,
    ) -> Look
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<Reached>, StoreError>>,
    {
        if !set {
            self.forget();
            return Look::Open;
        }
        if self.closed_until.is_some_and(|until| Instant::now() < until) {
            return Look::Closed { tell: None };
        }
        let reached = match reached().await {
            Ok(reached) => reached,
            Err(e) => {
                // The store that cannot sum results cannot store the next one either: that is reported there.
                tracing::warn!(%group, %e, "cannot read what the group spent; its budget is not checked now");
                return Look::Open;
            }
        };
        match reached {
            None => {
                self.forget();
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
        self.held_until = Some(from_unix_us(until_us));
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        assert_eq!(gate.held_until(), Some(from_unix_us(now_us + hour)));
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
        assert_eq!((gate.reopen_at(), gate.held_until()), (None, None), "changed settings are looked at again at once");
    }

    #[tokio::test(start_paused = true)]
    async fn held_it_reads_nothing_until_the_period_turns_then_goes_on() {
        let mut gate = BudgetGate::default();
        let group: GroupName = "family".parse().unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let until_us = unix_us(now) + 3_600_000_000;
        let reads = AtomicUsize::new(0);
        // What the store says: reached until the hour is up, then open.
        let spend = |open: bool| {
            reads.fetch_add(1, Ordering::SeqCst);
            let reached = (!open).then_some(Reached::Turns { limit: 1, until_us });
            std::future::ready(Ok(reached))
        };
        let look = gate.look(true, || spend(false), now, &group, chrono_tz::UTC).await;
        assert!(matches!(look, Look::Closed { tell: Some(_) }), "{look:?}");
        let opens = gate.reopen_at().unwrap();
        for _ in 0..3 {
            let look = gate.look(true, || spend(false), now, &group, chrono_tz::UTC).await;
            assert_eq!(look, Look::Closed { tell: None }, "told once");
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1, "the store is not read again while the period lasts");
        tokio::time::sleep_until(opens - Duration::from_millis(1)).await;
        assert_eq!(gate.look(true, || spend(false), now, &group, chrono_tz::UTC).await, Look::Closed { tell: None });
        tokio::time::sleep_until(opens).await;
        let later = now + Duration::from_secs(3601);
        assert_eq!(gate.look(true, || spend(true), later, &group, chrono_tz::UTC).await, Look::Open);
        assert_eq!((gate.reopen_at(), gate.held_until()), (None, None), "no longer held");
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }
}

//! Budgets: how much a group's agent may spend (USD as each result reports
//! it, or what passed the credential proxy when that is more, see
//! [`Spent::counting_proxy`]) or how many turns it may take (for
//! subscription users, whose cost is notional) per day and per month, and
//! whether that is reached now.
//!
//! Days and months begin at midnight in the operator's `timezone`. Amounts
//! are kept in cents so settings compare exactly.

use std::time::SystemTime;

use chrono::{Datelike, TimeZone};
use serde::{Deserialize, Serialize};

/// A budget; each part unset means no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub daily_cents: Option<u64>,
    pub monthly_cents: Option<u64>,
    pub daily_turns: Option<u32>,
}

impl Budget {
    /// "budget $5.00/day, 40 turns/day", or "no budget".
    pub fn describe(&self) -> String {
        self.parts().map_or_else(|| "no budget".to_owned(), |parts| format!("budget {parts}"))
    }

    /// "$5.00/day, 40 turns/day": the parts that are set, if any.
    pub fn parts(&self) -> Option<String> {
        let parts: Vec<String> = [
            self.daily_cents.map(|c| format!("{}/day", usd(c))),
            self.monthly_cents.map(|c| format!("{}/month", usd(c))),
            self.daily_turns.map(|t| format!("{t} turns/day")),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    pub fn is_set(&self) -> bool {
        self.daily_cents.is_some() || self.monthly_cents.is_some() || self.daily_turns.is_some()
    }

    /// This group's own parts, the `default`'s where it has none.
    pub fn over(self, default: Budget) -> Budget {
        Budget {
            daily_cents: self.daily_cents.or(default.daily_cents),
            monthly_cents: self.monthly_cents.or(default.monthly_cents),
            daily_turns: self.daily_turns.or(default.daily_turns),
        }
    }
}

/// USD as cents (rounded), for settings given in dollars; refused when negative or not a number.
pub fn cents(usd: f64) -> Option<u64> {
    (0.0..1e12).contains(&usd).then(|| (usd * 100.0).round() as u64)
}

/// What a group spent in the current day and month.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    pub today_usd: f64,
    pub month_usd: f64,
    pub today_turns: u32,
}

/// What a group's sandboxed code spent through the credential proxy in the
/// current day and month, priced from each response's `usage`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Proxied {
    pub today_usd: f64,
    pub month_usd: f64,
}

/// What passed the credential proxy for one group in one stretch of time:
/// the calls, their tokens as the API counted them, and their price.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProxyUse {
    pub calls: u64,
    pub tokens: crate::domain::Tokens,
    pub cost_usd: f64,
}

impl ProxyUse {
    /// Adds `other` to this one.
    pub fn add(&mut self, other: &ProxyUse) {
        self.calls += other.calls;
        self.tokens.input += other.tokens.input;
        self.tokens.output += other.tokens.output;
        self.tokens.cache_read += other.tokens.cache_read;
        self.tokens.cache_creation += other.tokens.cache_creation;
        self.cost_usd += other.cost_usd;
    }
}

impl Spent {
    /// The spend a budget counts: what the results report, or what passed the
    /// credential proxy when that is more. Every call a sandboxed CLI makes
    /// goes through the proxy, its own turns' calls included, so the proxy's
    /// sum is the results' cost plus what they never counted (code in the
    /// sandbox calling the API itself); the larger of the two counts that
    /// extra once, never twice. An unconfined group's calls never pass the
    /// proxy: its results alone count.
    pub fn counting_proxy(self, proxied: Proxied) -> Spent {
        Spent {
            today_usd: self.today_usd.max(proxied.today_usd),
            month_usd: self.month_usd.max(proxied.month_usd),
            ..self
        }
    }
}

/// Where the current periods begin and the next ones start (unix µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Periods {
    pub day_start_us: i64,
    pub next_day_us: i64,
    pub month_start_us: i64,
    pub next_month_us: i64,
}

impl Periods {
    /// The periods `now` falls in, in time zone `tz`.
    pub fn at(now: SystemTime, tz: chrono_tz::Tz) -> Periods {
        let secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        let local = tz.timestamp_opt(secs, 0).single().unwrap_or_else(|| tz.timestamp_opt(0, 0).unwrap());
        let midnight = |date: chrono::NaiveDate| -> i64 {
            // A day that starts in a DST gap begins at its first valid instant.
            let at = date.and_hms_opt(0, 0, 0).expect("midnight exists");
            let local = tz
                .from_local_datetime(&at)
                .earliest()
                .or_else(|| tz.from_local_datetime(&(at + chrono::Duration::hours(1))).earliest());
            local.map_or(0, |t| t.timestamp() * 1_000_000)
        };
        let today = local.date_naive();
        let first = today.with_day(1).expect("day 1 exists");
        let next_first = if first.month() == 12 {
            chrono::NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
        } else {
            chrono::NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
        }
        .expect("a month follows");
        Periods {
            day_start_us: midnight(today),
            next_day_us: midnight(today.succ_opt().expect("a day follows")),
            month_start_us: midnight(first),
            next_month_us: midnight(next_first),
        }
    }
}

/// Which part of a budget is reached, and when it opens again (unix µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reached {
    Daily { limit_cents: u64, spent_usd: f64, until_us: i64 },
    Monthly { limit_cents: u64, spent_usd: f64, until_us: i64 },
    Turns { limit: u32, until_us: i64 },
}

impl Reached {
    /// When the group may go on, unless an admin raises the budget first.
    pub fn until_us(&self) -> i64 {
        match self {
            Reached::Daily { until_us, .. } | Reached::Monthly { until_us, .. } | Reached::Turns { until_us, .. } => {
                *until_us
            }
        }
    }

    /// What the chat is told, once per period.
    pub fn chat_text(&self, until: &str, group: &str) -> String {
        let (what, here, raise) = match self {
            Reached::Daily { limit_cents, spent_usd, .. } => (
                format!("its budget of {} a day ({} spent today)", usd(*limit_cents), dollars(*spent_usd)),
                "/budget daily AMOUNT",
                format!("pincer groups set {group} --budget-daily AMOUNT"),
            ),
            Reached::Monthly { limit_cents, spent_usd, .. } => (
                format!("its budget of {} a month ({} spent this month)", usd(*limit_cents), dollars(*spent_usd)),
                "/budget monthly AMOUNT",
                format!("pincer groups set {group} --budget-monthly AMOUNT"),
            ),
            Reached::Turns { limit, .. } => (
                format!("its budget of {limit} turns a day"),
                "/budget turns N",
                format!("pincer groups set {group} --budget-turns N"),
            ),
        };
        format!(
            "⏸ The agent has reached {what}. Messages wait and are answered from {until}, or as soon as \
             the budget is raised (by an admin here: `{here}`; by the operator: `{raise}`)."
        )
    }
}

fn usd(cents: u64) -> String {
    format!("${}.{:02}", cents / 100, cents % 100)
}

fn dollars(usd: f64) -> String {
    format!("${usd:.2}")
}

/// How much of each part of `budget` `spent` used (1.0 = reached), for the
/// parts that are set: `day_usd`, `month_usd`, `day_turns`. A limit of 0 is
/// reached at once.
pub fn used(budget: &Budget, spent: &Spent) -> Vec<(&'static str, f64)> {
    let ratio = |spent: f64, limit: f64| if limit > 0.0 { spent / limit } else { 1.0 };
    [
        budget.daily_cents.map(|c| ("day_usd", ratio(spent.today_usd * 100.0, c as f64))),
        budget.monthly_cents.map(|c| ("month_usd", ratio(spent.month_usd * 100.0, c as f64))),
        budget.daily_turns.map(|t| ("day_turns", ratio(f64::from(spent.today_turns), f64::from(t)))),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The first part of `budget` that `spent` has reached, if any.
pub fn reached(budget: &Budget, spent: &Spent, periods: &Periods) -> Option<Reached> {
    let at_least = |spent_usd: f64, limit_cents: u64| spent_usd * 100.0 >= limit_cents as f64;
    if let Some(limit) = budget.monthly_cents.filter(|l| at_least(spent.month_usd, *l)) {
        return Some(Reached::Monthly {
            limit_cents: limit,
            spent_usd: spent.month_usd,
            until_us: periods.next_month_us,
        });
    }
    if let Some(limit) = budget.daily_cents.filter(|l| at_least(spent.today_usd, *l)) {
        return Some(Reached::Daily { limit_cents: limit, spent_usd: spent.today_usd, until_us: periods.next_day_us });
    }
    if let Some(limit) = budget.daily_turns.filter(|l| spent.today_turns >= *l) {
        return Some(Reached::Turns { limit, until_us: periods.next_day_us });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn use_is_a_ratio_per_part_that_is_set() {
        let budget = Budget { daily_cents: Some(500), daily_turns: Some(0), ..Budget::default() };
        let spent = Spent { today_usd: 1.25, month_usd: 9.0, today_turns: 3 };
        assert_eq!(used(&budget, &spent), [("day_usd", 0.25), ("day_turns", 1.0)]);
        assert!(used(&Budget::default(), &spent).is_empty());
    }

    fn periods() -> Periods {
        Periods { day_start_us: 0, next_day_us: 86_400_000_000, month_start_us: 0, next_month_us: 2_592_000_000_000 }
    }

    #[test]
    fn the_first_reached_part_says_until_when() {
        let budget = Budget { daily_cents: Some(500), monthly_cents: Some(5000), daily_turns: Some(3) };
        let spent = Spent { today_usd: 4.99, month_usd: 20.0, today_turns: 2 };
        assert_eq!(reached(&budget, &spent, &periods()), None, "under every part");
        let over_day = Spent { today_usd: 5.0, ..spent };
        assert!(matches!(
            reached(&budget, &over_day, &periods()),
            Some(Reached::Daily { until_us: 86_400_000_000, .. })
        ));
        let over_month = Spent { month_usd: 50.01, ..over_day };
        let month = reached(&budget, &over_month, &periods()).unwrap();
        assert!(matches!(month, Reached::Monthly { .. }), "the month outlasts the day: {month:?}");
        let turns = Spent { today_turns: 3, ..spent };
        assert!(matches!(reached(&budget, &turns, &periods()), Some(Reached::Turns { limit: 3, .. })));
        assert_eq!(reached(&Budget::default(), &over_month, &periods()), None, "no budget, no limit");
    }

    #[test]
    fn the_proxy_counts_only_what_the_results_did_not() {
        let spent = Spent { today_usd: 2.0, month_usd: 10.0, today_turns: 4 };
        let proxied = Proxied { today_usd: 3.5, month_usd: 9.0 };
        let counted = spent.counting_proxy(proxied);
        assert_eq!(counted, Spent { today_usd: 3.5, month_usd: 10.0, today_turns: 4 }, "never both added");
        assert_eq!(spent.counting_proxy(Proxied::default()), spent, "an unconfined group: its results");
        let budget = Budget { daily_cents: Some(300), ..Budget::default() };
        assert!(reached(&budget, &spent, &periods()).is_none());
        assert!(matches!(reached(&budget, &counted, &periods()), Some(Reached::Daily { .. })));
    }

    #[test]
    fn a_groups_own_parts_win_over_the_default() {
        let default = Budget { daily_cents: Some(500), monthly_cents: Some(5000), daily_turns: None };
        let own = Budget { daily_cents: Some(1000), ..Budget::default() };
        assert_eq!(own.over(default), Budget { daily_cents: Some(1000), monthly_cents: Some(5000), daily_turns: None });
        assert_eq!(cents(5.0), Some(500));
        assert_eq!(cents(0.125), Some(13));
        assert_eq!(cents(-1.0), None);
        assert_eq!(cents(f64::NAN), None);
    }

    #[test]
    fn periods_begin_at_local_midnight_and_the_month_rolls_over_the_year() {
        let tz: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
        // 2026-12-31 23:30 UTC is 2027-01-01 00:30 in Berlin.
        let now = UNIX_EPOCH + Duration::from_secs(1_798_759_800);
        let p = Periods::at(now, tz);
        assert_eq!(p.day_start_us, 1_798_758_000 * 1_000_000, "2026-12-31 23:00 UTC");
        assert_eq!(p.next_day_us, 1_798_844_400 * 1_000_000);
        assert_eq!(p.month_start_us, p.day_start_us, "January began at that midnight");
        assert_eq!(p.next_month_us, 1_801_436_400 * 1_000_000, "2027-01-31 23:00 UTC");
    }

    #[test]
    fn the_chat_is_told_what_is_reached_until_when_and_how_to_raise_it() {
        let r = Reached::Daily { limit_cents: 500, spent_usd: 5.123, until_us: 0 };
        let text = r.chat_text("00:00 (in 3h 12m)", "family");
        assert!(text.contains("budget of $5.00 a day ($5.12 spent today)"), "{text}");
        assert!(text.contains("answered from 00:00 (in 3h 12m)"), "{text}");
        assert!(text.contains("pincer groups set family --budget-daily AMOUNT"), "{text}");
    }
}

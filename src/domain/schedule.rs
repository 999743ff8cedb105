//! What a schedule is, and when it runs next: a pure function of the schedule
//! and a time, so it is tested directly (DST included) and the scheduler only
//! waits. Cron expressions are croner's (5 fields, no seconds), zones chrono-tz's.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::domain::GroupName;

/// Row id of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleId(pub i64);

impl fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// When a schedule fires.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// A 5-field cron expression, read in `tz`.
    Cron { expr: String, tz: Tz, cron: Box<Cron> },
    /// Every `Duration`, counted from the last run.
    Interval(Duration),
    /// Once, at this instant.
    Once(DateTime<Utc>),
}

impl PartialEq for Trigger {
    fn eq(&self, other: &Self) -> bool {
        (self.kind(), self.value(), self.tz()) == (other.kind(), other.value(), other.tz())
    }
}

/// A schedule's time could not be understood; the text says what to write instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TriggerError {
    #[error("invalid cron expression {expr:?}: {why}. Use 5 fields: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"")]
    Cron { expr: String, why: String },
    #[error("unknown time zone {0:?}: use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    Zone(String),
    #[error("invalid interval {0:?}: use a duration such as \"30m\", \"2h\" or \"1day\"")]
    Interval(String),
    #[error("the interval must be at least 1s")]
    IntervalTooShort,
    #[error("invalid time {0:?}: use RFC 3339 (\"2026-12-01T09:00:00+01:00\") or a local time (\"2026-12-01T09:00\") in the configured time zone")]
    Time(String),
    #[error("{time} does not exist in {tz}: the clocks skip it (daylight saving time); pick another time")]
    SkippedTime { time: String, tz: String },
    #[error("{0} is in the past; a one-time schedule needs a future time")]
    Past(String),
    #[error("unknown schedule type {0:?}: use \"cron\", \"interval\" or \"once\"")]
    Kind(String),
    #[error("the cron expression {0:?} never matches a future time")]
    Never(String),
}

impl Trigger {
    pub fn cron(expr: &str, tz: &str) -> Result<Trigger, TriggerError> {
        let tz = parse_zone(tz)?;
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let cron = parser.parse(expr).map_err(|e| TriggerError::Cron { expr: expr.to_owned(), why: e.to_string() })?;
        Ok(Trigger::Cron { expr: expr.trim().to_owned(), tz, cron: Box::new(cron) })
    }

    pub fn interval(text: &str) -> Result<Trigger, TriggerError> {
        let every = humantime::parse_duration(text.trim()).map_err(|_| TriggerError::Interval(text.to_owned()))?;
        if every < Duration::from_secs(1) {
            return Err(TriggerError::IntervalTooShort);
        }
        Ok(Trigger::Interval(every))
    }

    /// An RFC 3339 time, or a local time without offset read in `tz`.
    pub fn once(text: &str, tz: &str) -> Result<Trigger, TriggerError> {
        let text = text.trim();
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(Trigger::Once(at.with_timezone(&Utc)));
        }
        let zone = parse_zone(tz)?;
        let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
            .ok_or_else(|| TriggerError::Time(text.to_owned()))?;
        match zone.from_local_datetime(&naive) {
            LocalResult::Single(at) => Ok(Trigger::Once(at.with_timezone(&Utc))),
            // A time the clocks pass twice (autumn): the first pass, as cron does.
            LocalResult::Ambiguous(first, _) => Ok(Trigger::Once(first.with_timezone(&Utc))),
            LocalResult::None => Err(TriggerError::SkippedTime { time: text.to_owned(), tz: tz.to_owned() }),
        }
    }

    /// The form the agent's tool and the store use: a kind and a value.
    pub fn parse(kind: &str, value: &str, tz: &str) -> Result<Trigger, TriggerError> {
        match kind {
            "cron" => Trigger::cron(value, tz),
            "interval" => Trigger::interval(value),
            "once" => Trigger::once(value, tz),
            other => Err(TriggerError::Kind(other.to_owned())),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Cron { .. } => "cron",
            Trigger::Interval(_) => "interval",
            Trigger::Once(_) => "once",
        }
    }

    /// The value as stored (and shown): the expression, the duration, the UTC time.
    pub fn value(&self) -> String {
        match self {
            Trigger::Cron { expr, .. } => expr.clone(),
            Trigger::Interval(every) => humantime::format_duration(*every).to_string(),
            Trigger::Once(at) => at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }

    pub fn tz(&self) -> Option<String> {
        match self {
            Trigger::Cron { tz, .. } => Some(tz.name().to_owned()),
            _ => None,
        }
    }

    /// The next time this fires strictly after `after`, or `None` when it
    /// never will again (a once whose time has come).
    ///
    /// Intervals count from `after` (the time of the last run), not from the
    /// previous planned time: after downtime the next run is computed from now,
    /// so missed runs are not made up one by one.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Trigger::Cron { tz, cron, .. } => {
                cron.find_next_occurrence(&after.with_timezone(tz), false).ok().map(|t| t.with_timezone(&Utc))
            }
            Trigger::Interval(every) => chrono::Duration::from_std(*every).ok().map(|d| after + d),
            Trigger::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// The first run of a new (or resumed) schedule. A once in the past is
    /// refused when created; a resumed one whose time passed runs at once.
    pub fn first_run(&self, now: DateTime<Utc>, creating: bool) -> Result<Option<DateTime<Utc>>, TriggerError> {
        match (self, self.next_after(now)) {
            (Trigger::Once(at), None) if creating => Err(TriggerError::Past(at.to_rfc3339())),
            (Trigger::Once(_), None) => Ok(Some(now)),
            (Trigger::Cron { expr, .. }, None) => Err(TriggerError::Never(expr.clone())),
            (_, next) => Ok(next),
        }
    }

    /// For people: "cron 0 9 * * 1-5 (Europe/Berlin)", "every 2h", "once at …".
    pub fn describe(&self) -> String {
        match self {
            Trigger::Cron { expr, tz, .. } => format!("cron {expr} ({})", tz.name()),
            Trigger::Interval(_) => format!("every {}", self.value()),
            Trigger::Once(_) => format!("once at {}", self.value()),
        }
    }
}

fn parse_zone(tz: &str) -> Result<Tz, TriggerError> {
    Tz::from_str(tz.trim()).map_err(|_| TriggerError::Zone(tz.to_owned()))
}

/// Checks a configured zone name (`timezone` in pincer.toml).
pub fn valid_zone(tz: &str) -> bool {
    parse_zone(tz).is_ok()
}

/// Where a scheduled prompt runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextMode {
    /// In the group's live session, like a chat message: it sees the conversation.
    Group,
    /// In a fresh session just for this run; the group's session is untouched.
    Isolated,
}

impl ContextMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextMode::Group => "group",
            ContextMode::Isolated => "isolated",
        }
    }

    pub fn parse(s: &str) -> Option<ContextMode> {
        match s {
            "group" => Some(ContextMode::Group),
            "isolated" => Some(ContextMode::Isolated),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleStatus {
    Active,
    Paused,
    /// A once that ran.
    Completed,
    Cancelled,
}

impl ScheduleStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleStatus::Active => "active",
            ScheduleStatus::Paused => "paused",
            ScheduleStatus::Completed => "completed",
            ScheduleStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ScheduleStatus> {
        [ScheduleStatus::Active, ScheduleStatus::Paused, ScheduleStatus::Completed, ScheduleStatus::Cancelled]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// A schedule as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub id: ScheduleId,
    pub group: GroupName,
    pub prompt: String,
    pub trigger: Trigger,
    pub context: ContextMode,
    pub status: ScheduleStatus,
    pub next_run: Option<DateTime<Utc>>,
    pub last_run: Option<DateTime<Utc>>,
    /// Failed runs in a row.
    pub failures: u32,
}

impl Schedule {
    /// Due at `now`: active with its time come. A schedule that missed several
    /// runs while pincer was down is due once, not once per missed run.
    pub fn is_due(&self, now: DateTime<Utc>) -> bool {
        self.status == ScheduleStatus::Active && self.next_run.is_some_and(|at| at <= now)
    }

    /// One line for people and for the agent's `list_tasks`.
    pub fn describe(&self) -> String {
        let time = |t: Option<DateTime<Utc>>| {
            t.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        };
        format!(
            "#{} [{}] group {} · {} · {} context · next {} · last {} · {}",
            self.id,
            self.status.as_str(),
            self.group,
            self.trigger.describe(),
            self.context.as_str(),
            time(self.next_run),
            time(self.last_run),
            self.prompt
        )
    }
}

#[cfg(test)]
mod tests;

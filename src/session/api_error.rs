//! What a failed turn means for the chat: the CLI's report of an API error
//! (or of an interrupted turn) sorted into a [`TurnFailure`], and the one line
//! the chat gets for it, which says what happened, that the message was not
//! answered, and what to do. No I/O: the actor decides, this module words it.
//!
//! The CLI retries overloaded, server and rate-limit errors by itself (printing
//! `system/api_retry` frames); a failed result means it has given up.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::claude::protocol::{ApiErrorReport, RateLimitInfo, TurnEnd};
use crate::domain::TurnResult;

/// Why a turn ended without an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnFailure {
    /// 529: the API is overloaded.
    Overloaded,
    /// A 5xx other than 529, or no answer at all (`status: None`).
    ServerError { status: Option<u16> },
    /// 429: a rate limit (requests or tokens per minute), not the account's usage limit.
    RateLimited,
    /// The account's usage limit (a plan's 5-hour or weekly limit, a spend cap).
    UsageLimit(UsageLimit),
    /// 401, or the CLI has no credential at all (`status: None`).
    Credentials { status: Option<u16> },
    /// 402/403: billing or permission.
    Refused { status: u16 },
    /// Any other status the API refused the request with (400, 404, 413, ...).
    Rejected { status: u16 },
    /// The turn was interrupted (`/stop`, or pincer's own turn timeout).
    Interrupted,
    /// Anything else the CLI reports as an error (e.g. `error_max_turns`): its own words are kept.
    Other,
}

/// A usage limit and when it resets, as far as the CLI said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageLimit {
    pub resets_at: Option<SystemTime>,
    /// The CLI's name for it: `five_hour`, `seven_day`, `seven_day_opus`, ...
    pub limit_type: Option<String>,
}

/// What pincer does about a usage limit, for the chat's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitPlan {
    /// The messages are written again once, at this time.
    ResendAt(SystemTime),
    /// They were already sent again once after a limit: pincer gives up on them.
    GaveUp,
    /// Not sent again: the reset time is unknown, or a scheduled run waits
    /// for it (the scheduler retries runs by its own rule).
    NotResent,
}

/// What a turn printed about an API error before its `result`: the synthetic
/// error message, and a rejected `rate_limit_event` (printed only when the
/// state changes, so a second refusal in a row has none).
#[derive(Debug, Default)]
pub struct Seen(Option<ApiErrorReport>);

impl Seen {
    pub fn error_message(&mut self, report: ApiErrorReport) {
        self.0 = Some(match self.0.take() {
            Some(earlier) => report.merge(&earlier),
            None => report,
        });
    }

    pub fn rate_limit(&mut self, info: RateLimitInfo) {
        if info.status != "rejected" {
            return;
        }
        let report = self.0.get_or_insert_with(ApiErrorReport::default);
        if report.limit.is_none() {
            report.limit = Some(info);
        }
    }

    /// What was seen, for the result that ends the turn; the next turn starts empty.
    pub fn take(&mut self) -> Option<ApiErrorReport> {
        self.0.take()
    }
}

/// Sorts a failed result. `seen` is what the same turn printed before its
/// result (the synthetic API error message, a rejected `rate_limit_event`),
/// which carries the reset time that the result itself leaves out.
pub fn classify(result: &TurnResult, end: &TurnEnd, seen: Option<&ApiErrorReport>) -> Option<TurnFailure> {
    if !result.is_error {
        return None;
    }
    let report = match (&end.api_error, seen) {
        (Some(on_result), Some(seen)) => Some(on_result.clone().merge(seen)),
        (Some(on_result), None) => Some(on_result.clone()),
        // An error message alone, without API fields on the result: trust it
        // only if the turn really ended on an API error.
        (None, Some(seen)) if end.terminal_reason.as_deref() == Some("api_error") => Some(seen.clone()),
        (None, _) => None,
    };
    let Some(report) = report else {
        return Some(without_report(result, end));
    };
    let category = report.category.as_deref();
    let failure = if report.kind.as_deref() == Some("usage_limit_reached") {
        let limit = report.limit.as_ref();
        TurnFailure::UsageLimit(UsageLimit {
            resets_at: limit.and_then(|l| l.resets_at).and_then(unix_time),
            limit_type: limit.and_then(|l| l.limit_type.clone()),
        })
    } else {
        match report.status {
            Some(529) => TurnFailure::Overloaded,
            _ if report.error_type.as_deref() == Some("overloaded_error") => TurnFailure::Overloaded,
            Some(429) => TurnFailure::RateLimited,
            Some(401) => TurnFailure::Credentials { status: Some(401) },
            Some(status @ (402 | 403)) => TurnFailure::Refused { status },
            Some(status @ 500..=599) => TurnFailure::ServerError { status: Some(status) },
            Some(status) => TurnFailure::Rejected { status },
            None if category == Some("authentication_failed") => TurnFailure::Credentials { status: None },
            None => TurnFailure::ServerError { status: None },
        }
    };
    Some(failure)
}

/// A failed result without API fields: an interrupt, missing credentials, or
/// something only the CLI's text explains.
fn without_report(result: &TurnResult, end: &TurnEnd) -> TurnFailure {
    let text = result.text.as_deref().unwrap_or_default();
    if end.terminal_reason.as_deref().is_some_and(|r| r.starts_with("aborted")) {
        TurnFailure::Interrupted
    } else if text.contains("Not logged in") || text.contains("Invalid API key") {
        TurnFailure::Credentials { status: None }
    } else {
        TurnFailure::Other
    }
}

/// The latest `resetsAt` taken as a time (9999-12-30T23:59:59Z): a day short of
/// the last second chrono and humantime can print, so a reset plus pincer's
/// margin still can be. A later one (or a negative one, or milliseconds where
/// seconds belong) is no time pincer can name or wait for: it reads as unknown.
const LATEST_RESET: u64 = 253_402_214_399;

fn unix_time(seconds: i64) -> Option<SystemTime> {
    let seconds = u64::try_from(seconds).ok().filter(|&s| s <= LATEST_RESET)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// When messages a usage limit refused go out again, and how long from `now`
/// that is: `margin` after `reset`, and a reset already past (a clock behind
/// the API's) still waits the margin. `None` when that time cannot be
/// represented; then the messages are not held.
pub fn resend_at(reset: SystemTime, now: SystemTime, margin: Duration) -> Option<(SystemTime, Duration)> {
    let at = reset.max(now).checked_add(margin)?;
    Some((at, at.duration_since(now).unwrap_or_default()))
}

/// "your message was not answered", for as many messages as the turn held.
fn not_answered(messages: usize) -> String {
    match messages {
        0 => "the agent's turn was not finished".to_owned(),
        1 => "your message was not answered".to_owned(),
        n => format!("your {n} messages were not answered"),
    }
}

/// "Send it again", for as many messages as the turn held.
fn send_again(messages: usize) -> &'static str {
    match messages {
        0 => "Ask again",
        1 => "Send it again",
        _ => "Send them again",
    }
}

impl TurnFailure {
    /// Its kind as a metrics label (a fixed set).
    pub fn kind(&self) -> &'static str {
        match self {
            TurnFailure::Overloaded => "overloaded",
            TurnFailure::ServerError { .. } => "server_error",
            TurnFailure::RateLimited => "rate_limited",
            TurnFailure::UsageLimit(_) => "usage_limit",
            TurnFailure::Credentials { .. } => "credentials",
            TurnFailure::Refused { .. } => "refused",
            TurnFailure::Rejected { .. } => "rejected",
            TurnFailure::Interrupted => "interrupted",
            TurnFailure::Other => "other",
        }
    }

    /// The chat's line for a failed turn that held `messages` messages.
    /// A usage limit is worded by [`usage_limit_text`], which needs pincer's plan.
    pub fn chat_text(&self, result: &TurnResult, messages: usize, zone: Tz) -> String {
        let not_answered = not_answered(messages);
        let again = send_again(messages);
        // The CLI's own words for refusals the operator must act on.
        let cli_text =
            result.text.as_deref().map(|t| t.trim().trim_start_matches("API Error: ")).filter(|t| !t.is_empty());
        let said = cli_text.map(|t| format!(": {t}")).unwrap_or_default();
        match self {
            TurnFailure::Overloaded => format!(
                "The Anthropic API is overloaded (529) and the agent gave up after retrying, so {not_answered}. \
                 {again} in a few minutes."
            ),
            TurnFailure::ServerError { status: Some(status) } => format!(
                "The Anthropic API failed with a server error ({status}) and the agent gave up after retrying, \
                 so {not_answered}. {again} in a few minutes; if it keeps failing, see status.anthropic.com \
                 and pincer's log."
            ),
            TurnFailure::ServerError { status: None } => format!(
                "The Anthropic API could not be reached or did not answer, so {not_answered}. {again} in a few \
                 minutes; if it keeps failing, check the network and pincer's log."
            ),
            TurnFailure::RateLimited => format!(
                "The Anthropic API is rate-limiting this account (429) and the agent gave up after waiting and \
                 retrying, so {not_answered}. {again} in a minute; if this happens often, the account's rate \
                 limits are too low for how much the groups send."
            ),
            TurnFailure::UsageLimit(limit) => {
                usage_limit_text(limit, LimitPlan::NotResent, messages, zone, SystemTime::now())
            }
            TurnFailure::Credentials { status } => {
                let code = status.map(|s| format!(" ({s})")).unwrap_or_default();
                format!(
                    "The Anthropic API refused the agent's credentials{code}, so {not_answered}. Give pincer a \
                     valid ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) in its environment, or `[anthropic] \
                     api_key` in pincer.toml, restart pincer, then {}.",
                    again.to_lowercase()
                )
            }
            TurnFailure::Refused { status } => format!(
                "The Anthropic API refused the request ({status}{said}), so {not_answered}. Check the account's \
                 billing and permissions, then {}.",
                again.to_lowercase()
            ),
            TurnFailure::Rejected { status } => format!(
                "The Anthropic API rejected the request ({status}{said}), so {not_answered}. {again}; if it keeps \
                 failing, /new starts a fresh session."
            ),
            TurnFailure::Interrupted => {
                format!("The agent's turn was interrupted before it finished, so {not_answered}.")
            }
            TurnFailure::Other => result.chat_text(),
        }
    }
}

/// The chat's line for a usage limit, with what pincer does about it.
pub fn usage_limit_text(limit: &UsageLimit, plan: LimitPlan, messages: usize, zone: Tz, now: SystemTime) -> String {
    let which = limit.limit_type.as_deref().map(|t| format!(" ({})", limit_name(t))).unwrap_or_default();
    let at = |t: SystemTime| local_time(t, zone, now);
    let one = messages <= 1;
    match plan {
        LimitPlan::ResendAt(when) => format!(
            "Usage limit reached{which}. I'll send your {} again at {} — /stop cancels.",
            if one { "message" } else { "messages" },
            at(when)
        ),
        LimitPlan::GaveUp => {
            let reset = limit.resets_at.map(|t| format!(" It now resets at {}.", at(t))).unwrap_or_default();
            format!(
                "Usage limit reached again{which} when your {} went out a second time, so pincer gave up on {} \
                 ({} in the history).{reset} {} then.",
                if one { "message" } else { "messages" },
                if one { "it" } else { "them" },
                if one { "it stays" } else { "they stay" },
                send_again(messages)
            )
        }
        LimitPlan::NotResent => {
            let until = limit.resets_at.map(|t| format!(" until {}", at(t))).unwrap_or_default();
            let after = if limit.resets_at.is_some() { "after that" } else { "once the limit resets" };
            format!(
                "Usage limit reached{which}{until}, so {}. {} {after}.",
                not_answered(messages),
                send_again(messages)
            )
        }
    }
}

/// `five_hour` → `5-hour limit`, as the CLI says it.
fn limit_name(limit_type: &str) -> String {
    match limit_type {
        "five_hour" => "5-hour limit".to_owned(),
        "seven_day" => "weekly limit".to_owned(),
        "seven_day_opus" => "weekly Opus limit".to_owned(),
        "seven_day_sonnet" => "weekly Sonnet limit".to_owned(),
        other => format!("{} limit", other.replace('_', " ")),
    }
}

/// `15:00 (Europe/Berlin)`, with the day when it is not today there.
/// A time chrono cannot hold (before 1970 or past its range) reads as unknown.
pub fn local_time(at: SystemTime, zone: Tz, now: SystemTime) -> String {
    let (Some(at), Some(now)) = (utc(at), utc(now)) else {
        return "an unknown time".to_owned();
    };
    let at = at.with_timezone(&zone);
    let today = now.with_timezone(&zone).date_naive();
    if at.date_naive() == today {
        format!("{} ({zone})", at.format("%H:%M"))
    } else {
        format!("{} ({zone})", at.format("%a %-d %b %H:%M"))
    }
}

/// `t` as chrono's UTC time, without `From`'s panic on times out of its range.
fn utc(t: SystemTime) -> Option<DateTime<Utc>> {
    let seconds = i64::try_from(t.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs()).ok()?;
    DateTime::from_timestamp(seconds, 0)
}

#[cfg(test)]
mod tests;

//! Classification checked on what the real CLI printed (recorded against a
//! fake API in `tests/data/api-errors-2.1.330/`, see its README).

use std::fs;
use std::path::PathBuf;

use super::*;
use crate::claude::protocol::{parse_line, CliEvent};

/// Every turn of a recorded stdout: its result, how it ended, what came before it.
fn turns(name: &str) -> Vec<(TurnResult, TurnEnd, Option<ApiErrorReport>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/api-errors-2.1.330").join(name);
    let mut seen = Seen::default();
    let mut out = Vec::new();
    for line in fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).lines() {
        match parse_line(line).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            CliEvent::ApiErrorMessage(report) => seen.error_message(report),
            CliEvent::RateLimit(info) => seen.rate_limit(info),
            CliEvent::Result { result, end } => out.push((result, end, seen.take())),
            _ => {}
        }
    }
    out
}

fn classified(name: &str) -> Vec<Option<TurnFailure>> {
    turns(name).iter().map(|(r, end, seen)| classify(r, end, seen.as_ref())).collect()
}

#[test]
fn the_recorded_api_errors_are_told_apart() {
    assert_eq!(classified("529-gave-up.stdout.jsonl"), [Some(TurnFailure::Overloaded)]);
    assert_eq!(classified("500-recovered.stdout.jsonl"), [None], "retried by the CLI, then answered");
    assert_eq!(classified("429-retry-after.stdout.jsonl"), [Some(TurnFailure::RateLimited)]);
    assert_eq!(classified("401-refused.stdout.jsonl"), [Some(TurnFailure::Credentials { status: Some(401) })]);
    assert_eq!(classified("403-billing.stdout.jsonl"), [Some(TurnFailure::Refused { status: 403 })]);
    assert_eq!(classified("interrupted-hang.stdout.jsonl"), [Some(TurnFailure::Interrupted), None]);
}

#[test]
fn a_usage_limit_carries_its_reset_even_when_no_rate_limit_event_repeats_it() {
    let reset = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_399_662);
    let limit = TurnFailure::UsageLimit(UsageLimit { resets_at: Some(reset), limit_type: Some("five_hour".into()) });
    // The second refusal has no rate_limit_event before it; the error message still says when.
    assert_eq!(classified("usage-limit.stdout.jsonl"), [Some(limit.clone()), Some(limit), None]);
}

#[test]
fn the_reset_comes_from_a_rate_limit_event_when_the_error_message_lacks_it() {
    let mut seen = Seen::default();
    seen.rate_limit(RateLimitInfo { status: "allowed".into(), resets_at: Some(1), limit_type: None });
    seen.rate_limit(RateLimitInfo { status: "rejected".into(), resets_at: Some(2_000_000_000), limit_type: None });
    seen.error_message(ApiErrorReport {
        status: Some(429),
        kind: Some("usage_limit_reached".into()),
        ..Default::default()
    });
    let (result, end, _) = turns("usage-limit.stdout.jsonl").remove(0);
    match classify(&result, &end, seen.take().as_ref()) {
        Some(TurnFailure::UsageLimit(l)) => {
            assert_eq!(l.resets_at, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000)));
        }
        other => panic!("{other:?}"),
    }
    assert!(seen.take().is_none(), "the next turn starts empty");
}

/// A usage limit whose `resetsAt` is `resets_at`, classified as the actor does.
fn limit_resetting_at(resets_at: i64) -> UsageLimit {
    let mut seen = Seen::default();
    seen.error_message(ApiErrorReport {
        status: Some(429),
        kind: Some("usage_limit_reached".into()),
        ..Default::default()
    });
    seen.rate_limit(RateLimitInfo { status: "rejected".into(), resets_at: Some(resets_at), limit_type: None });
    let (result, end, _) = turns("usage-limit.stdout.jsonl").remove(0);
    match classify(&result, &end, seen.take().as_ref()) {
        Some(TurnFailure::UsageLimit(limit)) => limit,
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_odd_reset_time_reads_as_unknown_and_every_line_is_still_worded() {
    let zone: Tz = "Europe/Berlin".parse().unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_618_000);
    // Past chrono's range, past year 9999, i64::MAX, milliseconds where seconds belong, before 1970.
    for odd in [10_000_000_000_000, 253_402_300_800, i64::MAX, 1_767_618_000_000, -1, i64::MIN] {
        let limit = limit_resetting_at(odd);
        for plan in [LimitPlan::NotResent, LimitPlan::GaveUp, LimitPlan::ResendAt(now)] {
            let text = usage_limit_text(&limit, plan, 1, zone, now);
            assert!(text.starts_with("Usage limit reached"), "{odd}: {text}");
        }
        assert_eq!(limit.resets_at, None, "{odd}");
    }
    // The latest reset still taken can be waited for and named, margin included.
    let latest = limit_resetting_at(253_402_214_399).resets_at.expect("9999-12-30 is a time");
    let (at, _) = resend_at(latest, now, Duration::from_secs(2)).expect("a representable resend");
    assert!(local_time(at, zone, now).contains("Dec"), "{}", local_time(at, zone, now));
    humantime::format_rfc3339_seconds(at).to_string();
}

#[test]
fn a_resend_waits_the_margin_after_the_reset_and_never_overflows() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_618_000);
    let margin = Duration::from_secs(2);
    let reset = now + Duration::from_secs(3600);
    assert_eq!(resend_at(reset, now, margin), Some((reset + margin, Duration::from_secs(3602))));
    // A reset already past (a clock behind the API's) still waits the margin.
    let past = now - Duration::from_secs(60);
    assert_eq!(resend_at(past, now, margin), Some((now + margin, margin)));
    // A reset no clock can add the margin to is not held.
    let last = SystemTime::UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
    assert_eq!(resend_at(last, now, margin), None);
    // A time chrono cannot hold is worded, not a panic.
    assert_eq!(local_time(last, "UTC".parse().unwrap(), now), "an unknown time");
}

#[test]
fn every_line_says_what_happened_and_that_the_message_was_not_answered() {
    let zone: Tz = "UTC".parse().unwrap();
    for (file, needle) in [
        ("529-gave-up.stdout.jsonl", "overloaded (529)"),
        ("429-retry-after.stdout.jsonl", "rate-limiting this account (429)"),
        ("401-refused.stdout.jsonl", "refused the agent's credentials (401)"),
        ("403-billing.stdout.jsonl", "(403: Credit balance is too low)"),
        ("interrupted-hang.stdout.jsonl", "interrupted"),
    ] {
        let (result, end, seen) = turns(file).remove(0);
        let failure = classify(&result, &end, seen.as_ref()).unwrap();
        let text = failure.chat_text(&result, 1, zone);
        assert!(text.contains(needle), "{file}: {text}");
        assert!(text.contains("your message was not answered"), "{file}: {text}");
        // The CLI's hint names the proxy's loopback address, which means nothing in a chat.
        assert!(!text.contains("127.0.0.1"), "{file}: {text}");
    }
}

#[test]
fn usage_limit_lines_name_the_time_in_the_zone_and_the_plan() {
    let zone: Tz = "Europe/Berlin".parse().unwrap();
    // 2026-01-05 13:00 UTC = 14:00 in Berlin.
    let reset = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_618_000);
    let now = reset - Duration::from_secs(3600);
    let limit = UsageLimit { resets_at: Some(reset), limit_type: Some("five_hour".into()) };
    let planned = usage_limit_text(&limit, LimitPlan::ResendAt(reset), 1, zone, now);
    assert_eq!(
        planned,
        "Usage limit reached (5-hour limit). I'll send your message again at 14:00 (Europe/Berlin) — /stop cancels."
    );
    let gave_up = usage_limit_text(&limit, LimitPlan::GaveUp, 2, zone, now);
    assert!(gave_up.contains("gave up on them") && gave_up.contains("14:00 (Europe/Berlin)"), "{gave_up}");
    let later = usage_limit_text(&limit, LimitPlan::NotResent, 1, zone, now - Duration::from_secs(86_400));
    assert!(later.contains("until Mon 5 Jan 14:00 (Europe/Berlin)"), "another day names the day: {later}");
    let unknown = UsageLimit { resets_at: None, limit_type: None };
    let text = usage_limit_text(&unknown, LimitPlan::NotResent, 1, zone, now);
    assert_eq!(text, "Usage limit reached, so your message was not answered. Send it again once the limit resets.");
}

#[test]
fn a_successful_result_is_no_failure_and_a_bare_error_keeps_the_clis_words() {
    let (ok, end, _) = turns("500-recovered.stdout.jsonl").remove(0);
    assert_eq!(classify(&ok, &end, None), None);
    let other = TurnResult { is_error: true, subtype: "error_max_turns".into(), text: None, ..ok };
    let failure = classify(&other, &TurnEnd::default(), None).unwrap();
    assert_eq!(failure, TurnFailure::Other);
    assert_eq!(failure.chat_text(&other, 1, "UTC".parse().unwrap()), other.chat_text());
}

#[test]
fn a_refusal_quotes_the_api_without_the_clis_prefix() {
    let (result, _, _) = turns("529-gave-up.stdout.jsonl").remove(0);
    let bad_request = TurnResult { text: Some("API Error: 400 prompt is too long".into()), ..result };
    let text = TurnFailure::Rejected { status: 400 }.chat_text(&bad_request, 1, "UTC".parse().unwrap());
    assert!(text.starts_with("The Anthropic API rejected the request (400: 400 prompt is too long)"), "{text}");
    assert!(text.contains("/new starts a fresh session"), "{text}");
}

//! The deadline's rules, on tokio's paused clock.

use super::*;
use tokio::time::advance;

const TTL: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(2);

fn deadline() -> Deadline {
    Deadline::new(TTL - MARGIN)
}

#[tokio::test(start_paused = true)]
async fn nothing_may_run_before_the_first_renewal_succeeds() {
    let mut d = deadline();
    assert!(d.expired(Instant::now()));
    assert_eq!(d.left(Instant::now()), Duration::ZERO);
    assert_eq!(d.guard_kill_after(Instant::now()), None);
    let _unanswered = d.renewal_sent(Instant::now());
    assert!(d.expired(Instant::now()), "a renewal sent is not a renewal that succeeded");
}

#[tokio::test(start_paused = true)]
async fn regular_renewals_keep_the_node_alive() {
    let mut d = deadline();
    for _ in 0..20 {
        let sent = d.renewal_sent(Instant::now());
        advance(Duration::from_millis(30)).await;
        assert_eq!(d.renewal_succeeded(sent, Instant::now()), Renewed::Alive);
        assert!(!d.expired(Instant::now()));
        advance(Duration::from_secs(2)).await;
    }
    assert_eq!(d.left(Instant::now()), TTL - MARGIN - Duration::from_millis(2030));
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_expire_exactly_at_the_last_success_send_plus_ttl_minus_margin() {
    let mut d = deadline();
    let good = d.renewal_sent(Instant::now());
    advance(Duration::from_millis(500)).await;
    assert_eq!(d.renewal_succeeded(good, Instant::now()), Renewed::Alive);
    let expected = good.at() + TTL - MARGIN;
    assert_eq!(d.until(), Some(expected));
    for _ in 0..3 {
        advance(Duration::from_secs(2)).await;
        let _failed = d.renewal_sent(Instant::now());
    }
    advance(expected - Instant::now() - Duration::from_millis(1)).await;
    assert!(!d.expired(Instant::now()));
    assert_eq!(d.guard_kill_after(Instant::now()), Some(Duration::from_millis(1)));
    advance(Duration::from_millis(1)).await;
    assert!(d.expired(Instant::now()));
    assert_eq!(d.guard_kill_after(Instant::now()), None);
}

#[tokio::test(start_paused = true)]
async fn a_stale_success_after_a_freeze_does_not_revive_the_node() {
    let mut d = deadline();
    let first = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(first, Instant::now()), Renewed::Alive);
    advance(Duration::from_secs(2)).await;
    let stalled = d.renewal_sent(Instant::now());
    // SIGSTOP-like: the process sleeps 30 s with the answer pending.
    advance(Duration::from_secs(30)).await;
    assert!(d.expired(Instant::now()));
    assert_eq!(d.renewal_succeeded(stalled, Instant::now()), Renewed::Lapsed);
    assert!(d.expired(Instant::now()), "a success for a send 30 s ago must not extend the deadline");
    assert_eq!(d.guard_kill_after(Instant::now()), None);
}

#[tokio::test(start_paused = true)]
async fn a_success_answered_after_the_deadline_ends_the_incarnation_even_if_sent_in_time() {
    let mut d = deadline();
    let first = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(first, Instant::now()), Renewed::Alive);
    advance(TTL - MARGIN - Duration::from_secs(1)).await;
    // Sent a second before the deadline, its commit stuck past it.
    let late = d.renewal_sent(Instant::now());
    advance(Duration::from_secs(1)).await;
    assert_eq!(d.renewal_succeeded(late, Instant::now()), Renewed::Lapsed);
    let fresh = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(fresh, Instant::now()), Renewed::Lapsed, "lapsed for good");
    assert!(d.expired(Instant::now()));
    assert_eq!(d.left(Instant::now()), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_success_answered_just_before_the_deadline_extends_it() {
    let mut d = deadline();
    let first = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(first, Instant::now()), Renewed::Alive);
    advance(TTL - MARGIN - Duration::from_secs(1)).await;
    let sent = d.renewal_sent(Instant::now());
    advance(Duration::from_millis(999)).await;
    assert_eq!(d.renewal_succeeded(sent, Instant::now()), Renewed::Alive);
    assert_eq!(d.until(), Some(sent.at() + TTL - MARGIN));
}

#[tokio::test(start_paused = true)]
async fn a_late_answer_to_an_older_send_never_moves_the_deadline_back() {
    let mut d = deadline();
    let older = d.renewal_sent(Instant::now());
    advance(Duration::from_secs(2)).await;
    let newer = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(newer, Instant::now()), Renewed::Alive);
    assert_eq!(d.renewal_succeeded(older, Instant::now()), Renewed::Alive);
    assert_eq!(d.until(), Some(newer.at() + TTL - MARGIN));
    assert_eq!(d.last_sent(), Some(newer.at()));
}

#[tokio::test(start_paused = true)]
async fn a_refused_renewal_ends_the_incarnation_at_once_and_for_good() {
    let mut d = deadline();
    let first = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(first, Instant::now()), Renewed::Alive);
    advance(Duration::from_secs(2)).await;
    let _refused = d.renewal_sent(Instant::now());
    d.renewal_refused();
    assert!(d.expired(Instant::now()), "well before the deadline a success would have given");
    assert_eq!(d.guard_kill_after(Instant::now()), None);
    let after = d.renewal_sent(Instant::now());
    assert_eq!(d.renewal_succeeded(after, Instant::now()), Renewed::Lapsed);
}

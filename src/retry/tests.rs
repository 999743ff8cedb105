//! The policy's pauses, and loops driven by it under paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn policy() -> RetryPolicy {
    RetryPolicy::new(SECOND, Duration::from_secs(60))
}

#[test]
fn pauses_double_up_to_the_cap_without_overflow() {
    let exact = policy().without_jitter();
    let pauses: Vec<u64> = (1..=9).map(|n| exact.pause(n, None).as_secs()).collect();
    assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert_eq!(exact.pause(u32::MAX, None), Duration::from_secs(60), "no overflow after a long outage");
    assert_eq!(exact.pause(0, None), SECOND);
    let huge = RetryPolicy::new(Duration::from_secs(u64::MAX / 2), Duration::MAX).without_jitter();
    assert_eq!(huge.pause(40, None), Duration::MAX, "saturates, never panics");
}

#[test]
fn jitter_stays_in_the_upper_quarter_of_each_pause() {
    let p = policy();
    for failures in 1..=12 {
        let full = p.without_jitter().pause(failures, None);
        assert_eq!(p.pause_with(failures, None, 0.0), full, "a draw of 0 is the full pause");
        let least = p.pause_with(failures, None, 0.999_999);
        assert!(least >= full * 3 / 4 && least < full, "{least:?} against {full:?}");
        for _ in 0..200 {
            let drawn = p.pause(failures, None);
            assert!(drawn >= full * 3 / 4 && drawn <= full, "{drawn:?} against {full:?}");
        }
    }
}

#[test]
fn jittered_pauses_differ_and_still_grow_until_the_cap() {
    let p = policy();
    let draws: std::collections::HashSet<Duration> = (0..50).map(|_| p.pause(3, None)).collect();
    assert!(draws.len() > 1, "50 draws, one value: no jitter");
    for failures in 1..6 {
        // The least pause after one more failure is above the largest before it.
        assert!(p.pause_with(failures + 1, None, 0.999_999) > p.pause_with(failures, None, 0.0));
    }
    assert!(p.pause(50, None) <= p.cap());
}

#[test]
fn the_other_sides_word_wins_within_bounds() {
    let p = policy();
    assert_eq!(p.pause(1, Some(Duration::from_secs(7))), Duration::from_secs(7), "exactly, no jitter");
    assert_eq!(p.pause(9, Some(Duration::from_secs(90))), Duration::from_secs(90), "past the cap too");
    assert_eq!(p.pause(1, Some(Duration::ZERO)), SECOND, "a Retry-After of 0 does not make a loop spin");
    assert_eq!(p.pause(1, Some(Duration::from_secs(86_400 * 365))), ASKED_AT_MOST);
}

#[test]
fn a_zero_policy_still_pauses() {
    let p = RetryPolicy::new(Duration::ZERO, Duration::ZERO);
    assert!(p.pause(1, None) >= Duration::from_micros(750));
    assert!(p.pause(1, Some(Duration::ZERO)) > Duration::ZERO);
}

#[test]
fn a_success_starts_the_pauses_over() {
    let mut backoff = Backoff::new(policy().without_jitter());
    assert_eq!([backoff.failed(None), backoff.failed(None), backoff.failed(None)], [SECOND, SECOND * 2, SECOND * 4]);
    assert_eq!(backoff.failures(), 3);
    backoff.succeeded();
    assert_eq!(backoff.failed(None), SECOND);
}

/// A loop that fails every time: it tries, then waits, as pincer's loops do.
async fn always_failing(tries: Arc<AtomicU32>, stop: CancellationToken) {
    let mut backoff = Backoff::new(policy());
    loop {
        tries.fetch_add(1, Ordering::SeqCst);
        if !backoff.wait(None, &stop).await {
            return;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_loop_does_not_spin() {
    let (tries, stop) = (Arc::new(AtomicU32::new(0)), CancellationToken::new());
    let task = tokio::spawn(always_failing(tries.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    // Pauses of at least ¾ of 1, 2, 4, ... 60 s: some 15 tries in ten minutes, not thousands.
    let n = tries.load(Ordering::SeqCst);
    assert!((8..=20).contains(&n), "{n} tries in ten minutes");
    let before = Instant::now();
    stop.cancel();
    task.await.unwrap();
    assert_eq!(Instant::now(), before, "a stop ends the wait at once");
}

//! Long polling that confirms an update to Telegram only once pincer handled it.
//!
//! `getUpdates` with `offset = N` confirms every update below `N`: Telegram
//! forgets them. teloxide's own poller asks for the next batch, and so
//! confirms the last one, as soon as it handed the batch on, before anything
//! was stored; a crash in between lost those messages. Here the offset given
//! is the lowest update still being handled, so Telegram sends again whatever
//! pincer had not taken when it died (and the store recognises a message it
//! already took). The updates Telegram sends again meanwhile are skipped.
//!
//! A handler that hangs must not hold every chat: an update in hand for
//! longer than [`HOLD_AT_MOST`] stops holding the offset back, with a warning.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::RequestError;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::shared::Shared;
use super::updates::{Done, Handled, Outcome, Workers, ALLOWED, HOLD_AT_MOST};
use crate::retry::{Backoff, RetryPolicy};

/// How long a poll waits for the updates in hand to be handled, so the next
/// `getUpdates` confirms them, before it asks for more anyway.
const SETTLE: Duration = Duration::from_secs(1);

/// At a stop, how long the updates in hand get to be handled and confirmed.
const LAST_WAIT: Duration = Duration::from_secs(5);

/// Polls until `shutdown`, handing updates to `workers`; a failed poll is
/// tried again after `retry`'s pause (or the one Telegram asks for), and
/// reported through the channel's health meanwhile.
pub(super) async fn run(
    shared: &Arc<Shared>,
    workers: &Arc<Workers>,
    timeout: Duration,
    retry: RetryPolicy,
    shutdown: &CancellationToken,
) {
    // A webhook left from another setup would make every poll fail.
    if let Err(e) = shared.bot.delete_webhook().await {
        tracing::warn!("cannot delete a Telegram webhook before polling: {e}");
    }
    let (tell, mut handled) = mpsc::unbounded_channel();
    let mut book = Book::default();
    let mut backoff = Backoff::new(retry);
    while !shutdown.is_cancelled() {
        settle(&mut book, &mut handled, SETTLE, shutdown).await;
        let mut poll = shared
            .bot
            .get_updates()
            .timeout(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX))
            .allowed_updates(ALLOWED);
        if let Some(offset) = book.offset(Instant::now()) {
            poll = poll.offset(offset);
        }
        let updates = tokio::select! {
            updates = poll.send() => updates,
            _ = shutdown.cancelled() => break,
        };
        match updates {
            Ok(updates) => {
                backoff.succeeded();
                shared.receiving_works().await;
                hand_on(updates, &mut book, workers, &tell).await;
            }
            Err(e) => {
                let asked = match &e {
                    RequestError::RetryAfter(after) => Some(after.duration()),
                    _ => None,
                };
                shared.receive_failed(e.to_string()).await;
                if !backoff.wait(asked, shutdown).await {
                    break;
                }
            }
        }
    }
    settle(&mut book, &mut handled, LAST_WAIT, &CancellationToken::new()).await;
    workers.close();
    confirm_last(shared, &mut book).await;
}

/// Hands each update Telegram did not send before to its chat's worker.
async fn hand_on(updates: Vec<Update>, book: &mut Book, workers: &Arc<Workers>, tell: &mpsc::UnboundedSender<Done>) {
    for update in updates {
        let id = update.id.0;
        if book.take(id, Instant::now()) {
            workers.dispatch(update, Handled::new(id, tell.clone())).await;
        }
    }
}

/// Confirms what was handled at a stop, so the next start does not see it again.
async fn confirm_last(shared: &Shared, book: &mut Book) {
    let Some(offset) = book.offset(Instant::now()) else {
        return;
    };
    let confirm = shared.bot.get_updates().offset(offset).limit(1).timeout(0).send();
    match tokio::time::timeout(LAST_WAIT, confirm).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("cannot confirm the last Telegram updates at the stop: {e}"),
        Err(_) => tracing::debug!("confirming the last Telegram updates at the stop took too long"),
    }
}

/// Waits until no update holds the offset back, for `at_most`.
async fn settle(
    book: &mut Book,
    handled: &mut mpsc::UnboundedReceiver<Done>,
    at_most: Duration,
    shutdown: &CancellationToken,
) {
    let deadline = Instant::now() + at_most;
    loop {
        while let Ok(done) = handled.try_recv() {
            book.done(done, Instant::now());
        }
        if !book.holding(Instant::now()) {
            return;
        }
        tokio::select! {
            Some(done) = handled.recv() => book.done(done, Instant::now()),
            _ = tokio::time::sleep_until(deadline) => return,
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Which updates are in hand and which are handled, and so the offset that
/// confirms exactly what is handled.
#[derive(Debug, Default)]
struct Book {
    /// Updates handed to a worker and not handled yet, with when, and
    /// whether they were given up on (past [`HOLD_AT_MOST`]).
    in_hand: BTreeMap<u32, (Instant, bool)>,
    /// Handled updates that Telegram has not been told about yet.
    handled: BTreeSet<u32>,
    /// Updates given back unconfirmed ([`Outcome::Released`]), with since
    /// when: they hold the offset so Telegram brings them again, for at most
    /// [`HOLD_AT_MOST`].
    released: BTreeMap<u32, Instant>,
    /// The offset last given: everything below it is confirmed.
    offset: Option<u32>,
}

impl Book {
    /// Takes an update Telegram sent; false when it is one already in hand
    /// or handled (Telegram sends those again until they are confirmed).
    fn take(&mut self, id: u32, now: Instant) -> bool {
        let again = self.released.remove(&id).is_some();
        if !again && (self.in_hand.contains_key(&id) || self.handled.contains(&id)) {
            return false;
        }
        self.in_hand.insert(id, (now, false));
        true
    }

    fn done(&mut self, (id, outcome): Done, now: Instant) {
        if self.in_hand.remove(&id).is_some() {
            match outcome {
                Outcome::Handled => {
                    self.handled.insert(id);
                }
                Outcome::Released => {
                    self.released.entry(id).or_insert(now);
                }
            }
        }
    }

    /// Whether an update in hand still holds the offset back.
    fn holding(&self, now: Instant) -> bool {
        self.in_hand.values().any(|(since, _)| now.duration_since(*since) < HOLD_AT_MOST)
    }

    /// The offset for the next poll: the lowest update still held in hand,
    /// else one past the last update taken (never below the last offset
    /// given, unless an update below it is in hand). `None` before the first update,
    /// which asks Telegram for all it holds.
    fn offset(&mut self, now: Instant) -> Option<i32> {
        for (id, (since, given_up)) in &mut self.in_hand {
            if !*given_up && now.duration_since(*since) >= HOLD_AT_MOST {
                *given_up = true;
                tracing::warn!(
                    update = id,
                    "a Telegram update has been in hand for {}; it no longer holds back the others, \
                     so a crash before it is handled loses it",
                    humantime::format_duration(HOLD_AT_MOST)
                );
            }
        }
        self.released.retain(|id, since| {
            let keep = now.duration_since(*since) < HOLD_AT_MOST;
            if !keep {
                tracing::error!(
                    update = id,
                    "a Telegram message could not be stored for {}; it is no longer asked for again",
                    humantime::format_duration(HOLD_AT_MOST)
                );
            }
            keep
        });
        let in_hand = self.in_hand.iter().find(|(_, (_, given_up))| !given_up).map(|(id, _)| *id);
        let released = self.released.keys().next().copied();
        let held = in_hand.into_iter().chain(released).min();
        // An update given up on and handled later is below the offset already.
        let next = held.or_else(|| {
            let past_last = self.in_hand.keys().chain(&self.handled).max().map(|id| id.saturating_add(1));
            past_last.max(self.offset)
        });
        if let Some(offset) = next {
            self.handled.retain(|id| *id >= offset);
            self.offset = Some(offset);
        }
        next.map(|offset| i32::try_from(offset).unwrap_or(i32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Book {
        fn handled(&mut self, id: u32) {
            self.done((id, Outcome::Handled), Instant::now());
        }
    }

    #[test]
    fn a_released_update_holds_the_offset_and_is_taken_again() {
        let now = Instant::now();
        let mut book = Book::default();
        for id in [20, 21] {
            assert!(book.take(id, now));
        }
        book.done((20, Outcome::Released), now);
        book.handled(21);
        assert!(!book.holding(now), "nothing in hand: poll again at once");
        assert_eq!(book.offset(now), Some(20), "20 is not confirmed, so Telegram brings it again");
        assert!(!book.take(21, now), "21 was handled");
        assert!(book.take(20, now), "20 is taken again");
        book.handled(20);
        assert_eq!(book.offset(now), Some(22));
    }

    #[test]
    fn a_release_is_asked_for_again_for_a_minute_at_most() {
        let start = Instant::now();
        let mut book = Book::default();
        book.take(30, start);
        book.done((30, Outcome::Released), start);
        book.take(31, start);
        book.handled(31);
        assert_eq!(book.offset(start), Some(30));
        assert_eq!(book.offset(start + HOLD_AT_MOST), Some(32), "past the hold, the others are not held back");
    }

    #[test]
    fn nothing_taken_asks_for_everything() {
        assert_eq!(Book::default().offset(Instant::now()), None);
    }

    #[test]
    fn an_update_in_hand_holds_the_offset_at_itself() {
        let now = Instant::now();
        let mut book = Book::default();
        for id in [10, 11, 12] {
            assert!(book.take(id, now));
        }
        book.handled(10);
        book.handled(12);
        assert_eq!(book.offset(now), Some(11), "10 is confirmed, 11 is not, so 12 comes again");
        assert!(!book.take(11, now), "11 again is the one in hand");
        assert!(!book.take(12, now), "12 again was handled already");
        book.handled(11);
        assert_eq!(book.offset(now), Some(13));
        assert_eq!(book.offset(now), Some(13), "nothing new: the same offset again");
    }

    #[test]
    fn a_confirmed_update_is_forgotten_and_new_ones_are_taken() {
        let now = Instant::now();
        let mut book = Book::default();
        book.take(5, now);
        book.handled(5);
        assert_eq!(book.offset(now), Some(6));
        assert!(book.handled.is_empty(), "what the offset confirms is forgotten");
        assert!(book.take(6, now));
        assert!(book.holding(now));
    }

    #[test]
    fn an_update_in_hand_too_long_stops_holding_the_others() {
        let start = Instant::now();
        let mut book = Book::default();
        book.take(1, start);
        book.take(2, start);
        book.handled(2);
        assert_eq!(book.offset(start), Some(1));
        let later = start + HOLD_AT_MOST;
        assert!(!book.holding(later));
        assert_eq!(book.offset(later), Some(3), "1 is given up on; 2 is confirmed");
        assert!(!book.take(1, later), "still in hand: not handed out twice");
        book.handled(1);
        assert_eq!(book.offset(later), Some(3));
    }

    #[test]
    fn an_unheld_update_taken_later_is_not_lost_behind_an_old_offset() {
        let now = Instant::now();
        let mut book = Book::default();
        book.take(100, now);
        book.handled(100);
        assert_eq!(book.offset(now), Some(101));
        // Telegram restarts its ids at random after a week without updates.
        assert!(book.take(7, now));
        assert_eq!(book.offset(now), Some(7));
        book.handled(7);
        assert_eq!(book.offset(now), Some(8));
    }
}

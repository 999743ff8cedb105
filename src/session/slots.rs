//! The bound on live CLI processes: a FIFO semaphore plus how many groups
//! wait for it, which idle sessions watch so one of them can give its slot up
//! at once instead of after a full `idle_timeout`. Each waiting group is owed
//! one slot: an idle session claims that need before it closes, so one waiter
//! closes exactly one idle session, not every idle one.

use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct Slots {
    semaphore: Arc<Semaphore>,
    need: watch::Sender<Need>,
}

/// A CLI slot held by a live process; counted in `pincer_live_sessions`
/// while it is.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    fn held(permit: OwnedSemaphorePermit) -> Slot {
        crate::metrics::counters::counters().live_sessions.inc();
        Slot { _permit: permit }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::metrics::counters::counters().live_sessions.dec();
    }
}

/// Groups waiting for a slot, and how many idle sessions are already closing for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    pub waiting: usize,
    pub yielding: usize,
}

impl Need {
    /// Waiting groups no closing session has answered yet.
    pub fn unclaimed(&self) -> usize {
        self.waiting.saturating_sub(self.yielding)
    }
}

impl Slots {
    pub fn new(max_live: usize) -> Slots {
        Slots { semaphore: Arc::new(Semaphore::new(max_live)), need: watch::Sender::new(Need::default()) }
    }

    /// Waits (first come, first served) for a slot.
    pub async fn acquire(&self) -> Slot {
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return Slot::held(permit);
        }
        crate::metrics::counters::counters().slot_waits.inc();
        self.need.send_modify(|n| n.waiting += 1);
        // Counted out even if this future is dropped mid-wait (shutdown).
        let _waiting = scopeguard::guard((), |()| {
            self.need.send_modify(|n| {
                n.waiting -= 1;
                n.yielding = n.yielding.min(n.waiting);
            })
        });
        let permit = self.semaphore.clone().acquire_owned().await.expect("the slot semaphore is never closed");
        // The slot a yielding session gave up has reached a waiter.
        self.need.send_modify(|n| n.yielding = n.yielding.saturating_sub(1));
        Slot::held(permit)
    }

    /// An idle session asks to close for a waiting group: true for exactly
    /// one asker per waiting group.
    pub fn claim_yield(&self) -> bool {
        let mut claimed = false;
        self.need.send_if_modified(|n| {
            claimed = n.unclaimed() > 0;
            if claimed {
                n.yielding += 1;
            }
            claimed
        });
        claimed
    }

    /// Who waits for a slot, as a watch.
    pub fn waiting(&self) -> watch::Receiver<Need> {
        self.need.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_are_counted_while_they_wait() {
        let slots = Arc::new(Slots::new(1));
        let first = slots.acquire().await;
        let waiting = slots.waiting();
        assert_eq!(waiting.borrow().waiting, 0);
        let s = slots.clone();
        let second = tokio::spawn(async move { s.acquire().await });
        let mut w = slots.waiting();
        w.wait_for(|n| n.waiting == 1).await.unwrap();
        drop(first);
        let _second = second.await.unwrap();
        assert_eq!(*slots.waiting().borrow(), Need::default());
    }

    #[tokio::test]
    async fn one_waiter_is_answered_by_exactly_one_idle_session() {
        let slots = Arc::new(Slots::new(2));
        let (a, _b) = (slots.acquire().await, slots.acquire().await);
        let s = slots.clone();
        let waiter = tokio::spawn(async move { s.acquire().await });
        slots.waiting().wait_for(|n| n.waiting == 1).await.unwrap();
        assert!(slots.claim_yield(), "the first idle session closes");
        assert!(!slots.claim_yield(), "the second keeps its slot");
        drop(a);
        let _c = waiter.await.unwrap();
        assert_eq!(*slots.waiting().borrow(), Need::default(), "the need was met and forgotten");
        assert!(!slots.claim_yield(), "nobody waits any more");
    }
}

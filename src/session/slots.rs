//! The bound on live CLI processes: a FIFO semaphore plus a count of groups
//! waiting for it, which idle sessions watch so they can give their slot up at
//! once instead of after a full `idle_timeout`.

use std::sync::Arc;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct Slots {
    semaphore: Arc<Semaphore>,
    waiting: watch::Sender<usize>,
}

impl Slots {
    pub fn new(max_live: usize) -> Slots {
        Slots { semaphore: Arc::new(Semaphore::new(max_live)), waiting: watch::Sender::new(0) }
    }

    /// Waits (first come, first served) for a slot.
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return permit;
        }
        self.waiting.send_modify(|n| *n += 1);
        // Decrement even if this future is dropped mid-wait (shutdown).
        let _waiting = scopeguard::guard((), |()| self.waiting.send_modify(|n| *n -= 1));
        self.semaphore.clone().acquire_owned().await.expect("the slot semaphore is never closed")
    }

    /// How many groups wait for a slot, as a watch.
    pub fn waiting(&self) -> watch::Receiver<usize> {
        self.waiting.subscribe()
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
        assert_eq!(*waiting.borrow(), 0);
        let s = slots.clone();
        let second = tokio::spawn(async move { s.acquire().await });
        let mut w = slots.waiting();
        w.wait_for(|n| *n == 1).await.unwrap();
        drop(first);
        let _second = second.await.unwrap();
        assert_eq!(*slots.waiting().borrow(), 0);
    }
}

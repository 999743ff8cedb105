//! [`DecodeBudget`]: the memory the whole daemon lets images take while
//! they are decoded, turned and scaled (`media.decode_budget`). Each decode
//! reserves what its header says it will take at most
//! ([`images::footprint`](super::images::footprint)) before a pixel is
//! decoded, and gives it back when done; a decode that does not fit waits
//! for room, in the order they came (a large one is not passed by a stream
//! of small ones), and one larger than the whole budget is refused.
//!
//! A tokio [`Semaphore`] holds the room, counted in KiB. The budget is read
//! live: a new size makes a new semaphore for the reservations after it,
//! while those made before give their room back to the old one (so for a
//! moment both may be spent).

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget's unit: a reservation is rounded up to whole KiB.
const UNIT: u64 = 1024;

/// Room held for one decode, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
}

/// A decode that needs more than the whole budget: it never fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("decoding it takes {need} bytes, more than media.decode_budget ({total} bytes)")]
pub struct OverBudget {
    pub need: u64,
    pub total: u64,
}

/// The daemon's one budget for decoding (cheap to share behind an `Arc`).
#[derive(Debug, Default)]
pub struct DecodeBudget {
    /// The size in KiB and its semaphore; replaced when the size changes.
    current: Mutex<Option<(u64, Arc<Semaphore>)>>,
}

impl DecodeBudget {
    pub fn new() -> DecodeBudget {
        DecodeBudget::default()
    }

    /// Reserves `need` bytes of a budget of `total` bytes (the config's
    /// newest), waiting while others hold too much of it. More than `total`
    /// is [`OverBudget`] at once.
    pub async fn reserve(&self, need: u64, total: u64) -> Result<Reservation, OverBudget> {
        let (units, total_units) = (need.div_ceil(UNIT), total / UNIT);
        let over = OverBudget { need, total };
        if units > total_units {
            return Err(over);
        }
        let units = u32::try_from(units).map_err(|_| over)?;
        let semaphore = self.semaphore(total_units);
        // Never closed: the semaphore lives as long as this Arc.
        let permit = semaphore.acquire_many_owned(units).await.map_err(|_| over)?;
        Ok(Reservation { _permit: permit })
    }

    fn semaphore(&self, total_units: u64) -> Arc<Semaphore> {
        // A budget of more than u32::MAX KiB (4 TiB) is as good as none.
        let total_units = total_units.min(u64::from(u32::MAX));
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some((size, semaphore)) if *size == total_units => semaphore.clone(),
            _ => {
                let semaphore = Arc::new(Semaphore::new(total_units as usize));
                *current = Some((total_units, semaphore.clone()));
                semaphore
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[tokio::test(start_paused = true)]
    async fn a_reservation_waits_while_the_budget_is_spent_and_proceeds_when_it_is_given_back() {
        let budget = DecodeBudget::new();
        let first = budget.reserve(60 * MIB, 100 * MIB).await.unwrap();
        let second = budget.reserve(60 * MIB, 100 * MIB);
        tokio::pin!(second);
        // The clock runs ahead while nothing else can happen: time alone frees nothing.
        assert!(tokio::time::timeout(Duration::from_secs(3600), &mut second).await.is_err(), "waits for room");
        drop(first);
        let _second = second.now_or_never().expect("room now").unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_large_reservation_is_not_passed_by_small_ones() {
        let budget = DecodeBudget::new();
        let held = budget.reserve(50 * MIB, 100 * MIB).await.unwrap();
        let large = budget.reserve(80 * MIB, 100 * MIB);
        tokio::pin!(large);
        assert!((&mut large).now_or_never().is_none());
        let small = budget.reserve(10 * MIB, 100 * MIB);
        tokio::pin!(small);
        assert!((&mut small).now_or_never().is_none(), "in line behind the large one, though it would fit");
        drop(held);
        let large = large.now_or_never().expect("first in line").unwrap();
        assert!((&mut small).now_or_never().is_some(), "fits beside it");
        drop(large);
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_is_refused_at_once() {
        let budget = DecodeBudget::new();
        assert_eq!(
            budget.reserve(101 * MIB, 100 * MIB).await.unwrap_err(),
            OverBudget { need: 101 * MIB, total: 100 * MIB }
        );
        assert!(budget.reserve(100 * MIB, 100 * MIB).await.is_ok(), "all of it fits");
        assert!(budget.reserve(1, 100 * MIB).await.is_ok(), "a byte is a whole KiB");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_size_applies_to_the_reservations_after_it() {
        let budget = DecodeBudget::new();
        let held = budget.reserve(90 * MIB, 100 * MIB).await.unwrap();
        assert!(budget.reserve(50 * MIB, 100 * MIB).now_or_never().is_none(), "the old size is spent");
        assert!(budget.reserve(150 * MIB, 200 * MIB).now_or_never().is_some(), "the new one is not");
        drop(held);
    }
}

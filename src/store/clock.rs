//! The store's clock: the `at_us` every row is written with. No I/O.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::SystemTime;

use crate::domain::unix_us;

/// Now, as unix microseconds, strictly increasing within this process.
///
/// History merges several tables by this timestamp, so two rows written in the
/// same microsecond (or across a clock step back) must still sort in write order.
pub fn now_us() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let wall = unix_us(SystemTime::now());
    let prev = LAST.fetch_max(wall, Ordering::Relaxed);
    if wall > prev {
        wall
    } else {
        LAST.fetch_add(1, Ordering::Relaxed) + 1
    }
}

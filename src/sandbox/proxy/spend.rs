//! What passed the credential proxy, on its way to the store: each
//! response's [`Usage`] priced and added to its group's quarter hour in a
//! [`SpendLedger`] (in memory, one entry per group and quarter hour, never
//! waiting on the store), and [`keep`], the one task that writes the ledger
//! into `proxy_spend` as it fills. A write the store refuses stays in the
//! ledger and is tried again, so no call goes uncounted while pincer runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::price;
use super::usage::Usage;
use crate::domain::budget::ProxyUse;
use crate::domain::Tokens;
use crate::retry::{Backoff, RetryPolicy};
use crate::store::{bucket_of, Budgets};

/// How a write the store refuses is tried again.
const STORE_RETRY: RetryPolicy = RetryPolicy::new(Duration::from_millis(200), Duration::from_secs(10));

type Open = HashMap<(String, i64), ProxyUse>;

/// Spend not yet in the store, by group and quarter hour. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct SpendLedger {
    open: Arc<Mutex<Open>>,
    added: Arc<Notify>,
}

impl SpendLedger {
    fn lock(&self) -> MutexGuard<'_, Open> {
        // Held for a map operation only, never across an await.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One response of `group`'s that used `usage`, now.
    pub fn add(&self, group: &str, usage: &Usage) {
        let used = ProxyUse {
            calls: 1,
            tokens: Tokens {
                input: usage.input,
                output: usage.output,
                cache_read: usage.cache_read,
                cache_creation: usage.cache_creation,
            },
            cost_usd: price::cost_usd(usage),
        };
        tracing::debug!(%group, model = ?usage.model, cost_usd = used.cost_usd, "credential proxy: a call's usage");
        self.lock().entry((group.to_owned(), bucket_of(SystemTime::now()))).or_default().add(&used);
        self.added.notify_one();
    }

    fn take(&self) -> Open {
        std::mem::take(&mut *self.lock())
    }

    fn put_back(&self, rows: Open) {
        let mut open = self.lock();
        for (key, used) in rows {
            open.entry(key).or_default().add(&used);
        }
    }

    #[cfg(test)]
    pub(super) fn pending(&self) -> Open {
        self.lock().clone()
    }
}

/// Writes `ledger` into the store as it fills, until `stop`; then once more,
/// so the last calls of a turn finishing during shutdown are kept.
pub async fn keep(ledger: SpendLedger, store: Budgets, stop: CancellationToken) {
    let mut backoff = Backoff::new(STORE_RETRY);
    loop {
        let stopping = tokio::select! {
            _ = ledger.added.notified() => false,
            _ = stop.cancelled() => true,
        };
        let mut rows = ledger.take();
        let mut failed = None;
        for ((group, bucket), used) in std::mem::take(&mut rows) {
            if let Err(e) = store.add_proxy_spend(&group, bucket, &used).await {
                failed = Some(e);
                rows.insert((group, bucket), used);
            }
        }
        match failed {
            None => backoff.succeeded(),
            Some(e) => {
                ledger.put_back(rows);
                if stopping {
                    tracing::error!(%e, "credential proxy: what the last API calls used could not be stored");
                } else {
                    if backoff.failures() == 0 {
                        tracing::error!(%e, "credential proxy: cannot store what API calls used; trying again");
                    }
                    // The ledger keeps it; try again after a pause, or at the next call.
                    if backoff.wait(None, &stop).await {
                        ledger.added.notify_one();
                    }
                    continue;
                }
            }
        }
        if stopping {
            return;
        }
    }
}

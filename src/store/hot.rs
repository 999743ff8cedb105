//! The message path's own connection, held open and lent out by a lock
//! (SQLite), or a small pool of its own (PostgreSQL).
//!
//! Storing a message, pulling it, storing its result and marking its reply
//! delivered run back to back on one SQLite thread that is still warm. A
//! pool would cost every statement more than the statement: sqlx's pool
//! lends its *least* recently used connection (its idle queue is first in,
//! first out), whose thread has gone to sleep, and on each return it spawns
//! a task that pings the connection (one more round trip to its thread)
//! before the next borrower may have it. A lock does neither, and long reads
//! on the shared pool (history, status, backups, retention) never queue ahead
//! of a message. Measured in the README ("pincer's own share").

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::error::StoreError;

/// The held connection, or nothing once the store has closed; or the pool.
#[derive(Clone)]
pub(super) enum Hot {
    Held(Arc<Mutex<Option<Held>>>),
    Pooled(AnyPool),
}

pub(super) struct Held {
    conn: AnyConnection,
    /// A statement list that opened its own transaction did not finish (its
    /// caller failed or was dropped): the next borrower rolls it back first.
    unsettled: bool,
}

impl std::fmt::Debug for Hot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hot")
    }
}

impl Hot {
    pub(super) fn held(conn: AnyConnection) -> Hot {
        Hot::Held(Arc::new(Mutex::new(Some(Held { conn, unsettled: false }))))
    }

    pub(super) fn pooled(pool: AnyPool) -> Hot {
        Hot::Pooled(pool)
    }

    /// The connection, for as long as the guard lives (borrowers queue in order).
    pub(super) async fn lock(&self) -> Result<HotGuard<'_>, StoreError> {
        let lent = match self {
            Hot::Held(held) => {
                let guard = held.lock().await;
                let mut held = MutexGuard::try_map(guard, Option::as_mut).map_err(|_| sqlx::Error::PoolClosed)?;
                if held.unsettled {
                    // "No transaction is active" when it had committed after all: fine.
                    let _ = sqlx::query("ROLLBACK").execute(&mut held.conn).await;
                    held.unsettled = false;
                }
                Lent::Held(held)
            }
            Hot::Pooled(pool) => Lent::Pooled(pool.acquire().await?),
        };
        Ok(HotGuard { lent, hot: self })
    }

    pub(super) async fn close(&self) {
        match self {
            Hot::Held(held) => {
                if let Some(held) = held.lock().await.take() {
                    let _ = held.conn.close().await;
                }
            }
            Hot::Pooled(pool) => pool.close().await,
        }
    }
}

/// A borrowed connection.
pub(super) struct HotGuard<'a> {
    lent: Lent<'a>,
    hot: &'a Hot,
}

enum Lent<'a> {
    Held(MappedMutexGuard<'a, Held>),
    Pooled(PoolConnection<Any>),
}

impl HotGuard<'_> {
    /// Marks the connection as inside a transaction the caller opened in a
    /// statement list of its own, until [`HotGuard::settled`]: a guard
    /// dropped before that has the transaction rolled back. (Only SQLite's
    /// statement lists do that; a pooled connection's transactions are sqlx's.)
    pub(super) fn unsettled(&mut self) {
        if let Lent::Held(held) = &mut self.lent {
            held.unsettled = true;
        }
    }

    pub(super) fn settled(&mut self) {
        if let Lent::Held(held) = &mut self.lent {
            held.unsettled = false;
        }
    }
}

impl Drop for HotGuard<'_> {
    fn drop(&mut self) {
        // Right away rather than at the next borrower, which may come much
        // later: the open transaction holds SQLite's write lock, which every
        // other writer waits for. (`lock` rolls back; a borrower already
        // queued gets the connection first and rolls back itself.)
        if matches!(&self.lent, Lent::Held(held) if held.unsettled) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let hot = self.hot.clone();
                runtime.spawn(async move { drop(hot.lock().await) });
            }
        }
    }
}

impl Deref for HotGuard<'_> {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        match &self.lent {
            Lent::Held(held) => &held.conn,
            Lent::Pooled(conn) => conn,
        }
    }
}

impl DerefMut for HotGuard<'_> {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match &mut self.lent {
            Lent::Held(held) => &mut held.conn,
            Lent::Pooled(conn) => conn,
        }
    }
}

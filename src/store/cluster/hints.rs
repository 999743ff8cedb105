//! The LISTEN side of the cluster's wake-up hints (issue 36;
//! `migrations/postgres/0005_hints.sql`, `0007_approvals.sql`): one
//! connection of its own that hears what other nodes stored. Its session
//! runs with the same bounds as the pools' (`cluster::bounds`), so the
//! server drops it in bounded time when this node goes quiet, as any other.

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::Executor;

use crate::cluster::PgBounds;
use crate::store::handles::ClusterStore;
use crate::store::{Location, StoreError};

const WORK: &str = "pincer_work";
const OUTBOX: &str = "pincer_outbox";
const APPROVALS: &str = "pincer_approvals";

/// What another node stored, as heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    /// A message queued (or to be prepared) for the group named, as stored.
    Work(String),
    /// A reply written to the outbox.
    Outbox,
    /// A tool approval asked or answered.
    Approvals,
}

/// A connection listening for [`Hint`]s.
pub struct HintListener {
    listener: PgListener,
}

impl std::fmt::Debug for HintListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HintListener")
    }
}

impl ClusterStore {
    /// A connection of its own listening for the cluster's wake-up hints,
    /// bounded as the pools' are.
    pub async fn listen_for_hints(&self) -> Result<HintListener, StoreError> {
        match (&*self.db.location, self.db.bounds) {
            (Location::Postgres(url), Some(bounds)) => HintListener::open(url, bounds).await,
            _ => Err(StoreError::NotShared),
        }
    }
}

impl HintListener {
    /// Connects to the database at `url` with `bounds`' session settings
    /// (and its bound on connecting) and listens for every hint.
    async fn open(url: &str, bounds: PgBounds) -> Result<HintListener, StoreError> {
        let settings: std::sync::Arc<str> = bounds.session_settings().into();
        // A pool of one only to reconnect through it (as `PgListener::connect`
        // does), with the session settings every pooled connection gets.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(bounds.client_wait())
            .after_connect(move |conn, _| {
                let settings = settings.clone();
                Box::pin(async move { conn.execute(&*settings).await.map(drop) })
            })
            .connect_lazy(url)?;
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen_all([WORK, OUTBOX, APPROVALS]).await?;
            Ok(HintListener { listener })
        };
        crate::store::db::within(bounds.client_wait(), "listening for the cluster's hints", listening).await
    }

    /// The next hint; an error when the connection was lost.
    pub async fn next(&mut self) -> Result<Hint, StoreError> {
        let heard = self.listener.recv().await?;
        Ok(match heard.channel() {
            WORK => Hint::Work(heard.payload().to_owned()),
            APPROVALS => Hint::Approvals,
            _ => Hint::Outbox,
        })
    }

    /// A setting of the listener's own session, as `SHOW` prints it.
    #[cfg(test)]
    pub(crate) async fn setting(&mut self, name: &str) -> String {
        let sql = match name {
            "statement_timeout" => "SHOW statement_timeout",
            _ => "SHOW idle_in_transaction_session_timeout",
        };
        sqlx::query_scalar(sql).fetch_one(&mut self.listener).await.unwrap()
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::{LeaseTiming, PgBounds};
    use crate::store::tests::postgres;
    use crate::store::{Location, Store};

    /// The listener's session is bounded as the pools' are: a node that
    /// goes quiet (or away) mid-statement is let go by the server in time.
    #[tokio::test]
    async fn the_hints_connection_runs_with_the_pools_bounds() {
        let url = postgres::server().fresh_database();
        let bounds = PgBounds::new(LeaseTiming::new(std::time::Duration::from_secs(3)).unwrap());
        let store = Store::connect_bounded(&Location::Postgres(url), bounds).await.unwrap();
        let mut listener = store.cluster().unwrap().listen_for_hints().await.unwrap();
        // (The tcp_* settings read 0 over the tests' Unix socket; they are set in the same statement.)
        for name in ["statement_timeout", "idle_in_transaction_session_timeout"] {
            assert_ne!(listener.setting(name).await, "0", "{name} is bounded on the hints' connection");
        }
    }
}

//! The store: the only module that speaks SQL.
//!
//! SQLite in WAL mode through sqlx, with the migrations in `migrations/`
//! embedded at build time and applied when the store opens. Every write that
//! the session engine depends on ("persist first") goes through here.
//!
//! [`Store::open`] opens the database; components are then handed only the
//! role-sized handles they use (`store.queue()`, `store.schedules()`, ...;
//! `handles.rs` says why handles and how a second backend slots in). This
//! file only declares, re-exports and opens.

mod activity;
mod approvals;
mod budget;
mod channels;
mod clock;
pub mod cluster;
mod commands;
mod copy;
mod db;
mod egress;
mod error;
mod fenced;
mod fences;
mod flag;
mod folders;
mod groups;
mod handles;
mod health;
mod history;
mod hot;
mod inbound;
mod journal;
mod leases;
mod outbox;
mod overview;
mod preparing;
mod provenance;
mod proxy_spend;
mod queue;
mod recovery;
mod results;
mod retention;
mod rows;
mod schedules;
mod status;
mod transcripts;

use std::path::Path;

pub use activity::Mirrored;
pub use approvals::{ApprovalError, Asked, NewApproval, ToShow, Unanswered, LOOK_LIMIT};
pub use channels::ChannelHealth;
pub use clock::now_us;
pub use cluster::{ClusterView, NodeView, Owner, Takeover};
pub use commands::PendingCommand;
pub use copy::copy_sqlite;
pub use db::Location;
pub use egress::{EgressDecision, EgressVerdict, EgressVia};
pub use error::StoreError;
pub use folders::FolderSnapshot;
pub use groups::{GroupRecord, GroupSettings};
pub use handles::{
    Activities, Approvals, Budgets, Channels, ClusterStore, Commands, EgressLog, Folders, Groups, Health, History,
    Journal, Leases, OutboxLog, Preparing, Queue, Retention, Schedules, Transcripts,
};
pub use history::{Delivery, FileEntry, HistoryEntry};
pub use inbound::InboundState;
pub use outbox::{DeliveryState, Enqueue, Marked, OutboxId, OutboxRow, Seen};
pub use overview::{Backlog, GroupView, Overview, PlatformView};
pub use preparing::{Stored, ToPrepare, Waiting};
pub use provenance::{Written, MAX_ROWS as PROVENANCE_ROWS};
pub use proxy_spend::{bucket_of, BUCKET_US};
pub use queue::{Pulled, TakenContext};
pub use recovery::{GroupLeft, Recovered};
pub use results::Carried;
pub use retention::{Pruned, SpaceMode};
pub use schedules::{NewSchedule, RunId, RunRecord};
pub use status::StatusRecord;
pub use transcripts::TranscriptWrite;

/// The open database: opens it, closes it, and hands out its roles.
#[derive(Clone, Debug)]
pub struct Store {
    db: db::Db,
}

impl Store {
    /// Opens (creating if missing) the SQLite database at `path` and migrates it.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Store::connect(&Location::File(path.to_owned())).await
    }

    /// Opens (creating a SQLite file if missing) the store at `location` and
    /// migrates it; a PostgreSQL one's waits bounded as for the default `lease_ttl`.
    pub async fn connect(location: &Location) -> Result<Store, StoreError> {
        Store::connect_bounded(location, crate::cluster::PgBounds::default()).await
    }

    /// [`Store::connect`], a PostgreSQL store's waits bounded by `bounds`
    /// (from the node's `lease_ttl`: `cluster::bounds`).
    pub async fn connect_bounded(location: &Location, bounds: crate::cluster::PgBounds) -> Result<Store, StoreError> {
        Ok(Store { db: db::Db::open(location, bounds).await? })
    }

    /// Where the database is.
    pub fn location(&self) -> &Location {
        &self.db.location
    }

    /// The SQLite file, when the store is one.
    pub fn file(&self) -> Option<&Path> {
        self.db.file()
    }

    pub async fn close(&self) {
        self.db.close().await;
    }

    pub fn queue(&self) -> Queue {
        Queue::new(self.db.clone())
    }

    pub fn preparing(&self) -> Preparing {
        Preparing::new(self.db.clone())
    }

    pub fn journal(&self) -> Journal {
        Journal::new(self.db.clone())
    }

    pub fn outbox(&self) -> OutboxLog {
        OutboxLog::new(self.db.clone())
    }

    pub fn history(&self) -> History {
        History::new(self.db.clone())
    }

    pub fn schedules(&self) -> Schedules {
        Schedules::new(self.db.clone())
    }

    pub fn budgets(&self) -> Budgets {
        Budgets::new(self.db.clone())
    }

    pub fn retention(&self) -> Retention {
        Retention::new(self.db.clone())
    }

    pub fn groups(&self) -> Groups {
        Groups::new(self.db.clone())
    }

    pub fn egress(&self) -> EgressLog {
        EgressLog::new(self.db.clone())
    }

    pub fn channels(&self) -> Channels {
        Channels::new(self.db.clone())
    }

    pub fn health(&self) -> Health {
        Health::new(self.db.clone())
    }

    pub fn leases(&self) -> Leases {
        Leases::new(self.db.clone())
    }

    pub fn transcripts(&self) -> Transcripts {
        Transcripts::new(self.db.clone())
    }

    pub fn folders(&self) -> Folders {
        Folders::new(self.db.clone())
    }

    pub fn approvals(&self) -> Approvals {
        Approvals::new(self.db.clone())
    }

    pub fn commands(&self) -> Commands {
        Commands::new(self.db.clone())
    }

    pub fn activities(&self) -> Activities {
        Activities::new(self.db.clone())
    }

    /// The cluster's own statements, on a PostgreSQL store (the only kind
    /// several nodes share); `None` on SQLite, where there is no cluster to
    /// reach, so no caller has to ask which database this is.
    pub fn cluster(&self) -> Option<ClusterStore> {
        (self.db.dialect == db::Dialect::Postgres).then(|| ClusterStore::new(self.db.clone()))
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
pub(crate) mod tests;

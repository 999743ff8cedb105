//! The store's role-sized handles: each component is given only the roles it
//! uses (the session its queue, the scheduler its schedules, the outbox its
//! outbox), never the whole store. Each wraps the one shared backend value
//! ([`Db`]); the methods of a role live in that role's file.
//!
//! Why concrete handles over a backend and not role traits: an `async fn`
//! in a trait is not object-safe without a new crate (`async-trait`) or a
//! boxed future per call, and a generic backend parameter would be threaded
//! through every component of the engine. The seam is each handle's method
//! set, which speaks only domain types and [`StoreError`](super::StoreError):
//! a PostgreSQL store slots in behind `Db` (an enum of backends, each
//! handle's method picking its statement), and no consumer changes.

use super::db::Db;

/// Declares a role's handle: a cheap clone of the backend.
macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name {
            pub(super) db: Db,
        }

        impl $name {
            pub(super) fn new(db: Db) -> $name {
                $name { db }
            }
        }
    )*};
}

handles! {
    /// Inbound messages: intake's writes and the session's pull (`queue.rs`).
    Queue;
    /// Messages whose media is still being fetched and prepared (`preparing.rs`).
    Preparing;
    /// What a session did besides its results: lifecycle events, task
    /// frames, permission decisions (`journal.rs`).
    Journal;
    /// Results and everything for a chat: queued in the same transaction as
    /// what they carry, then marked as delivery goes (`outbox.rs`, `results.rs`).
    OutboxLog;
    /// A group's conversation, as `pincer history` and the router read it (`history.rs`).
    History;
    /// Scheduled tasks and their runs (`schedules.rs`).
    Schedules;
    /// What groups have spent, against their budgets (`budget.rs`, `proxy_spend.rs`).
    Budgets;
    /// Pruning old rows and giving their pages back (`retention.rs`).
    Retention;
    /// Registered groups, their settings and bound chats (`groups.rs`).
    Groups;
    /// The egress proxy's decisions (`egress.rs`).
    EgressLog;
    /// The chat platforms' side: health, messages sent, live status messages
    /// (`channels.rs`, `status.rs`).
    Channels;
    /// Whether the database answers, and the status page's overview
    /// (`health.rs`, `overview.rs`).
    Health;
    /// The leases this node holds, as its parts ask about them: held or not,
    /// changes, the deadline, one lease claimed or let go (`leases.rs`).
    /// Always there: on one machine every group counts as held.
    Leases;
    /// A cluster node's own statements (PostgreSQL only, reached only
    /// through `Store::cluster`): its row, claim rounds and takeovers,
    /// ghosts, the drain mark, the hints' connection (`cluster/`).
    ClusterStore;
    /// The CLI transcripts a cluster node keeps for the next owner
    /// (`transcripts.rs`, PostgreSQL only).
    Transcripts;
    /// The groups' folder snapshots a cluster node keeps for the next owner
    /// (`folders.rs`, PostgreSQL only).
    Folders;
    /// Tool approvals asked across cluster nodes (`approvals.rs`, PostgreSQL only).
    Approvals;
    /// Chat commands handed to their group's owner (`commands.rs`, PostgreSQL only).
    Commands;
    /// What each group's agent is doing, mirrored for the node serving its
    /// chat (`activity.rs`, PostgreSQL only).
    Activities;
}

//! Retention: what pincer deletes once it is old, in small batches, and how
//! the file gives the space back.
//!
//! Operational rows (task frames, permission decisions, session events,
//! egress decisions, delivered or failed outbox rows, finished schedule runs,
//! the images shown with answered messages, and the raw line kept with each
//! result) go after `days`. The history people read (messages, results, the
//! agents' posts) goes only after `history_days`, when that is set. Nothing
//! still in use is touched: a queued, sent or preparing message, a queued
//! outbox row, a running schedule run.
//!
//! On PostgreSQL, a cluster's stored transcripts of sessions no longer
//! their group's and the folder snapshots of removed groups go after `days`.
//!
//! Each group's spend per quarter hour (what budgets sum) goes after `days`
//! too, but never before [`SPEND_KEPT`], so the current month's is always
//! whole, however short the retention.
//!
//! Each batch is one short statement (its own transaction), so a live turn's
//! writes wait at most one batch; nothing is held across batches. Freed
//! pages go back to the file system in chunks (`incremental_vacuum`) when
//! the database has incremental auto-vacuum, as every database pincer made
//! since retention came does. An older one is never switched by a full
//! `VACUUM` here: that rewrites the whole file under the write lock, and
//! every message would be refused meanwhile. Its freed pages are reused by
//! later writes instead (the file stops growing but does not shrink), and the
//! log and `pincer doctor` say how to switch it while pincer is stopped.

use std::time::Duration;

use serde::Serialize;

use super::clock::now_us;
use super::db::{Dialect, Location};
use super::error::StoreError;
use super::handles::Retention;

/// Rows one statement deletes at most.
pub const BATCH: i64 = 1_000;

/// Pages `incremental_vacuum` gives back per statement.
const VACUUM_PAGES: i64 = 2_000;

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Rows deleted (or raw lines emptied), per table, in pass order.
    pub rows: Vec<(&'static str, u64)>,
    /// Statements run (each its own short transaction).
    pub batches: u64,
    /// Bytes the file gave back.
    pub freed_bytes: u64,
    /// The longest single statement: the longest another writer waited.
    pub longest_batch: Duration,
    /// Whether the file could give the space back.
    pub space: SpaceMode,
}

impl Pruned {
    pub fn total(&self) -> u64 {
        self.rows.iter().map(|(_, n)| n).sum()
    }
}

/// How the database gives back the pages retention frees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum SpaceMode {
    /// Incremental auto-vacuum: freed pages go back to the file system.
    #[default]
    GivenBack,
    /// Made before pincer turned auto-vacuum on: freed pages are reused by
    /// later writes, but the file does not shrink until it is switched.
    Reused,
    /// PostgreSQL: the server's autovacuum reclaims what retention frees.
    Server,
}

impl SpaceMode {
    /// What `pincer doctor` and the log say about the database at `location`.
    pub fn describe(self, location: &Location) -> String {
        match self {
            SpaceMode::GivenBack => "space freed by retention is given back to the file system".to_owned(),
            SpaceMode::Server => "space freed by retention is reclaimed by PostgreSQL's autovacuum".to_owned(),
            SpaceMode::Reused => format!(
                "made before incremental auto-vacuum: space freed by retention is reused, but the file does not \
                 shrink. To shrink it, stop pincer and run `sqlite3 \"{}\" 'PRAGMA auto_vacuum = INCREMENTAL; \
                 VACUUM'` once (it rewrites the file: it needs that much free disk and takes a while on a slow \
                 one); pincer never does it while it runs, as every message would wait for it",
                location
            ),
        }
    }
}

/// How long each group's spend per quarter hour is kept at least, whatever
/// `days` says: longer than any month plus any time zone's offset, so the
/// current month's budget always sums all of it.
pub const SPEND_KEPT: Duration = Duration::from_secs(40 * 24 * 3600);

/// The cutoff for spend rows: `cutoff_us`, or earlier when that would reach
/// into the last [`SPEND_KEPT`] before `now_us`.
pub fn spend_cutoff(cutoff_us: i64, now_us: i64) -> i64 {
    let kept = i64::try_from(SPEND_KEPT.as_micros()).unwrap_or(i64::MAX);
    cutoff_us.min(now_us.saturating_sub(kept))
}

/// One kind of row that goes once old: its table and the condition that
/// picks old rows no longer in use (`$1`: the cutoff, unix µs; `$2` the batch).
struct Rule {
    table: &'static str,
    /// `DELETE … WHERE rowid IN (SELECT rowid FROM table WHERE <old> LIMIT n)`,
    /// or an UPDATE for a column emptied rather than a row deleted.
    statement: &'static str,
}

/// Outbox rows that reached their chat or failed for good.
const SENT_OUTBOX: Rule = Rule {
    table: "outbox",
    statement: "DELETE FROM outbox WHERE rowid IN
                  (SELECT rowid FROM outbox WHERE state IN ('delivered', 'failed') AND at_us < $1 LIMIT $2)",
};

/// The images shown with messages no longer waiting.
const SHOWN_IMAGES: Rule = Rule {
    table: "inbound_images",
    statement: "DELETE FROM inbound_images WHERE rowid IN
                  (SELECT m.rowid FROM inbound_images m JOIN inbound i ON i.id = m.inbound_id
                    WHERE i.at_us < $1 AND i.state NOT IN ('queued', 'sent', 'preparing') LIMIT $2)",
};

/// Operational rows, after `days`.
const OPERATIONAL: &[Rule] = &[
    Rule {
        table: "task_frames",
        statement: "DELETE FROM task_frames WHERE rowid IN (SELECT rowid FROM task_frames WHERE at_us < $1 LIMIT $2)",
    },
    Rule {
        table: "permission_decisions",
        statement: "DELETE FROM permission_decisions WHERE rowid IN
                      (SELECT rowid FROM permission_decisions WHERE at_us < $1 LIMIT $2)",
    },
    Rule {
        table: "session_events",
        statement: "DELETE FROM session_events WHERE rowid IN
                      (SELECT rowid FROM session_events WHERE at_us < $1 LIMIT $2)",
    },
    Rule {
        table: "egress_decisions",
        statement: "DELETE FROM egress_decisions WHERE rowid IN
                      (SELECT rowid FROM egress_decisions WHERE closed_at_us < $1 LIMIT $2)",
    },
    SENT_OUTBOX,
    Rule {
        table: "schedule_runs",
        statement: "DELETE FROM schedule_runs WHERE rowid IN
                      (SELECT rowid FROM schedule_runs WHERE outcome <> 'running' AND started_us < $1 LIMIT $2)",
    },
    SHOWN_IMAGES,
    Rule {
        table: "results.raw",
        statement: "UPDATE results SET raw = '' WHERE rowid IN
                      (SELECT rowid FROM results WHERE at_us < $1 AND raw <> '' LIMIT $2)",
    },
];

/// Each group's spend per quarter hour, after `days` but never within
/// [`SPEND_KEPT`] ([`spend_cutoff`]).
const SPEND: &[Rule] = &[Rule {
    table: "spend",
    statement: "DELETE FROM spend WHERE rowid IN (SELECT rowid FROM spend WHERE slot_us < $1 LIMIT $2)",
}];

/// A cluster's copies (PostgreSQL only: the tables are
/// `migrations/postgres/`'s), after `days`: the stored transcripts of
/// sessions no longer their group's (a new session began, or the group is
/// gone; nothing ever resumes them), and the folder snapshots of removed groups.
const CLUSTER_COPIES: &[Rule] = &[
    Rule {
        table: "transcript_chunks",
        statement: "DELETE FROM transcript_chunks WHERE rowid IN
                      (SELECT c.rowid FROM transcript_chunks c WHERE c.stored_at_us < $1
                          AND NOT EXISTS (SELECT 1 FROM groups g
                                           WHERE g.name = c.group_name AND g.session_id = c.session_id) LIMIT $2)",
    },
    Rule {
        table: "group_folders",
        statement: "DELETE FROM group_folders WHERE rowid IN
                      (SELECT f.rowid FROM group_folders f WHERE f.taken_at_us < $1
                          AND NOT EXISTS (SELECT 1 FROM groups g WHERE g.name = f.group_name) LIMIT $2)",
    },
];

/// The history people read, after `history_days` (rows that refer to a
/// message or result go first: their outbox rows, their images).
const HISTORY: &[Rule] = &[
    SENT_OUTBOX,
    Rule {
        table: "results",
        statement: "DELETE FROM results WHERE rowid IN
                      (SELECT r.rowid FROM results r WHERE r.at_us < $1
                          AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.result_id = r.id) LIMIT $2)",
    },
    Rule {
        table: "agent_messages",
        statement: "DELETE FROM agent_messages WHERE rowid IN
                      (SELECT a.rowid FROM agent_messages a WHERE a.at_us < $1
                          AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.agent_message_id = a.id) LIMIT $2)",
    },
    SHOWN_IMAGES,
    Rule {
        table: "inbound",
        statement: "DELETE FROM inbound WHERE rowid IN
                      (SELECT i.rowid FROM inbound i WHERE i.at_us < $1
                          AND i.state NOT IN ('queued', 'sent', 'preparing', 'observed')
                          AND NOT EXISTS (SELECT 1 FROM inbound_images m WHERE m.inbound_id = i.id) LIMIT $2)",
    },
];

impl Rule {
    /// The statement as `dialect` names a row: PostgreSQL's `ctid` for SQLite's `rowid`.
    fn statement_in(&self, dialect: Dialect) -> std::borrow::Cow<'static, str> {
        match dialect {
            Dialect::Sqlite => self.statement.into(),
            Dialect::Postgres => self.statement.replace("rowid", "ctid").into(),
        }
    }
}

impl Retention {
    /// Where the database is, to name it to operators.
    pub fn location(&self) -> &Location {
        &self.db.location
    }

    /// One retention pass: operational rows before `cutoff_us` (spend rows
    /// before [`spend_cutoff`]), history before `history_cutoff_us` (when
    /// given), `pause` between batches (so other writers go between them),
    /// then the freed pages given back where the database can.
    pub async fn prune(
        &self,
        cutoff_us: i64,
        history_cutoff_us: Option<i64>,
        pause: Duration,
    ) -> Result<Pruned, StoreError> {
        let mut pruned = Pruned::default();
        let spend = spend_cutoff(cutoff_us, now_us());
        let cluster = (self.db.dialect == Dialect::Postgres).then_some(cutoff_us);
        let passes = [
            (OPERATIONAL, Some(cutoff_us)),
            (SPEND, Some(spend)),
            (CLUSTER_COPIES, cluster),
            (HISTORY, history_cutoff_us),
        ];
        for (rules, cutoff) in passes {
            let Some(cutoff) = cutoff else { continue };
            for rule in rules {
                let statement = rule.statement_in(self.db.dialect);
                let mut rows = 0;
                loop {
                    let started = std::time::Instant::now();
                    let done = sqlx::query(&statement).bind(cutoff).bind(BATCH).execute(&self.db.pool).await?;
                    pruned.longest_batch = pruned.longest_batch.max(started.elapsed());
                    pruned.batches += 1;
                    rows += done.rows_affected();
                    if done.rows_affected() < BATCH as u64 {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                }
                if rows > 0 {
                    pruned.rows.push((rule.table, rows));
                }
            }
        }
        self.give_back_space(pause, &mut pruned).await?;
        Ok(pruned)
    }

    /// Gives freed pages back to the file system (`incremental_vacuum`, a
    /// chunk per statement), when the database has incremental auto-vacuum.
    async fn give_back_space(&self, pause: Duration, pruned: &mut Pruned) -> Result<(), StoreError> {
        pruned.space = self.space_mode().await?;
        if pruned.space != SpaceMode::GivenBack {
            return Ok(());
        }
        let before = self.database_bytes().await?;
        loop {
            let free: i64 = sqlx::query_scalar("PRAGMA freelist_count").fetch_one(&self.db.pool).await?;
            if free == 0 {
                break;
            }
            let started = std::time::Instant::now();
            sqlx::query(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})")).execute(&self.db.pool).await?;
            pruned.longest_batch = pruned.longest_batch.max(started.elapsed());
            tokio::time::sleep(pause).await;
        }
        pruned.freed_bytes = before.saturating_sub(self.database_bytes().await?);
        Ok(())
    }

    /// Whether the database gives freed pages back ([`SpaceMode`]).
    pub async fn space_mode(&self) -> Result<SpaceMode, StoreError> {
        if self.db.dialect == Dialect::Postgres {
            return Ok(SpaceMode::Server);
        }
        let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum").fetch_one(&self.db.pool).await?;
        // 0 is NONE; 2 (INCREMENTAL) is pincer's, and 1 (FULL, set by hand)
        // gives pages back at each commit, leaving no free page to hand back.
        Ok(if mode == 0 { SpaceMode::Reused } else { SpaceMode::GivenBack })
    }

    /// The database's size: the file as SQLite counts it (pages × page
    /// size), or what PostgreSQL counts for the database.
    pub async fn database_bytes(&self) -> Result<u64, StoreError> {
        self.db.bytes().await
    }
}

#[cfg(test)]
mod tests;

//! One recovery of what a stopped holder of groups left in flight (issue 45),
//! shared by a restart on one machine and a cluster node's takeover.
//!
//! A restart covers every group, at start, before any chat or schedule is
//! served (`Queue::recover_after_restart`, in a transaction of its own); a
//! takeover covers the one group a claim just took, inside the claim's own
//! transaction (`cluster/takeover.rs`), so it commits with the claim or not at
//! all. Both do the same, in this order: prompts whose terminal or run is gone
//! are failed, failed downloads of the messages written again get a new try,
//! the messages the old CLI took but never answered go back in the queue
//! (oldest first, as before), and runs left `running` are logged as cut off
//! with their schedules due at `now` (the rerun sends the prompt again). What
//! differs between the two is decided by [`Recovery`], each with its reason.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::error::StoreError;
use super::rows;
use crate::domain::media::Outcome;
use crate::domain::schedule::ScheduleId;
use crate::domain::{GroupName, Source};

/// Which groups a recovery covers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scope {
    /// A restart on one machine: whatever the stopped pincer held, every group.
    Every,
    /// A takeover: the group whose lease was just claimed, and nothing else
    /// (other groups may be running on live nodes).
    Group(GroupName),
}

/// What one recovery covers, and how (no I/O: [`Recovery::run`] does it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    scope: Scope,
    /// When the cut-off runs are due again.
    now: DateTime<Utc>,
}

/// What a recovery found of one group's, now waiting again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupLeft {
    /// As stored (a name changed outside pincer may not parse).
    pub group: String,
    /// Messages the stopped holder had written to its CLI but not seen
    /// answered: they go to the agent again.
    pub written_again: usize,
    /// Every message of the group now waiting (those written again, and
    /// those the stopped holder never took).
    pub waiting: usize,
}

/// What a recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Per group with a message waiting, in the order of its oldest one.
    pub groups: Vec<GroupLeft>,
    /// The schedules whose run was cut off: due again if still active.
    pub runs_cut_off: Vec<ScheduleId>,
}

impl Recovery {
    /// A restart on one machine, before anything is served: every group.
    pub fn restart(now: DateTime<Utc>) -> Recovery {
        Recovery { scope: Scope::Every, now }
    }

    /// A cluster node's takeover of `group`, in its claim's transaction.
    pub fn takeover(group: &GroupName, now: DateTime<Utc>) -> Recovery {
        Recovery { scope: Scope::Group(group.clone()), now }
    }

    /// The sources whose lines in flight are failed instead of queued again.
    /// A scheduled prompt always: its run is made due again and the rerun
    /// sends the prompt, so queuing it as well would answer it twice. A
    /// console line only at a restart: the terminal that typed it was attached
    /// to the pincer that stopped (to its control socket, or it was that
    /// pincer), so nobody is left to read the answer. At a takeover the
    /// terminal may be attached to a node that lives on (`pincer chat` on any
    /// node writes to a group another node runs and prints its replies from
    /// the outbox), so the line is answered like a chat's; if that terminal
    /// went too, the answer waits for the group's next `pincer chat`.
    fn failed_sources(&self) -> &'static [Source] {
        match self.scope {
            Scope::Every => &[Source::Scheduled, Source::Console],
            Scope::Group(_) => &[Source::Scheduled],
        }
    }

    /// What a cut-off run's log says, for the operator reading `pincer tasks`:
    /// where it runs again is what differs.
    fn cut_off_text(&self) -> &'static str {
        match self.scope {
            Scope::Every => "pincer stopped during this run (killed or crashed)",
            Scope::Group(_) => "the pincer node running this group stopped during this run; it runs again on another",
        }
    }

    /// The condition on `group_name` every statement carries, on `$1` (bound
    /// to [`Recovery::group`]). A takeover's names the column, so each
    /// statement uses the group's index inside the claim's transaction.
    fn covers(&self) -> &'static str {
        match self.scope {
            Scope::Every => "$1 IS NULL",
            Scope::Group(_) => "group_name = $1",
        }
    }

    /// The value `$1` of [`Recovery::covers`] is bound to.
    fn group(&self) -> Option<&str> {
        match &self.scope {
            Scope::Every => None,
            Scope::Group(group) => Some(group.as_str()),
        }
    }

    /// Runs the recovery inside `tx`, the caller's transaction: the claim's
    /// at a takeover, so it is atomic with the claim; a plain one at a
    /// restart, so a pincer killed half-way leaves the rows as they were.
    pub(super) async fn run(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<Recovered, StoreError> {
        self.fail_gone_prompts(tx).await?;
        let mut again = self.retry_failed_downloads(tx).await?;
        again.extend(self.requeue_written(tx).await?);
        let runs_cut_off = self.cut_off_runs(tx).await?;
        let groups = self.waiting(tx, &again).await?;
        Ok(Recovered { groups, runs_cut_off })
    }

    async fn fail_gone_prompts(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<(), StoreError> {
        // Our own constants, never input: safe as text.
        let sources: Vec<String> = self.failed_sources().iter().map(|s| format!("'{}'", s.as_str())).collect();
        let sql = format!(
            "UPDATE inbound SET state = 'failed'
              WHERE {} AND state IN ('queued', 'sent') AND source IN ({})",
            self.covers(),
            sources.join(", ")
        );
        sqlx::query(&sql).bind(self.group()).execute(&mut **tx).await?;
        Ok(())
    }

    /// A message delivered to the agent again whose download failed the
    /// first time gets a new try, wherever it is answered: its failed
    /// attachments wait again and it goes back to `preparing` (the rest keep
    /// what they came to; the preparer of the node that runs the group takes
    /// it). The groups of the messages it moved, one entry each.
    async fn retry_failed_downloads(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT id, group_name, media FROM inbound WHERE {} AND state = 'sent' AND media IS NOT NULL",
            self.covers()
        );
        let rows = sqlx::query(&sql).bind(self.group()).fetch_all(&mut **tx).await?;
        let mut moved = Vec::new();
        for row in &rows {
            let Ok(mut media) = rows::read_media(row.try_get::<Option<String>, _>("media")?.as_deref()) else {
                continue;
            };
            let mut again = false;
            for attachment in media.iter_mut().filter(|a| matches!(a.outcome, Outcome::Failed { .. })) {
                attachment.outcome = Outcome::Waiting;
                again = true;
            }
            if again {
                sqlx::query("UPDATE inbound SET state = 'preparing', media = $1 WHERE id = $2")
                    .bind(super::inbound::media_json(&media))
                    .bind(row.try_get::<i64, _>("id")?)
                    .execute(&mut **tx)
                    .await?;
                moved.push(row.try_get("group_name")?);
            }
        }
        Ok(moved)
    }

    /// What the old CLI took but never answered waits again: the groups of
    /// the messages it moved, one entry each.
    async fn requeue_written(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "UPDATE inbound SET state = 'queued' WHERE {} AND state = 'sent' RETURNING group_name",
            self.covers()
        );
        Ok(sqlx::query_scalar(&sql).bind(self.group()).fetch_all(&mut **tx).await?)
    }

    /// Runs left `running` are logged as failed, their schedules (if still
    /// active) due at `now`: a run is never lost silently.
    async fn cut_off_runs(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<Vec<ScheduleId>, StoreError> {
        let due = format!(
            "UPDATE schedules SET next_run_us = $2 WHERE status = 'active'
               AND id IN (SELECT schedule_id FROM schedule_runs WHERE {} AND outcome = 'running')",
            self.covers()
        );
        sqlx::query(&due).bind(self.group()).bind(self.now.timestamp_micros()).execute(&mut **tx).await?;
        let failed = format!(
            "UPDATE schedule_runs SET outcome = 'error', text = $2
              WHERE {} AND outcome = 'running' RETURNING schedule_id",
            self.covers()
        );
        let ids: Vec<i64> =
            sqlx::query_scalar(&failed).bind(self.group()).bind(self.cut_off_text()).fetch_all(&mut **tx).await?;
        Ok(ids.into_iter().map(ScheduleId).collect())
    }

    /// Every group with a message waiting, oldest first, with how many of
    /// them `again` (one entry a message written again) names.
    async fn waiting(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        again: &[String],
    ) -> Result<Vec<GroupLeft>, StoreError> {
        let sql = format!(
            "SELECT group_name, COUNT(*) AS n FROM inbound
              WHERE {} AND (state = 'queued' OR (state = 'preparing' AND prepared_as IS NULL))
              GROUP BY group_name ORDER BY MIN(id)",
            self.covers()
        );
        let rows = sqlx::query(&sql).bind(self.group()).fetch_all(&mut **tx).await?;
        let mut written: HashMap<&str, usize> = HashMap::new();
        for group in again {
            *written.entry(group).or_default() += 1;
        }
        let mut groups = Vec::with_capacity(rows.len());
        for row in &rows {
            let group: String = row.try_get("group_name")?;
            let waiting = usize::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0);
            let written_again = written.get(group.as_str()).copied().unwrap_or(0);
            groups.push(GroupLeft { group, written_again, waiting });
        }
        Ok(groups)
    }
}

#[cfg(test)]
mod tests;

//! What a group spent in the current day and month, for its budget: sums of
//! the `spend` table, which keeps each group's cost and turns per quarter
//! hour apart from the results retention prunes.

use std::time::SystemTime;

use super::error::StoreError;
use super::handles::Budgets;
use crate::domain::budget::{reached, Budget, Periods, Reached, Spent};
use crate::domain::GroupName;

impl Budgets {
    /// Whether `group` has reached `budget` at `now` (days and months in
    /// `zone`); no read at all for a budget that is not set.
    pub async fn budget_reached(
        &self,
        group: &GroupName,
        budget: &Budget,
        now: SystemTime,
        zone: chrono_tz::Tz,
    ) -> Result<Option<Reached>, StoreError> {
        if !budget.is_set() {
            return Ok(None);
        }
        let periods = Periods::at(now, zone);
        let spent = self.budget_spent(group, &periods).await?;
        Ok(reached(budget, &spent, &periods))
    }

    /// The group's spend (the per-turn cost its results report) and turns
    /// (results, follow-up turns of background work included) in `periods`.
    ///
    /// Read from `spend` (migration 0018), where each stored result adds its
    /// cost and one turn to its quarter hour in the same statement: results
    /// themselves go with retention, the spend of the current month never
    /// does (`store::retention`). One indexed read (its primary key), made
    /// only for a group with a budget.
    pub async fn spent(&self, group: &GroupName, periods: &Periods) -> Result<Spent, StoreError> {
        let (today, month, turns): (f64, f64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(CASE WHEN slot_us >= $2 THEN cost_usd END), 0.0),
                    COALESCE(SUM(cost_usd), 0.0),
                    CAST(COALESCE(SUM(CASE WHEN slot_us >= $2 THEN turns END), 0) AS BIGINT)
               FROM spend WHERE group_name = $1 AND slot_us >= $3",
        )
        .bind(group.as_str())
        .bind(periods.day_start_us)
        .bind(periods.month_start_us.min(periods.day_start_us))
        .fetch_one(&self.db.pool)
        .await?;
        Ok(Spent { today_usd: today, month_usd: month, today_turns: u32::try_from(turns).unwrap_or(u32::MAX) })
    }

    /// What the group's turns have cost so far, in USD.
    pub async fn group_cost(&self, group: &GroupName) -> Result<f64, StoreError> {
        let total: Option<f64> = sqlx::query_scalar("SELECT SUM(cost_usd) FROM results WHERE group_name = $1")
            .bind(group.as_str())
            .fetch_one(&self.db.pool)
            .await?;
        Ok(total.unwrap_or(0.0))
    }
}

//! What a group spent in the current day and month, for its budget.

use std::time::SystemTime;

use super::{Store, StoreError};
use crate::domain::budget::{reached, Budget, Periods, Reached, Spent};
use crate::domain::GroupName;

impl Store {
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
    /// One indexed read (`results_by_group`), made only for a group with a budget.
    pub async fn spent(&self, group: &GroupName, periods: &Periods) -> Result<Spent, StoreError> {
        let (today, month, turns): (f64, f64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(CASE WHEN at_us >= ?2 THEN cost_usd END), 0.0),
                    COALESCE(SUM(cost_usd), 0.0),
                    COUNT(CASE WHEN at_us >= ?2 THEN 1 END)
               FROM results WHERE group_name = ?1 AND at_us >= ?3",
        )
        .bind(group.as_str())
        .bind(periods.day_start_us)
        .bind(periods.month_start_us.min(periods.day_start_us))
        .fetch_one(&self.pool)
        .await?;
        Ok(Spent { today_usd: today, month_usd: month, today_turns: u32::try_from(turns).unwrap_or(u32::MAX) })
    }
}

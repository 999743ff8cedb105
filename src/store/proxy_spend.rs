//! What a group's sandboxed code spent through the credential proxy
//! (`proxy_spend`, in quarter hours), and the spend a budget counts: the
//! results' own cost, or the proxy's sum when that is more (see
//! [`Spent::counting_proxy`]).

use std::time::SystemTime;

use super::error::StoreError;
use super::handles::Budgets;
use crate::domain::budget::{Periods, Proxied, ProxyUse, Spent};
use crate::domain::{unix_us, GroupName};

/// The stretch of time one `proxy_spend` row sums: a quarter hour, on which
/// every time zone's midnight falls.
pub const BUCKET_US: i64 = 15 * 60 * 1_000_000;

/// The start of the quarter hour `at` falls in (unix µs).
pub fn bucket_of(at: SystemTime) -> i64 {
    unix_us(at).div_euclid(BUCKET_US) * BUCKET_US
}

impl Budgets {
    /// Adds what passed the proxy for `group` in the quarter hour starting at `bucket_us`.
    pub async fn add_proxy_spend(&self, group: &str, bucket_us: i64, used: &ProxyUse) -> Result<(), StoreError> {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO proxy_spend (group_name, bucket_us, calls, input_tokens, output_tokens, cache_read_tokens,
                                      cache_creation_tokens, cost_usd)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (group_name, bucket_us) DO UPDATE SET
                calls = proxy_spend.calls + excluded.calls,
                input_tokens = proxy_spend.input_tokens + excluded.input_tokens,
                output_tokens = proxy_spend.output_tokens + excluded.output_tokens,
                cache_read_tokens = proxy_spend.cache_read_tokens + excluded.cache_read_tokens,
                cache_creation_tokens = proxy_spend.cache_creation_tokens + excluded.cache_creation_tokens,
                cost_usd = proxy_spend.cost_usd + excluded.cost_usd",
        )
        .bind(group)
        .bind(bucket_us)
        .bind(int(used.calls))
        .bind(int(used.tokens.input))
        .bind(int(used.tokens.output))
        .bind(int(used.tokens.cache_read))
        .bind(int(used.tokens.cache_creation))
        .bind(used.cost_usd)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// What passed the proxy for `group` in the current day and month.
    pub async fn proxy_spent(&self, group: &GroupName, periods: &Periods) -> Result<Proxied, StoreError> {
        let (today, month): (f64, f64) = sqlx::query_as(
            "SELECT COALESCE(SUM(CASE WHEN bucket_us >= $2 THEN cost_usd END), 0.0),
                    COALESCE(SUM(CASE WHEN bucket_us >= $3 THEN cost_usd END), 0.0)
               FROM proxy_spend WHERE group_name = $1 AND bucket_us >= $4",
        )
        .bind(group.as_str())
        .bind(periods.day_start_us)
        .bind(periods.month_start_us)
        .bind(periods.month_start_us.min(periods.day_start_us))
        .fetch_one(&self.db.pool)
        .await?;
        Ok(Proxied { today_usd: today, month_usd: month })
    }

    /// The spend a budget counts in `periods`: [`Budgets::spent`] with what
    /// passed the proxy beyond it.
    pub async fn budget_spent(&self, group: &GroupName, periods: &Periods) -> Result<Spent, StoreError> {
        let spent = self.spent(group, periods).await?;
        Ok(spent.counting_proxy(self.proxy_spent(group, periods).await?))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::store::tests::store_with;

    #[tokio::test]
    async fn the_proxys_quarter_hours_add_up_per_day_and_month() {
        let group: GroupName = "team".parse().unwrap();
        let (_dir, store) = store_with(&group).await;
        let tz: chrono_tz::Tz = "Asia/Kathmandu".parse().unwrap();
        // 2026-03-10 12:00 in Kathmandu (+05:45).
        let now = UNIX_EPOCH + Duration::from_secs(1_773_124_200);
        let periods = Periods::at(now, tz);
        assert_eq!(periods.day_start_us % BUCKET_US, 0, "a +05:45 midnight is on a quarter hour");
        let one = ProxyUse { calls: 1, cost_usd: 0.5, ..ProxyUse::default() };
        // Twice in this quarter hour, once just before today, once before the month.
        store.budgets().add_proxy_spend("team", bucket_of(now), &one).await.unwrap();
        store.budgets().add_proxy_spend("team", bucket_of(now), &one).await.unwrap();
        store.budgets().add_proxy_spend("team", periods.day_start_us - BUCKET_US, &one).await.unwrap();
        store.budgets().add_proxy_spend("team", periods.month_start_us - BUCKET_US, &one).await.unwrap();
        store.budgets().add_proxy_spend("other", bucket_of(now), &one).await.unwrap();
        let proxied = store.budgets().proxy_spent(&group, &periods).await.unwrap();
        assert_eq!(proxied, Proxied { today_usd: 1.0, month_usd: 1.5 });
        let counted = store.budgets().budget_spent(&group, &periods).await.unwrap();
        assert_eq!((counted.today_usd, counted.month_usd), (1.0, 1.5), "no result: the proxy's sum");
    }
}

//! `[budget]`: what every group may spend by default (a group's own budget,
//! `pincer groups set NAME --budget-…`, wins part by part).

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use crate::domain::budget::{cents, Budget};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// USD a group may spend per day (as the CLI reports cost); unset: no limit.
    pub daily_usd: Option<f64>,
    /// USD per calendar month.
    pub monthly_usd: Option<f64>,
    /// Turns per day: for subscription users, whose cost is notional.
    pub daily_turns: Option<u32>,
}

impl BudgetConfig {
    /// As a [`Budget`] (checked first by [`BudgetConfig::check`]).
    pub fn budget(&self) -> Budget {
        Budget {
            daily_cents: self.daily_usd.and_then(cents),
            monthly_cents: self.monthly_usd.and_then(cents),
            daily_turns: self.daily_turns,
        }
    }

    pub(super) fn check(&self) -> Result<(), ConfigError> {
        for (key, usd) in [("budget.daily_usd", self.daily_usd), ("budget.monthly_usd", self.monthly_usd)] {
            if usd.is_some_and(|v| cents(v).is_none()) {
                return Err(ConfigError::Rule { key, problem: "must be an amount of USD, 0 or more (e.g. 5 or 2.50)" });
            }
        }
        Ok(())
    }
}

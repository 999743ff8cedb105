-- Budgets per group (issue 23): NULL means the configured default ([budget]).
-- USD in cents, from the cost each result reports; turns for subscription users.
ALTER TABLE groups ADD COLUMN budget_daily_cents INTEGER;
ALTER TABLE groups ADD COLUMN budget_monthly_cents INTEGER;
ALTER TABLE groups ADD COLUMN budget_daily_turns INTEGER;

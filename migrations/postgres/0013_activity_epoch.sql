-- The group lease's epoch a mirrored activity (0009_activity.sql) was
-- written under (issue 45): a node that restarts, or takes a group back,
-- claims it at a new epoch, so what it mirrored before (a turn "running"
-- that its restart ended) is not read until it writes again. Rows from
-- before this column hold 0, which no lease has (epochs start at 1): not
-- read until their owner writes. The statements are in src/store/activity.rs.

ALTER TABLE group_activity ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;

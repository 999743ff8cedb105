-- What each group spent, per quarter of an hour (issue 34): the sums budgets
-- and `pincer status` read, kept apart from the results retention prunes, so
-- a retention shorter than a month no longer shrinks the month's spend.
-- `slot_us` is the start of the quarter hour (unix µs): every time zone in
-- use today is offset from UTC by whole quarter hours, so a day or a month in
-- the operator's zone is a whole number of slots. Retention deletes old
-- slots, never those of the current month.
CREATE TABLE spend (
    group_name TEXT    NOT NULL REFERENCES groups(name),
    slot_us    INTEGER NOT NULL,
    cost_usd   REAL    NOT NULL DEFAULT 0,
    turns      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (group_name, slot_us)
);

-- Each stored result adds its cost and one turn, in the statement (and so the
-- transaction) that stores it, whichever way it is stored.
CREATE TRIGGER results_add_spend AFTER INSERT ON results
BEGIN
    INSERT INTO spend (group_name, slot_us, cost_usd, turns)
    VALUES (NEW.group_name, NEW.at_us - NEW.at_us % 900000000, COALESCE(NEW.cost_usd, 0.0), 1)
    ON CONFLICT (group_name, slot_us)
    DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd, turns = turns + 1;
END;

-- What the results kept so far say.
INSERT INTO spend (group_name, slot_us, cost_usd, turns)
SELECT group_name, at_us - at_us % 900000000, COALESCE(SUM(cost_usd), 0.0), COUNT(*)
  FROM results
 GROUP BY group_name, at_us - at_us % 900000000;

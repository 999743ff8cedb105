-- A chat message kept only as context (not addressed to the agent) that
-- carries media is prepared too, so that a later "what is in that photo?"
-- finds the file: stored 'preparing' like any message with media, it
-- becomes what `prepared_as` says once prepared ('observed'); NULL means
-- 'queued'. An album part that engages makes its whole album engage.
ALTER TABLE inbound ADD COLUMN prepared_as TEXT;

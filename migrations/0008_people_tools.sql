-- Whose messages may make a group's agent use tools: 'everyone' (as before)
-- or 'admins' (a turn holding a member's words gets the read-only set).
ALTER TABLE groups ADD COLUMN tools TEXT NOT NULL DEFAULT 'everyone';

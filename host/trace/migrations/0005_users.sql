-- The user a trace belongs to (`uid` in its metadata), as a column so that
-- a user's list is an index scan. NULL: nobody's (a run without a user).
ALTER TABLE traces ADD COLUMN uid text;

UPDATE traces SET uid = meta::jsonb ->> 'uid' WHERE meta::jsonb ? 'uid';

CREATE INDEX traces_uid ON traces (uid, created_at_ms DESC, id DESC);

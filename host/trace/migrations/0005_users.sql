-- The user a trace belongs to (`uid` in its metadata), as a column so that
-- a user's list is an index scan. NULL: nobody's (a run without a user).
ALTER TABLE traces ADD COLUMN uid text;

UPDATE traces SET uid = meta::jsonb ->> 'uid' WHERE meta::jsonb ? 'uid';

CREATE INDEX traces_uid ON traces (uid, created_at_ms DESC, id DESC);

-- Experiences with the design's fields: whose they are (`global`,
-- `user:{uid}`, `agent:{type}`), when they apply, the messages that taught
-- them, how they were learnt, and how they fared. Rows from before keep
-- the defaults: global, learnt from an execution, never used, not rated.
ALTER TABLE experiences
    ADD COLUMN scope        text NOT NULL DEFAULT 'global',
    ADD COLUMN condition    text NOT NULL DEFAULT '',
    ADD COLUMN evidence     text[] NOT NULL DEFAULT '{}',
    ADD COLUMN source       text NOT NULL DEFAULT 'execution'
        CHECK (source IN ('execution', 'feedback', 'manual')),
    ADD COLUMN confidence   double precision NOT NULL DEFAULT 0.5
        CHECK (confidence BETWEEN 0 AND 1),
    ADD COLUMN usage_count  bigint NOT NULL DEFAULT 0 CHECK (usage_count >= 0),
    ADD COLUMN success_rate double precision CHECK (success_rate BETWEEN 0 AND 1);

-- A run reads the global scope, its user's and its agent type's.
CREATE INDEX experiences_scope ON experiences (scope, seq);

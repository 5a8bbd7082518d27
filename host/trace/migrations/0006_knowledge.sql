-- Knowledge: notes saved by runs and people, found by full-text search.
-- Numbered 0005, leaving 0004 free for the users' migration written
-- alongside it.
-- The tags as one text for the generated column: array_to_string is only
-- STABLE, and a generated column takes IMMUTABLE functions alone.
CREATE FUNCTION knowledge_tags_text(tags text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT array_to_string(tags, ' ') $$;

CREATE TABLE knowledge (
    id          text PRIMARY KEY,
    -- `global`, `user:{uid}` or `agent:{type}`: searches filter on it.
    scope       text NOT NULL,
    title       text NOT NULL CHECK (title <> ''),
    content     text NOT NULL CHECK (content <> ''),
    tags        text[] NOT NULL DEFAULT '{}',
    -- RFC 3339 in UTC with microseconds, as the file store keeps them.
    created_at  text NOT NULL,
    updated_at  text NOT NULL,
    source_trace_id text,
    source_call_id  text,
    -- Title weighs most, then tags, then content.
    search      tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') ||
        setweight(to_tsvector('english', knowledge_tags_text(tags)), 'B') ||
        setweight(to_tsvector('english', content), 'C')
    ) STORED
);

CREATE INDEX knowledge_search ON knowledge USING gin (search);
CREATE INDEX knowledge_scope ON knowledge (scope, created_at);

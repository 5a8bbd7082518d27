-- Experiences: lessons learnt from past runs, shared by every host. One row
-- per block of the markdown form (`reson experiences export` writes it).
CREATE TABLE experiences (
    id          text PRIMARY KEY,
    -- Insertion order: the order the markdown file keeps, and the tie-break
    -- of ranking. Concurrent appends each draw their own.
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    trace_id    text NOT NULL DEFAULT '',
    category    text NOT NULL DEFAULT '',
    state_tags  text[] NOT NULL DEFAULT '{}',
    intent_tags text[] NOT NULL DEFAULT '{}',
    helpful     bigint NOT NULL DEFAULT 0 CHECK (helpful >= 0),
    harmful     bigint NOT NULL DEFAULT 0 CHECK (harmful >= 0),
    -- As written (RFC 3339 when the host wrote it; a person editing the
    -- markdown may write anything), so that the markdown round trip is exact.
    created_at  text NOT NULL DEFAULT '',
    -- Front-matter fields a person added by hand, as a YAML mapping ('' when none).
    extra_yaml  text NOT NULL DEFAULT '',
    rule        text NOT NULL CHECK (rule <> '')
);

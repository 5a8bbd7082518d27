-- Traces, their messages (a tree by parent_sequence), events and goal trees.
--
-- The trace's metadata, messages and events are kept as the JSON the file
-- store writes (text, decoded by the host); only what queries filter or
-- join on has a column of its own.

CREATE TABLE traces (
    id              text PRIMARY KEY,
    status          text NOT NULL,
    parent_trace_id text,
    created_at_ms   bigint NOT NULL,
    -- The metadata as last written; `get_trace` reconciles it with the
    -- messages and events written after it, as the file store does.
    last_sequence   bigint NOT NULL,
    meta            text NOT NULL,
    -- The goal tree; NULL until one is saved.
    goals           text
);

-- list_traces: newest first, optionally by status or by parent.
CREATE INDEX traces_created ON traces (created_at_ms DESC, id DESC);
CREATE INDEX traces_status ON traces (status, created_at_ms DESC, id DESC);
CREATE INDEX traces_parent ON traces (parent_trace_id, created_at_ms DESC, id DESC);

CREATE TABLE messages (
    trace_id        text NOT NULL REFERENCES traces (id),
    sequence        bigint NOT NULL,
    parent_sequence bigint,
    -- The sequence of the first message of this message's linear chain:
    -- the main path is a walk over chains (one row per branch point) and a
    -- range scan of each, not a probe per message.
    segment         bigint NOT NULL,
    goal_id         text,
    body            text NOT NULL,
    PRIMARY KEY (trace_id, sequence)
);

CREATE INDEX messages_segment ON messages (trace_id, segment, sequence);
CREATE INDEX messages_goal ON messages (trace_id, goal_id, sequence);

CREATE TABLE events (
    trace_id text NOT NULL REFERENCES traces (id),
    id       bigint NOT NULL,
    body     text NOT NULL,
    PRIMARY KEY (trace_id, id)
);

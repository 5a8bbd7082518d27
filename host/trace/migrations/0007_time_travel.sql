-- What a trace keeps for time travel (see reson_trace::artifact): objects,
-- bytes kept once per trace under their SHA-256 (workspace files at a
-- checkpoint), and records, JSON documents by kind and key (checkpoint
-- manifests, a tool call's recorded effects).
CREATE TABLE trace_objects (
    trace_id text NOT NULL REFERENCES traces (id),
    digest   text NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (trace_id, digest)
);

CREATE TABLE trace_records (
    trace_id text NOT NULL REFERENCES traces (id),
    kind     text NOT NULL,
    key      text NOT NULL,
    body     text NOT NULL,
    PRIMARY KEY (trace_id, kind, key)
);

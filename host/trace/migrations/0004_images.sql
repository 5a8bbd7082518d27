-- The images of messages (a tool's screenshot, say), kept beside them
-- rather than as base64 inside the message's JSON: a message names its
-- images (`000003.png`, `000003-1.png`, ...), and a reader fetches the
-- bytes only when it needs them.
CREATE TABLE message_images (
    trace_id   text NOT NULL REFERENCES traces (id),
    name       text NOT NULL,
    media_type text NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (trace_id, name)
);

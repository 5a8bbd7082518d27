-- Which host runs which trace. A row is a lease: its owner renews
-- `expires_at` while the run goes and deletes the row when the run ends.
-- A row whose `expires_at` has passed (on the database's clock) belongs to
-- a host that stopped renewing, because it died or stalled: any host may
-- take it over and continue the trace.
CREATE TABLE run_leases (
    trace_id   TEXT PRIMARY KEY,
    -- A random id per server process: a restarted host is another owner.
    host_id    TEXT NOT NULL,
    -- hostname/pid, for the people reading a 409.
    host_name  TEXT NOT NULL,
    -- The owner's number for this run of the trace, so that the end of one
    -- run never releases the next run's lease.
    claim      BIGINT NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    -- Set by a stop from another host. The NOTIFY that goes with it is
    -- lost if the owner's listener is reconnecting; the owner's next
    -- renewal reads this, so no stop is lost.
    stop_requested BOOLEAN NOT NULL DEFAULT false
);

-- The heartbeat renews one host's leases.
CREATE INDEX run_leases_host ON run_leases (host_id);

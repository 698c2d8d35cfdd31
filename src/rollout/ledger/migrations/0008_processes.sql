-- Heartbeats: one row per role process (supervisor, trainer, runner, gateway, inference,
-- bridge, evaluator), upserted every few seconds with what it is doing. `rollout ps` reads it;
-- a row whose last beat is older than 3 of its intervals (and that never said it stopped) is a
-- dead process.
CREATE TABLE processes (
    process_id text PRIMARY KEY,                -- host:pid:random, unique per process start
    host text NOT NULL,
    pid integer NOT NULL,
    role text NOT NULL,
    run_id text,                                -- null for roles serving every run
    status text NOT NULL DEFAULT '',
    interval_s double precision NOT NULL CHECK (interval_s > 0),
    started_at timestamptz NOT NULL DEFAULT now(),
    beat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at timestamptz
);
CREATE INDEX processes_beat ON processes (beat_at);

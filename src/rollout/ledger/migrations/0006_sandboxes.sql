-- Sandbox instances and their claims.
--
-- `sandboxes` holds one lease row per instance: where it runs (pool, host, connection details)
-- and the claim on it (`epoch` grows on every claim; the episode holding it, until when, which
-- seat attempts hold it and which agents have finished). `clean` is true after a start or a reset and false once an episode has
-- used it, so the next claimer resets it first. `sandbox_events` is the append-only history.

CREATE TABLE sandboxes (
    instance_id text PRIMARY KEY,
    pool        text NOT NULL,
    host        text NOT NULL,
    details     jsonb NOT NULL,
    seats       integer NOT NULL CHECK (seats >= 1),
    retired     boolean NOT NULL DEFAULT false,
    clean       boolean NOT NULL DEFAULT true,
    epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    episode_id  text,
    run_id      text,
    holder      text,
    ready       boolean NOT NULL DEFAULT false,
    agents      integer,
    members     jsonb NOT NULL DEFAULT '{}',  -- agent -> the seat attempt that holds the claim
    finished    integer[] NOT NULL DEFAULT '{}',
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandboxes_live ON sandboxes (pool, host, created_at) WHERE NOT retired;
CREATE INDEX sandboxes_episode ON sandboxes (episode_id) WHERE episode_id IS NOT NULL;

CREATE TABLE sandbox_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id text NOT NULL REFERENCES sandboxes,
    epoch       bigint NOT NULL,
    event       text NOT NULL
        CHECK (event IN ('started', 'claimed', 'expired', 'reset', 'released', 'retired')),
    episode_id  text,
    holder      text,
    detail      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_events_instance ON sandbox_events (instance_id, id);

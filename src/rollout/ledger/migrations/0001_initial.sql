-- The ledger's first schema: append-only facts, plus two kinds of lease rows (leases, seats).
--
-- Facts are inserted, never updated or deleted; each has a natural key so a retried write is a
-- no-op. The only rows that change are leases (holder, epoch, expiry) and seats, which are the
-- per-seat leases of episode attempts (latest attempt, holder, expiry, and `done`, a cache of
-- "a seat_ends row exists" written in the same transaction as that row).

CREATE TABLE runs (
    run_id      text PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    environment text NOT NULL,
    config      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE settings (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text NOT NULL REFERENCES runs,
    key        text NOT NULL,
    value      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX settings_latest ON settings (run_id, key, id DESC);

CREATE VIEW current_settings AS
SELECT DISTINCT ON (run_id, key) run_id, key, value, created_at
FROM settings
ORDER BY run_id, key, id DESC;

CREATE TABLE episodes (
    episode_id  text PRIMARY KEY,
    run_id      text NOT NULL REFERENCES runs,
    kind        text NOT NULL CHECK (kind IN ('train', 'eval', 'playground')),
    group_index integer NOT NULL CHECK (group_index >= 0),
    member      integer NOT NULL CHECK (member >= 0),
    parameters  jsonb NOT NULL,
    seed        bigint NOT NULL,
    agents      integer NOT NULL CHECK (agents >= 1),
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, kind, group_index, member)
);
CREATE INDEX episodes_run_seq ON episodes (run_id, seq);

-- One lease row per agent seat: `attempt` is the epoch of the latest claim (0: never claimed).
CREATE TABLE seats (
    episode_id text NOT NULL REFERENCES episodes,
    agent      integer NOT NULL CHECK (agent >= 0),
    run_id     text NOT NULL,
    kind       text NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    attempt    integer NOT NULL DEFAULT 0,
    runner     text,
    expires_at timestamptz,
    done       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (episode_id, agent)
);
-- Claims scan only seats that are not done, oldest first.
CREATE INDEX seats_open ON seats (seq) WHERE NOT done;

CREATE TABLE seat_claims (
    episode_id text NOT NULL,
    agent      integer NOT NULL,
    attempt    integer NOT NULL CHECK (attempt >= 1),
    run_id     text NOT NULL,
    runner     text NOT NULL,
    api_key    text NOT NULL UNIQUE,
    lease_s    float8 NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, agent, attempt),
    FOREIGN KEY (episode_id, agent) REFERENCES seats
);

CREATE TABLE turns (
    episode_id        text NOT NULL,
    agent             integer NOT NULL,
    attempt           integer NOT NULL,
    turn_index        integer NOT NULL CHECK (turn_index >= 0),
    run_id            text NOT NULL,
    prompt_tokens     integer[] NOT NULL,
    completion_tokens integer[] NOT NULL,
    logprobs          float8[] NOT NULL,
    version           integer NOT NULL,
    stop_reason       text NOT NULL,
    extends_previous  boolean NOT NULL,
    started_at        float8 NOT NULL,
    ended_at          float8 NOT NULL,
    temperature       float8 NOT NULL,
    request           jsonb NOT NULL,
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    recorded_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, agent, attempt, turn_index)
);
CREATE INDEX turns_run_seq ON turns (run_id, seq);

-- The first end of a seat wins (primary key on the seat, not the attempt).
CREATE TABLE seat_ends (
    episode_id text NOT NULL,
    agent      integer NOT NULL,
    attempt    integer NOT NULL,
    run_id     text NOT NULL,
    status     text NOT NULL CHECK (status IN ('completed', 'failed')),
    reward     float8 NOT NULL,
    score      jsonb,
    metrics    jsonb NOT NULL,
    error      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (episode_id, agent),
    FOREIGN KEY (episode_id, agent, attempt) REFERENCES seat_claims
);

CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    epoch       bigint NOT NULL CHECK (epoch >= 1),
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE train_steps (
    run_id        text NOT NULL REFERENCES runs,
    step          integer NOT NULL CHECK (step >= 0),
    group_indices integer[] NOT NULL,
    metrics       jsonb NOT NULL,
    lease_name    text NOT NULL,
    lease_epoch   bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step)
);

-- A group is trained at most once: the primary key is the group, not the step.
CREATE TABLE consumed_groups (
    run_id      text NOT NULL,
    group_index integer NOT NULL,
    step        integer NOT NULL,
    PRIMARY KEY (run_id, group_index),
    FOREIGN KEY (run_id, step) REFERENCES train_steps
);

CREATE TABLE checkpoints (
    run_id         text NOT NULL REFERENCES runs,
    version        integer NOT NULL CHECK (version >= 0),
    parent_version integer,
    uri            text NOT NULL,
    kind           text NOT NULL,
    metadata       jsonb NOT NULL,
    lease_epoch    bigint NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, version)
);

CREATE TABLE conversions (
    run_id     text NOT NULL REFERENCES runs,
    version    integer NOT NULL,
    backend    text NOT NULL,
    uri        text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, version, backend)
);

CREATE TABLE serving (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      text NOT NULL REFERENCES runs,
    version     integer NOT NULL,
    uris        jsonb NOT NULL,
    lease_epoch bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX serving_latest ON serving (run_id, id DESC);

CREATE TABLE serving_acks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text NOT NULL REFERENCES runs,
    server     text NOT NULL,
    version    integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX serving_acks_latest ON serving_acks (run_id, server, id DESC);

-- Derived state for monitors and ad-hoc SQL.
CREATE VIEW current_serving_acks AS
SELECT DISTINCT ON (run_id, server) run_id, server, version, created_at
FROM serving_acks
ORDER BY run_id, server, id DESC;

CREATE VIEW group_status AS
SELECT e.run_id, e.kind, e.group_index,
       count(DISTINCT e.episode_id) AS episodes,
       count(*) AS seats,
       count(*) FILTER (WHERE s.done) AS seats_ended,
       bool_and(s.done) AS complete,
       (SELECT c.step FROM consumed_groups c
        WHERE c.run_id = e.run_id AND c.group_index = e.group_index AND e.kind = 'train')
           AS consumed_by_step
FROM episodes e JOIN seats s USING (episode_id)
GROUP BY e.run_id, e.kind, e.group_index;

-- Wake-ups: every insert into a fact table NOTIFYs its channel(s) once per statement with the
-- run id as payload (Postgres folds duplicates within a transaction).
CREATE FUNCTION rollout_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    channel text;
BEGIN
    FOREACH channel IN ARRAY TG_ARGV LOOP
        PERFORM pg_notify(channel, r.run_id) FROM (SELECT DISTINCT run_id FROM new_rows) r;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_notify AFTER INSERT ON runs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('runs');
CREATE TRIGGER settings_notify AFTER INSERT ON settings REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('settings', 'episodes');
CREATE TRIGGER episodes_notify AFTER INSERT ON episodes REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('episodes');
CREATE TRIGGER seat_claims_notify AFTER INSERT ON seat_claims REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('claims');
CREATE TRIGGER turns_notify AFTER INSERT ON turns REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('turns');
CREATE TRIGGER seat_ends_notify AFTER INSERT ON seat_ends REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('ends');
CREATE TRIGGER train_steps_notify AFTER INSERT ON train_steps REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('train_steps');
CREATE TRIGGER checkpoints_notify AFTER INSERT ON checkpoints REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('checkpoints');
CREATE TRIGGER conversions_notify AFTER INSERT ON conversions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('conversions');
CREATE TRIGGER serving_notify AFTER INSERT ON serving REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('serving');
CREATE TRIGGER serving_acks_notify AFTER INSERT ON serving_acks REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('serving_acks', 'serving');

-- Evals: versioned suites, requests (scheduled or on demand), jobs and their scores.
--
-- A job plays one suite version on one checkpoint of one run. Its episodes are ordinary
-- `episodes` rows of kind 'eval' (group_index = job_id, member = the episode's place in the
-- suite), so seat claims, turns and seat ends work as for training, and every query that feeds
-- the trainer reads kind 'train' only. All rows are facts: inserted once, never updated.

-- The content of each suite version; a changed content under a recorded version is refused.
CREATE TABLE eval_suites (
    name         text NOT NULL,
    version      text NOT NULL,
    content_hash text NOT NULL,
    definition   jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

-- "Evaluate checkpoint `version` of the run with the suite named `suite`" (a file path or a
-- suite name as the preset or the user wrote it). version -1 is the run's base model.
CREATE TABLE eval_requests (
    run_id     text NOT NULL REFERENCES runs,
    suite      text NOT NULL,
    version    integer NOT NULL CHECK (version >= -1),
    trigger    text NOT NULL CHECK (trigger IN ('schedule', 'demand')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, suite, version)
);

CREATE TABLE eval_jobs (
    job_id        integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        text NOT NULL REFERENCES runs,
    suite         text NOT NULL,
    suite_version text NOT NULL,
    version       integer NOT NULL CHECK (version >= -1),
    episodes      integer NOT NULL CHECK (episodes >= 1),
    trigger       text NOT NULL CHECK (trigger IN ('schedule', 'demand')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, suite, suite_version, version),
    FOREIGN KEY (suite, suite_version) REFERENCES eval_suites
);

-- Which job answered a request (written once, when an evaluator expands the request).
CREATE TABLE eval_request_jobs (
    run_id  text NOT NULL,
    suite   text NOT NULL,
    version integer NOT NULL,
    job_id  integer NOT NULL REFERENCES eval_jobs,
    PRIMARY KEY (run_id, suite, version),
    FOREIGN KEY (run_id, suite, version) REFERENCES eval_requests
);

-- One score per environment of a finished job, all written in one transaction: a job with any
-- score row is done. Idempotent on (job, environment).
CREATE TABLE eval_scores (
    job_id      integer NOT NULL REFERENCES eval_jobs,
    environment text NOT NULL,
    position    integer NOT NULL CHECK (position >= 0),
    run_id      text NOT NULL REFERENCES runs,
    score       float8 NOT NULL,
    ci_low      float8 NOT NULL,
    ci_high     float8 NOT NULL,
    episodes    integer NOT NULL CHECK (episodes >= 1),
    failed      integer NOT NULL CHECK (failed >= 0),
    method      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, environment),
    UNIQUE (job_id, position)
);

-- A request wakes evaluators like new episodes wake runners.
CREATE TRIGGER eval_requests_notify AFTER INSERT ON eval_requests REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollout_notify('episodes');

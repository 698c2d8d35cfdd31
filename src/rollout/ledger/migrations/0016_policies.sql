-- Several policies in one run (rollout.runs.policies): each policy has its own version chain,
-- train steps, consumed groups, conversions, serving records and acknowledgements, and every
-- turn records the policy that sampled it. Every row written before (and every row of a run
-- that names no policies) belongs to the policy 'main' (rollout.runs.policies.DEFAULT_POLICY).
--
-- Natural keys gain the policy: a version is unique within its policy's chain, a group is
-- trained at most once by each policy (each policy's step trains its own agents' turns of it).

ALTER TABLE checkpoints ADD COLUMN policy text NOT NULL DEFAULT 'main';
ALTER TABLE checkpoints DROP CONSTRAINT checkpoints_pkey;
ALTER TABLE checkpoints ADD PRIMARY KEY (run_id, policy, version);

ALTER TABLE consumed_groups DROP CONSTRAINT consumed_groups_run_id_step_fkey;
ALTER TABLE train_steps ADD COLUMN policy text NOT NULL DEFAULT 'main';
ALTER TABLE train_steps DROP CONSTRAINT train_steps_pkey;
ALTER TABLE train_steps ADD PRIMARY KEY (run_id, policy, step);
ALTER TABLE consumed_groups ADD COLUMN policy text NOT NULL DEFAULT 'main';
ALTER TABLE consumed_groups DROP CONSTRAINT consumed_groups_pkey;
ALTER TABLE consumed_groups ADD PRIMARY KEY (run_id, policy, group_index);
ALTER TABLE consumed_groups
    ADD FOREIGN KEY (run_id, policy, step) REFERENCES train_steps (run_id, policy, step);

ALTER TABLE conversions ADD COLUMN policy text NOT NULL DEFAULT 'main';
ALTER TABLE conversions DROP CONSTRAINT conversions_pkey;
ALTER TABLE conversions ADD PRIMARY KEY (run_id, policy, version, backend);

ALTER TABLE serving ADD COLUMN policy text NOT NULL DEFAULT 'main';
DROP INDEX serving_latest;
CREATE INDEX serving_latest ON serving (run_id, policy, id DESC);

ALTER TABLE serving_acks ADD COLUMN policy text NOT NULL DEFAULT 'main';
DROP INDEX serving_acks_latest;
CREATE INDEX serving_acks_latest ON serving_acks (run_id, server, policy, id DESC);
DROP VIEW current_serving_acks;
CREATE VIEW current_serving_acks AS
SELECT DISTINCT ON (run_id, server, policy) run_id, server, policy, version, created_at
FROM serving_acks
ORDER BY run_id, server, policy, id DESC;

ALTER TABLE turns ADD COLUMN policy text NOT NULL DEFAULT 'main';

-- A group's status for one policy (`policy_group_status(p)`): complete as before (every seat of
-- every episode ended), consumed once that policy's step trained it. The consumption stays a
-- grouping column (one index probe per episode), so a filter on it is applied before seats are
-- aggregated (migration 0002). `group_status` is the same for any policy: consumed by the
-- earliest step of any policy (what displays show).
CREATE FUNCTION policy_group_status(p_policy text)
RETURNS TABLE (run_id text, kind text, group_index integer, episodes bigint, seats bigint,
               seats_ended bigint, complete boolean, first_seq bigint, consumed_by_step integer)
LANGUAGE sql STABLE AS $$
SELECT e.run_id, e.kind, e.group_index,
       count(DISTINCT e.episode_id) AS episodes,
       count(*) AS seats,
       count(*) FILTER (WHERE s.done) AS seats_ended,
       bool_and(s.done) AS complete,
       min(e.seq) AS first_seq,
       c.step AS consumed_by_step
FROM episodes e
JOIN seats s ON s.episode_id = e.episode_id
LEFT JOIN LATERAL (SELECT min(g.step) AS step FROM consumed_groups g
                   WHERE g.run_id = e.run_id AND g.group_index = e.group_index
                     AND e.kind = 'train' AND (p_policy IS NULL OR g.policy = p_policy)) c
       ON true
GROUP BY e.run_id, e.kind, e.group_index, c.step
$$;

CREATE OR REPLACE VIEW group_status AS SELECT * FROM policy_group_status(NULL);

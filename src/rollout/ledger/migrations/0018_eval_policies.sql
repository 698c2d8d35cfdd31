-- Eval scores per policy (rollout.runs.policies): an eval of a run with several policies plays
-- each agent's seats with its own policy's checkpoint of the version evaluated, and records one
-- score per policy and environment (the mean reward of that policy's agents' seats). Every
-- score recorded before, and every score of a run with one policy, belongs to the policy 'main'
-- (rollout.runs.policies.DEFAULT_POLICY).
ALTER TABLE eval_scores ADD COLUMN policy text NOT NULL DEFAULT 'main';
ALTER TABLE eval_scores DROP CONSTRAINT eval_scores_pkey;
ALTER TABLE eval_scores ADD PRIMARY KEY (job_id, policy, environment);
ALTER TABLE eval_scores DROP CONSTRAINT eval_scores_job_id_position_key;
ALTER TABLE eval_scores ADD CONSTRAINT eval_scores_job_id_policy_position_key
    UNIQUE (job_id, policy, position);

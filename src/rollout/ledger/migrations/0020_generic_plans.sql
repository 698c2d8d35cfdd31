-- Reads whose cost grew with the run once psycopg prepared them (after five executions a
-- statement is prepared, and Postgres may then run it with a generic plan, made without the
-- parameters' values). At 300 steps of the README's parity run (38,400 episodes):
--
-- * `policy_group_status(p)` probed `consumed_groups` with `(p IS NULL OR g.policy = p)`: no
--   index serves that when `p` is a parameter, so the generic plan scanned every consumed group
--   of the run once per episode it grouped (the trainer's read of trainable groups: 30 ms a call,
--   several calls a step). And its joins were left to the planner, whose statistics of a young
--   run's tables are those of empty tables until autovacuum analyses them (a minute or more):
--   measured mid-run, the trainer's read joined `consumed_groups` on (run, policy) only and
--   filtered the group afterwards, 637,848 rows for 584 episodes, 296 ms a call. The function now
--   asks for one policy, and reads each episode's seats and its group's consumption in lateral
--   subqueries that cannot be flattened (an aggregate, a LIMIT): a probe of each primary key per
--   episode of the range the caller asks for, whatever the statistics say. `group_status`, which
--   reads consumption by any policy (for people, not the trainer), has its own body.
-- * The lag view's `serving` (the oldest version a server of the policy serves now) read
--   `current_serving_acks`, whose DISTINCT ON sorted every acknowledgement of the run, for each key
--   of the gateway's key batch. An index in (run, policy, server, newest first) order lets a
--   read find each server's newest acknowledgement by a probe (`rollout.ledger.serving`).

DROP VIEW group_status;

CREATE OR REPLACE FUNCTION policy_group_status(p_policy text)
RETURNS TABLE (run_id text, kind text, group_index integer, episodes bigint, seats bigint,
               seats_ended bigint, complete boolean, first_seq bigint, consumed_by_step integer)
LANGUAGE sql STABLE AS $$
SELECT e.run_id, e.kind, e.group_index,
       count(*) AS episodes,
       sum(st.seats)::bigint AS seats,
       sum(st.ended)::bigint AS seats_ended,
       bool_and(st.seats = st.ended) AS complete,
       min(e.seq) AS first_seq,
       c.step AS consumed_by_step
FROM episodes e
CROSS JOIN LATERAL (SELECT count(*) AS seats, count(*) FILTER (WHERE s.done) AS ended
                    FROM seats s WHERE s.episode_id = e.episode_id) st
LEFT JOIN LATERAL (SELECT g.step FROM consumed_groups g
                   WHERE g.run_id = e.run_id AND g.policy = p_policy
                     AND g.group_index = e.group_index AND e.kind = 'train'
                   LIMIT 1) c
       ON true
WHERE st.seats > 0
GROUP BY e.run_id, e.kind, e.group_index, c.step
$$;

CREATE VIEW group_status AS
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
                     AND e.kind = 'train') c
       ON true
GROUP BY e.run_id, e.kind, e.group_index, c.step;

CREATE INDEX serving_acks_by_policy ON serving_acks (run_id, policy, server, id DESC);

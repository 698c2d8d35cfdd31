-- One definition of a complete group: `group_status`, read by both the trainer's
-- `complete_groups` and the check in `record_train_step`.
--
-- A group (run, kind, group_index) is complete when every seat of every episode of it has ended
-- (a failed seat counts as ended). A train group is consumed once a train step has trained it
-- (`consumed_by_step`); it is trainable when it is complete and not consumed. `first_seq` orders
-- groups by when their first episode was added.
--
-- The consumption is a grouping column, not an aggregate, so a filter on it
-- (`consumed_by_step IS NULL`) is applied to the episodes before their seats are aggregated:
-- a long run's trained groups cost an anti-join, not a scan of their seats.

DROP VIEW group_status;

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
LEFT JOIN consumed_groups c
       ON c.run_id = e.run_id AND c.group_index = e.group_index AND e.kind = 'train'
GROUP BY e.run_id, e.kind, e.group_index, c.step;

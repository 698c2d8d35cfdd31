-- Each run's count of episodes, kept as they are added: `episode_counts` (the progress line of
-- `rollout train`, the supervisor's failure check and the monitor ask it several times a second)
-- counted the run's episodes on every call, the one part of it that grew with the run (5.7 ms a
-- call at 32,000 episodes, the costliest statement of a 250-step parity run). A statement-level
-- trigger adds each insert's episodes to their run's row, in the insert's own transaction.
-- Episodes are never deleted (a run's record is kept whole), so nothing is subtracted.
CREATE TABLE run_episode_totals (
    run_id text PRIMARY KEY REFERENCES runs ON DELETE CASCADE,
    total  bigint NOT NULL CHECK (total >= 0)
);

INSERT INTO run_episode_totals (run_id, total)
SELECT run_id, count(*) FROM episodes GROUP BY run_id;

CREATE FUNCTION count_added_episodes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_episode_totals AS t (run_id, total)
    SELECT run_id, count(*) FROM added GROUP BY run_id
    ON CONFLICT (run_id) DO UPDATE SET total = t.total + excluded.total;
    RETURN NULL;
END
$$;

CREATE TRIGGER episodes_counted AFTER INSERT ON episodes
REFERENCING NEW TABLE AS added
FOR EACH STATEMENT EXECUTE FUNCTION count_added_episodes();

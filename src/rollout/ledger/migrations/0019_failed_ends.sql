-- The failed seat ends of a run, found without reading its other ends: `episode_counts` (the
-- progress line of `rollout train`, the supervisor's failure check and the monitor ask it
-- several times a second) counted every seat of the run, a read that grew with the run (3.8 ms
-- at 3,840 episodes). It now reads the open seats (`seats_open`), an index count of the run's
-- episodes and this index, which holds only failures.
CREATE INDEX seat_ends_failed ON seat_ends (run_id) WHERE status = 'failed';

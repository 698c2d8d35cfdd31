"""The evaluator role, assembled: what plays eval suites against a run's checkpoints.

- `role`: `evaluator` (`rollout evaluator [--run RUN]`, started per run with an eval schedule by
  the local supervisor) and `wait_for_evals` (`rollout train` waits for the last scores).
- `worker`: `Evaluator`, which turns eval requests into jobs, plays their episodes and records
  their scores.
- `serving`: `CheckpointServer`, the evaluator's own backend and gateway serving the checkpoint
  asked for, alongside training.
- `demand`: `evaluate`, behind `rollout evals run SUITE --checkpoint VERSION|latest|base`.

Suites, their episodes and scores, and the reports are `rollout.evals`.
"""

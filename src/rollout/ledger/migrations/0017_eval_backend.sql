-- The inference backend that sampled an eval job's episodes (`local`, `vllm`, `tinker`,
-- `scripted`): the evaluator samples with the run's own backend, and the score says which.
-- NULL on scores recorded before the backend was named (they were sampled by `local`, or by
-- `scripted` for the scripted model).
ALTER TABLE eval_scores ADD COLUMN backend text;

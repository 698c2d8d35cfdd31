"""Training: from recorded turns to optimizer steps.

The pieces, in the order the training loop composes them:

- `segments`: one seat's turns -> `Segment`s (merged when a prompt extends the previous prompt
  plus completion; loss mask on sampled tokens; per-token sampler logprobs and versions).
- `advantages`: group-relative advantages per seat (`group_advantages`, `seat_advantages`).
- `batch`: a complete `GroupRecord` -> segments carrying their seat's advantage.
- `importance`: per-token importance weights (`tis`, `icepop`, `none`) and their metrics.
- `loss`: the importance-weighted policy-gradient loss and the supervised warm-up loss.
- `providers.base`: the `TrainingProvider` contract, `TrainBatch`, `SavedCheckpoint`.
- `providers.torch`: `TorchProvider` (full weights or LoRA, CPU or GPU, exact resume).
- `warmup`: format warm-up (random answers of the right shape).
- `sampler`: a minimal in-process batched sampler for experiments and tests.
- `loop`: the trainer role (run orchestration); `retention`: which checkpoints keep their files.

The run's configuration (`RunConfig`, `RunSpec`) is `rollout.runs`.

Submodules are imported explicitly (`from rollout.training.segments import build_segments`) so
that importing this package stays cheap (no torch).
"""

"""The local backend: PyTorch + transformers sampling with per-token logprobs, batched.

- `backend`: `LocalBackend`, its request queue and worker thread (the event loop is never
  blocked);
- `decoding`: the batching engine: left-padded prefill, one KV-cache step per token,
  continuous batching (finished rows leave, queued requests join at step boundaries);
- `sampling`: the next token and its logprob under the distribution actually sampled from
  (temperature, top_p nucleus, greedy);
- `weights`: new weights read, merged (LoRA) and checked against the model.

`LocalBackend.score` gives teacher-forced logprobs under `log_softmax(logits / T)` (no top_p),
the trainer's formula (`rollout.models.logprobs`), which equal the sampling logprobs of the same
tokens when top_p is 1. Weights change between batches only (`load_weights`), so a completion
is sampled by exactly one version and reports it.
"""

from rollout.inference.local.backend import SMALL_MODEL_PARAMS, LocalBackend

__all__ = ["SMALL_MODEL_PARAMS", "LocalBackend"]

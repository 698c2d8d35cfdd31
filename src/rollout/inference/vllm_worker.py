"""A vLLM worker extension: reload full weights in place from a Hugging Face folder.

This file runs inside vLLM's own environment (it imports nothing of rollout's): the server
launcher copies it next to the server as `rollout_vllm_worker.py` and starts vLLM with
`--worker-extension-cls rollout_vllm_worker.RolloutWorkerExtension`; the backend calls
`rollout_reload` through vLLM's `/collective_rpc` endpoint (dev mode), once per worker.

Why this path: it reuses vLLM's own in-place reload (`model_runner.reload_weights`), which
knows how each layer's checkpoint tensors become kernel tensors (stacked qkv, repacked CPU
weights, quantized layouts), and only adds what that path misses: with tied embeddings the
checkpoint has no `lm_head.weight`, so the reload would keep the old output head. The head is
re-tied to the new embeddings and its post-load processing run again (on CPU that repacks the
weight the matmul kernel uses). The alternative, `model.load_weights`, fails on CPU once weights
are repacked, and NCCL weight transfer needs a trainer in the same process group.
"""

from __future__ import annotations

from typing import Any


class RolloutWorkerExtension:
    """Mixed into vLLM's worker class; `self.model_runner` is the worker's."""

    model_runner: Any

    def rollout_reload(self, path: str) -> str:
        """Load the weights in the folder `path` in place; returns "tied" or "untied"."""
        self.model_runner.reload_weights(weights_path=path)
        model = self.model_runner.get_model()
        config = getattr(model, "config", None)
        if not getattr(config, "tie_word_embeddings", False):
            return "untied"
        head = model.lm_head
        head.weight = model.model.embed_tokens.weight
        method = getattr(head, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(head)
        return "tied"

"""LocalBackend throughput: sampled tokens per second at batch 1 and batch N.

A fresh tiny Qwen3 (hidden 128, 2 layers, 4 heads, 2 KV heads, vocab 512) from
`rollout.models.init_model`; prompts are chat-rendered arithmetic questions (~30 tokens); every
request samples exactly `--tokens` new tokens at temperature 1 (stop tokens disabled). Batch 1
runs requests one after another; batch N sends N at once and lets the backend batch them. The
ratio batch-N / batch-1 is the batching speed-up measured in the same run.

Run: `uv run python benchmarks/local_backend.py` (options: --batch 16 --tokens 64 --rounds 3
--threads 0 (the backend's default: 1 for tiny models on CPU) --device cpu).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time

import torch

from rollout.contracts import Message, SamplingParams
from rollout.inference.local import LocalBackend
from rollout.models import init_model
from rollout.rendering import HFRenderer


async def _throughput(
    backend: LocalBackend, prompts: list[list[int]], batch: int, tokens: int, rounds: int
) -> float:
    params = SamplingParams(max_tokens=tokens, temperature=1.0, stop_token_ids=[-1])
    await backend.sample(prompts[0], params)  # warm-up
    total, start = 0, time.perf_counter()
    for round_ in range(rounds):
        group = [prompts[(round_ * batch + i) % len(prompts)] for i in range(batch)]
        completions = await asyncio.gather(*(backend.sample(p, params) for p in group))
        total += sum(len(c.tokens) for c in completions)
    return total / (time.perf_counter() - start)


async def main() -> None:
    parser = argparse.ArgumentParser(description="LocalBackend throughput")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    folder = init_model(tempfile.mkdtemp(prefix="bench-local-"), hidden=128, layers=2)
    renderer = HFRenderer(folder)
    prompts = [renderer.render([Message.user(f"What is {i} + {2 * i}?")]) for i in range(64)]
    backend = LocalBackend(
        folder, device=args.device, max_batch=args.batch, threads=args.threads or None
    )
    try:
        one = await _throughput(backend, prompts, 1, args.tokens, args.rounds * 4)
        many = await _throughput(backend, prompts, args.batch, args.tokens, args.rounds)
    finally:
        await backend.close()
    print(
        json.dumps(
            {
                "device": args.device,
                "threads": backend.threads or torch.get_num_threads(),
                "tokens_per_request": args.tokens,
                "batch_1_tokens_per_s": round(one, 1),
                f"batch_{args.batch}_tokens_per_s": round(many, 1),
                "speedup": round(many / one, 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())

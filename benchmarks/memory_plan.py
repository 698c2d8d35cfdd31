"""The torch trainer's memory plan: peak memory of one training step on CPU, with and without
gradient checkpointing and token-budget micro-batches (the run fields `gradient_checkpointing`
and `micro_batch_tokens`).

    uv run python benchmarks/memory_plan.py

A randomly initialised Qwen3-shaped model (`rollout.models.init_model`, default hidden 512,
8 layers, vocabulary 8,000: ~30M parameters) takes one policy-gradient step (`forward_backward`)
on 8 segments of 1,024 tokens, all trained. Each plan runs in a fresh process, so each peak is
its own: the figure is the growth of the process's peak resident memory (ru_maxrss) during the
step, over what it held once the model and the batch were loaded. The gradients of the plans
are compared too (they must agree: micro-batches only change how the step is cut).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLANS = {
    "whole batch": {},
    "gradient checkpointing": {"gradient_checkpointing": True},
    "micro-batches": {"micro_batch_tokens": 2048},
    "both": {"gradient_checkpointing": True, "micro_batch_tokens": 2048},
}


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def one_plan(model_dir: str, plan: dict[str, object], segments: int, length: int) -> dict:
    """One step of `plan` in this process: peak growth (MiB), seconds, gradient norm."""
    import random

    import torch

    from rollout.training.providers.base import TrainBatch
    from rollout.training.providers.torch import TorchProvider
    from rollout.training.segments import Segment

    torch.set_num_threads(1)
    provider = TorchProvider(model_dir, lr=1e-4, grad_clip=None, compute_entropy=False, **plan)  # type: ignore[arg-type]
    vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
    rng = random.Random(0)
    batch = TrainBatch(
        tuple(
            Segment(
                tokens=tuple(rng.randrange(vocab) for _ in range(length)),
                loss_mask=(False,) + (True,) * (length - 1),
                sampler_logprobs=(0.0,) + (-8.0,) * (length - 1),
                versions=(-1,) + (0,) * (length - 1),
                advantage=1.0 if i % 2 else -1.0,
            )
            for i in range(segments)
        )
    )
    before = _rss_mib()
    began = time.process_time()
    provider.forward_backward(batch)
    seconds = time.process_time() - began
    grads = [p.grad for p in provider.params if p.grad is not None]
    norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
    return {"peak_growth_mib": _rss_mib() - before, "cpu_seconds": seconds, "grad_norm": norm}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model_dir, plan = args.child
        print(json.dumps(one_plan(model_dir, json.loads(plan), args.segments, args.length)))
        return
    with tempfile.TemporaryDirectory(prefix="memory-plan-") as scratch:
        run_plans(args, Path(scratch) / "model")


def run_plans(args: argparse.Namespace, model_dir: Path) -> None:
    """Each plan in its own process on one model, printed as it ends (or all as JSON)."""
    from rollout.models import init_model

    folder = init_model(
        model_dir,
        hidden=args.hidden,
        layers=args.layers,
        heads=8,
        kv_heads=4,
        vocab_size=args.vocab,
        max_positions=max(2048, args.length),
    )
    results = {}
    for name, plan in PLANS.items():
        child = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--child", str(folder), json.dumps(plan)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = {**plan, **json.loads(child.stdout.strip().splitlines()[-1])}
        if not args.json:
            r = results[name]
            print(
                f"{name:24s} peak +{r['peak_growth_mib']:7.0f} MiB  "
                f"{r['cpu_seconds']:6.1f} CPU s  grad norm {r['grad_norm']:.6g}",
                flush=True,
            )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()

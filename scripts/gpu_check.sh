#!/usr/bin/env bash
# GPU check: does rollout train and serve a real-architecture model on this machine's GPU?
#
#   scripts/gpu_check.sh                 # CUDA: a random ~0.45B Qwen3, bf16 (a few minutes)
#   scripts/gpu_check.sh --device cpu    # the CPU fallback CI runs: tiny sizes, fp32
#   scripts/gpu_check.sh --wheels DIR    # install rollout from wheels in DIR first (no network)
#
# Needs only torch, transformers and peft preinstalled; the project's other wheels (rollout,
# rolloutlib, rollout-environments, pgserver, psycopg, ...) come from --wheels DIR offline.
# Steps, each timed and printed:
#   1. build a randomly initialised Qwen3 (hidden 1024, 36 layers: ~0.45B parameters; tiny on CPU)
#   2. the torch provider takes policy-gradient steps with LoRA (rank 16), then with full weights
#   3. the local backend samples from the trained weights; the trainer rescores the samples and
#      the trainer-vs-sampler logprob mismatch (max and mean |diff|) is printed
#   4. a short platform run: `rollout train` (embedded Postgres, every role as a process)
#      completes steps on the device (preset gpu-tiny on CUDA, cpu-tiny on CPU)
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE=cuda
WHEELS=""
PYTHON="${PYTHON:-python}"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --wheels) WHEELS="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cuda|cpu] [--wheels DIR] [--python PYTHON]" >&2; exit 2 ;;
  esac
done
if [ -n "$WHEELS" ]; then
  "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" rollout
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/rollout-gpu-check.XXXXXX")"
# The state folder (embedded Postgres, blobs, logs): ROLLOUT_STATE_DIR if set, else a fresh one.
export ROLLOUT_STATE_DIR="${ROLLOUT_STATE_DIR:-$WORK/state}"
cleanup() {
  "$PYTHON" -c "import sys; from rollout.ledger.embedded import stop_embedded; stop_embedded(sys.argv[1])" \
    "$ROLLOUT_STATE_DIR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

DEVICE="$DEVICE" WORK="$WORK" "$PYTHON" - <<'PY'
import math
import os
import time
from pathlib import Path

import torch

from rollout.contracts import SamplingParams
from rollout.inference.local import LocalBackend
from rollout.models import init_model
from rollout.training.loss import LossConfig
from rollout.training.providers.base import TrainBatch
from rollout.training.providers.torch import TorchProvider
from rollout.training.segments import Segment

device = os.environ["DEVICE"]
work = Path(os.environ["WORK"])
cuda = device.startswith("cuda")
if cuda and not torch.cuda.is_available():
    raise SystemExit("gpu_check: --device cuda but torch sees no CUDA GPU")
dtype = torch.bfloat16 if cuda else torch.float32
sizes = (
    dict(hidden=1024, layers=36, heads=16, kv_heads=8, intermediate=3072)
    if cuda
    else dict(hidden=64, layers=2, heads=4, kv_heads=2)
)
print(f"gpu_check: device {device}, dtype {dtype}, torch {torch.__version__}", flush=True)
if cuda:
    print(f"gpu_check: {torch.cuda.get_device_name(0)}", flush=True)


def timed(what, fn):
    began = time.monotonic()
    value = fn()
    print(f"gpu_check: {what}: {time.monotonic() - began:.1f} s", flush=True)
    return value


model = timed("build model", lambda: init_model(work / "model", tokenizer="bytes", seed=0, **sizes))
from safetensors import safe_open

with safe_open(str(model / "model.safetensors"), "pt") as weights:
    count = sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())
print(f"gpu_check: {count / 1e6:.1f}M parameters", flush=True)

backend = LocalBackend(model, device=device, dtype=dtype)
prompts = [[5 + i, 6 + i, 7 + i, 8 + i] for i in range(8)]


async def sample_all():
    import asyncio

    params = SamplingParams(max_tokens=32, temperature=1.0, seed=1)
    return await asyncio.gather(*(backend.sample(p, params) for p in prompts))


def segments_of(completions):
    out = []
    for i, (prompt, c) in enumerate(zip(prompts, completions, strict=True)):
        n = len(c.tokens)
        out.append(
            Segment(
                tokens=(*prompt, *c.tokens),
                loss_mask=(False,) * len(prompt) + (True,) * n,
                sampler_logprobs=(0.0,) * len(prompt) + c.logprobs,
                versions=(-1,) * len(prompt) + (c.version,) * n,
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    return out


import asyncio

completions = timed("sample 8 completions (local backend)", lambda: asyncio.run(sample_all()))
segments = segments_of(completions)
for name, rank in (("LoRA r=16", 16), ("full weights", None)):
    provider = timed(
        f"{name}: load trainer",
        lambda rank=rank: TorchProvider(model, lora_rank=rank, device=device, dtype=dtype, lr=1e-4),
    )
    for step in range(3):
        def one_step():
            result = provider.forward_backward(TrainBatch(tuple(segments), loss=LossConfig()))
            provider.optim_step()
            return result

        result = timed(f"{name}: step {step + 1}", one_step)
        print(f"gpu_check: {name}: loss {result.metrics.get('loss'):.4f}", flush=True)
    saved = provider.save(work / f"checkpoint-{rank}")
    asyncio.run(backend.load_weights(saved.path, 3))
    fresh = timed(f"{name}: sample from trained weights", lambda: asyncio.run(sample_all()))
    assert all(c.version == 3 for c in fresh)
    scored = segments_of(fresh)
    diffs = [
        abs(a - b)
        for seg, lp in zip(scored, provider.logprobs(scored), strict=True)
        for a, b, m in zip(lp, seg.sampler_logprobs, seg.loss_mask, strict=True)
        if m
    ]
    print(
        f"gpu_check: {name}: trainer vs sampler logprobs over {len(diffs)} tokens: "
        f"max |diff| {max(diffs):.2e}, mean |diff| {sum(diffs) / len(diffs):.2e}",
        flush=True,
    )
    if cuda:
        print(f"gpu_check: peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    del provider
    if cuda:
        torch.cuda.empty_cache()
asyncio.run(backend.close())
PY

PRESET=cpu-tiny
[ "$DEVICE" != "cpu" ] && PRESET=gpu-tiny
began=$(date +%s)
"$PYTHON" -m rollout.cli train parity.environment:environment --preset "$PRESET" --steps 3 \
  --set warmup_steps=1 --set groups_per_step=4 --set stop_at_reward=null --json > "$WORK/run.json"
"$PYTHON" - "$WORK/run.json" <<'PY'
import json
import sys

summary = json.load(open(sys.argv[1]))
assert summary["status"] == "finished" and summary["steps"] == 3, summary
print(f"gpu_check: platform run {summary['name']}: {summary['steps']} steps finished")
PY
echo "gpu_check: platform run took $(( $(date +%s) - began )) s"
echo "gpu_check: OK"

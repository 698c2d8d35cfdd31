"""Learnability: a tiny Qwen3 learns the parity of a number by group-relative policy gradient.

Task: the prompt is a 3-8 digit number followed by "="; the answer is "E" (even) or "O" (odd)
followed by the stop token. Reward 1 for exactly the right letter then the stop token, else 0.

Recipe (the platform's pieces, sampled in-process): a fresh Qwen3 (hidden 64, 2 layers, 4 heads,
2 KV heads, vocab 64, char tokenizer) from `rollout.models.init_model`; an optional format
warm-up (`rollout.training.warmup`, random letters, 150 steps); then per step 16 prompts x 8
samples at temperature 1 (`rollout.training.sampler`), rewards -> std-normalised group
advantages (`rollout.training.advantages`) -> segments (`rollout.training.segments`) -> the
policy-gradient loss with importance weights in `TorchProvider` (full weights, fp32, Adam
lr 1e-3). `--lag K` samples with the weights of K steps ago (a delayed copy of the policy) and
`--is` picks the correction.

Run: `uv run python benchmarks/parity_learning.py --seeds 3` (each seed in its own process, so
"seconds from process start" includes imports and model creation, as measured originally).
Compare: `--warmup-steps 0` (no warm-up), `--lag 4 --is tis|icepop|none`; `--cpu-tiny` runs
the loop alone with the cpu-tiny preset's recipe (the one `--platform` compares against).

Platform vs in-process, side by side (goal: the platform within 2x):
`uv run python benchmarks/parity_learning.py --platform --seeds 3` runs, for each seed, this
loop with the cpu-tiny preset's recipe (20 warm-up steps, 16 x 8 samples, lr 1e-3, one step of
lag with TIS, prompts through the chat template, target: the mean reward of three steps >= 0.9,
at most 300 steps), then `rollout train parity.environment:environment --preset cpu-tiny
--set seed=S` in a fresh process (its state folder shared by the seeds: the first seed also
builds the model folder; each starts the embedded Postgres, stopped after it), and reports each
one's seconds from its process start to the target and the ratio (the platform's are `rollout
train`'s `seconds_to_target`, counted by the rule that stops the run, the mean reward of three
steps: `rollout.runs.config.reached_target`, the same window as this loop's `--window 3`);
then, over the seeds that reached the target in both, the median and range of each figure
(`--seeds 5` for the figures in benchmarks/README.md: step counts vary a lot between seeds),
and the load average.

Why the step counts vary: this loop is deterministic for a seed (its sampling generator is
seeded), so a seed always takes the same number of steps on one machine; the platform seeds the
prompts (`seed`) but not the sampling (the runner's requests carry no sampling seed, so the
inference server draws one per request), and how stale each turn's weights are (0 or 1 step under
max_lag 1) depends on timing. A platform seed is therefore a draw from a distribution of runs.
So is this loop's, once its sampling is drawn too: `--cpu-tiny --seeds 1 --seed-offset 1
--sampling-seed K` keeps seed 1's model, warm-up and prompts and seeds only the sampling with K.
Measured (2026-12-07, benchmarks/README.md): seed 1 took 168-258 steps over seven sampling seeds,
where the platform's seed 1 took 100-295 over its runs; the two spreads are of the same size.
"""

from __future__ import annotations

import time

PROCESS_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import deque  # noqa: E402
from typing import Any  # noqa: E402


def _process_start() -> float:
    """The OS start time of this process (falls back to the time the script began)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return PROCESS_START


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train one seed; returns a summary (times in seconds from process start)."""
    start = min(_process_start(), PROCESS_START)
    import torch
    from transformers import AutoTokenizer

    from rollout.contracts import Turn
    from rollout.models import init_model
    from rollout.runs.config import ImportanceConfig
    from rollout.training.advantages import group_advantages
    from rollout.training.loss import LossConfig
    from rollout.training.providers.base import TrainBatch
    from rollout.training.providers.torch import TorchProvider
    from rollout.training.sampler import sample_batch
    from rollout.training.segments import build_segments
    from rollout.training.warmup import format_warmup

    torch.manual_seed(seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(seed)
    model_dir = init_model(
        tempfile.mkdtemp(prefix="parity-model-"),
        arch="qwen3",
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=2,
        vocab_size=64,
        tokenizer="chars",
        alphabet=args.alphabet,
        seed=seed,
    )
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    eos = int(tok.convert_tokens_to_ids("<|im_end|>"))
    pad = int(tok.convert_tokens_to_ids("<|endoftext|>"))
    letter = {"E": int(tok.convert_tokens_to_ids("E")), "O": int(tok.convert_tokens_to_ids("O"))}
    digit_ids = [int(tok.convert_tokens_to_ids(str(d))) for d in range(10)]
    equals = int(tok.convert_tokens_to_ids("="))

    from rollout.contracts import Message
    from rollout.rendering import HFRenderer

    renderer = HFRenderer(model_dir) if args.chat else None

    def make_prompt(r: random.Random) -> tuple[tuple[int, ...], str]:
        n = r.randint(3, 8)
        digits = [r.randint(1, 9)] + [r.randint(0, 9) for _ in range(n - 1)]
        answer = "E" if digits[-1] % 2 == 0 else "O"
        if renderer is not None:  # as the platform prompts: the model's chat template
            number = "".join(str(d) for d in digits)
            messages = [Message.user(number)]
            if args.system != "none":
                messages.insert(0, Message.system(args.system))
            return tuple(renderer.render(messages)), answer
        return (*tuple(digit_ids[d] for d in digits), *([equals] * args.suffix)), answer

    provider = TorchProvider(
        model_dir,
        lora_rank=args.lora_rank,
        lr=args.lr,
        weight_decay=0.0,
        grad_clip=args.grad_clip,
        device=args.device,
        seed=seed,
        compute_entropy=False,
    )
    ready = time.time() - start

    warm_start = time.time()
    if args.warmup_steps:
        prompts = [make_prompt(rng)[0] for _ in range(2048)]
        format_warmup(
            provider,
            prompts,
            lambda r: [letter[r.choice("EO")]],
            steps=args.warmup_steps,
            batch_size=args.prompts * args.samples,
            eos_token_id=eos,
            seed=seed,
        )
        if args.reset_optimizer:
            provider.reset_optimizer()
    warmup_s = time.time() - warm_start

    # The sampling policy: the trainer's model itself, or a copy holding K-step-old weights.
    sampler_model = provider.model
    history: deque[dict[str, torch.Tensor]] = deque(maxlen=args.lag + 1)
    if args.lag:
        import copy

        sampler_model = copy.deepcopy(provider.model)
    loss = LossConfig(importance=ImportanceConfig(mode=args.is_mode), entropy_coef=args.entropy)
    sampling_seed = seed if args.sampling_seed is None else args.sampling_seed
    gen = torch.Generator(device=args.device).manual_seed(sampling_seed)
    rewards: list[float] = []
    t_hit: float | None = None
    step_hit: int | None = None
    cpu_hit: float | None = None
    metrics: dict[str, float] = {}
    step_seconds: list[float] = []  # each step's wall time, and of it the training's
    train_seconds: list[float] = []
    for step in range(args.max_steps):
        step_began = time.perf_counter()
        version = provider.step
        if args.lag:
            history.append({k: v.detach().clone() for k, v in provider.model.state_dict().items()})
            sampler_model.load_state_dict(history[0])  # the oldest kept: K steps old
            version = provider.step - (len(history) - 1)
        batch = [make_prompt(rng) for _ in range(args.prompts)]
        prompts = [p for p, _ in batch for _ in range(args.samples)]
        samples = sample_batch(
            sampler_model,
            prompts,
            max_new_tokens=4,
            stop_token_ids=[eos],
            pad_token_id=pad,
            temperature=1.0,
            generator=gen,
        )
        step_rewards = [
            1.0 if s.tokens == (letter[batch[i // args.samples][1]], eos) else 0.0
            for i, s in enumerate(samples)
        ]
        segments = []
        for g in range(args.prompts):
            group = step_rewards[g * args.samples : (g + 1) * args.samples]
            advantages = group_advantages(group, normalize_std=not args.no_std)
            for j, adv in enumerate(advantages):
                i = g * args.samples + j
                if args.drop_zero and not adv:
                    continue
                turn = Turn(
                    episode_id=f"{step}-{g}-{j}",
                    agent=0,
                    attempt=0,
                    index=0,
                    prompt_tokens=prompts[i],
                    completion_tokens=samples[i].tokens,
                    logprobs=samples[i].logprobs,
                    version=version,
                    stop_reason=samples[i].stop_reason,
                )
                segments.extend(build_segments([turn], adv or 0.0, stop_token_ids=[eos]))
        train_began = time.perf_counter()
        if segments:
            result = provider.forward_backward(TrainBatch(segments=tuple(segments), loss=loss))
            metrics = {**result.metrics, **provider.optim_step()}
        train_seconds.append(time.perf_counter() - train_began)
        step_seconds.append(time.perf_counter() - step_began)
        reward = sum(step_rewards) / len(step_rewards)
        first = [s.tokens[0] if s.tokens else -1 for s in samples]
        share_e = sum(t == letter["E"] for t in first) / len(first)
        formed = {
            k: sum(s.tokens == (letter[k], eos) for s in samples)
            / max(1, sum(t == letter[k] for t in first))
            for k in "EO"
        }
        rewards.append(reward)
        elapsed = time.time() - start
        if not args.quiet:
            print(
                f"seed {seed} step {step:4d} reward {reward:.3f} "
                f"ratio {metrics.get('is/ratio_mean', float('nan')):.3f} "
                f"|dlogp| {metrics.get('is/logp_abs_diff_mean', float('nan')):.2e} "
                f"E {share_e:.2f} eos|E {formed['E']:.2f} eos|O {formed['O']:.2f} "
                f"t {elapsed:6.1f}s",
                flush=True,
            )
        window = rewards[-args.window :]
        if (
            t_hit is None
            and len(window) == args.window
            and sum(window) / args.window >= args.target
        ):
            t_hit, step_hit, cpu_hit = elapsed, step + 1, time.process_time()
            if not args.keep_going:
                break
    per_digit: dict[int, float] = {}
    if args.per_digit:  # accuracy by the number's last digit, 64 samples each
        for d in range(10):
            batch = []
            while len(batch) < 64:
                p, a = make_prompt(rng)
                if renderer is not None:
                    last = int(tok.decode(list(p)).split("<|im_end|>")[-2][-1])
                else:
                    last = digit_ids.index(p[-1 - args.suffix])
                if last == d:
                    batch.append((p, a))
            samples = sample_batch(
                sampler_model,
                [p for p, _ in batch],
                max_new_tokens=4,
                stop_token_ids=[eos],
                pad_token_id=pad,
                temperature=1.0,
                generator=gen,
            )
            per_digit[d] = sum(
                s.tokens == (letter[a], eos) for s, (_, a) in zip(samples, batch, strict=True)
            ) / len(batch)
        print(f"seed {seed} accuracy by last digit: {per_digit}", flush=True)
    return {
        "seed": seed,
        "warmup_steps": args.warmup_steps,
        "lag": args.lag,
        "is": args.is_mode,
        "lora_rank": args.lora_rank,
        "reset_optimizer": args.reset_optimizer,
        "drop_zero": args.drop_zero,
        "seconds_to_target": t_hit,
        "steps_to_target": step_hit,
        "cpu_seconds_to_target": cpu_hit,
        "ready_s": ready,
        "warmup_s": warmup_s,
        "final_reward": rewards[-1] if rewards else None,
        "best_reward": max(rewards) if rewards else None,
        "steps": len(rewards),
        "sampling_seed": sampling_seed,
        "median_step_s": statistics.median(step_seconds) if step_seconds else None,
        "median_train_s": statistics.median(train_seconds) if train_seconds else None,
        "last_is_metrics": {k: v for k, v in metrics.items() if k.startswith("is/")},
    }


CPU_TINY_RECIPE = [
    "--warmup-steps", "20", "--prompts", "16", "--samples", "8", "--lr", "1e-3",
    "--lag", "1", "--is", "tis", "--chat", "--system", "none",
    "--alphabet", "0123456789EO=\n", "--window", "3", "--max-steps", "300", "--quiet",
]  # fmt: skip
"""This loop's flags for the cpu-tiny preset's recipe (deploy/chart/rollout/files/presets)."""


def _in_process(seed: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *CPU_TINY_RECIPE, "--single-seed", str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _platform(seed: int, state_dir: str) -> dict[str, Any]:
    env = dict(os.environ, ROLLOUT_STATE_DIR=state_dir)
    env.pop("ROLLOUT_DATABASE_URL", None)
    argv = [
        sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment",
        "--preset", "cpu-tiny", "--set", f"seed={seed}", "--json",
    ]  # fmt: skip
    began = time.time()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"rollout train failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    summary["wall_s"] = time.time() - began
    return summary


def platform_side_by_side(args: argparse.Namespace) -> None:
    """Each seed: the in-process loop, then the platform, on the cpu-tiny recipe."""
    from rollout.ledger.embedded import stop_embedded

    state_dir = tempfile.mkdtemp(prefix="rollout-parity-", dir="/var/tmp")
    load_start = _load()
    rows = []
    for seed in range(args.seed_offset, args.seed_offset + args.seeds):
        ours = _in_process(seed)
        try:
            theirs = _platform(seed, state_dir)
        finally:
            stop_embedded(state_dir)  # rollout train leaves it running for the next command
        ours_s, theirs_s = ours["seconds_to_target"], theirs.get("seconds_to_target")
        row = {
            "seed": seed,
            "in_process_s": ours_s,
            "in_process_steps": ours["steps_to_target"],
            "platform_s": theirs_s,  # from the command's start (rollout.launch.summary)
            "platform_wall_s": round(theirs["wall_s"], 1),
            "platform_steps": theirs.get("steps"),
            "ratio": round(theirs_s / ours_s, 2) if ours_s and theirs_s else None,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    print("\nseed  in-process s  steps  platform s  steps  ratio (goal <= 2)")
    for r in rows:
        ours_s = "-" if r["in_process_s"] is None else f"{r['in_process_s']:.1f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(
            f"{r['seed']:4d}  {ours_s:>12}  {r['in_process_steps'] or '-':>5}  "
            f"{r['platform_s'] or float('nan'):>10.1f}  {r['platform_steps'] or '-':>5}  "
            f"{ratio:>5}"
        )
    both = [r for r in rows if r["ratio"] is not None]
    print(f"{len(both)} of {len(rows)} seeds reached the target in both; over those:")
    for key, label in SPREAD_COLUMNS:
        print(f"  {label:<18} {spread([r[key] for r in both])}")
    if ratios:
        verdict = "met" if max(ratios) <= 2 else "NOT met"
        print(f"ratio <= 2 on every seed that reached the target in both: {verdict}")
    print(f"load average {load_start} at start, {_load()} at end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform_side_by_side": rows}, f, indent=2)


SPREAD_COLUMNS = [
    ("in_process_s", "in-process s"),
    ("in_process_steps", "in-process steps"),
    ("platform_s", "platform s"),
    ("platform_steps", "platform steps"),
    ("ratio", "ratio"),
]


def spread(values: list[float]) -> str:
    """`median M (range LO-HI, N seeds)`, or `-` with no values.

    >>> spread([3.0, 1.0, 2.0])
    'median 2.00 (range 1.00-3.00, 3 seeds)'
    """
    if not values:
        return "-"
    return (
        f"median {statistics.median(values):.2f} "
        f"(range {min(values):.2f}-{max(values):.2f}, {len(values)} seeds)"
    )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, one process each")
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--single-seed", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--sampling-seed",
        type=int,
        default=None,
        help="seed the sampling with this instead of the run's seed (model, warm-up and prompts"
        " keep the run's): the loop's own spread of step counts for one seed",
    )
    parser.add_argument(
        "--cpu-tiny", action="store_true", help="the cpu-tiny preset's recipe (as --platform)"
    )
    parser.add_argument("--warmup-steps", type=int, default=150)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--grad-clip", type=float, default=None)
    parser.add_argument("--lora-rank", type=int, default=None)
    parser.add_argument("--lag", type=int, default=0, help="sample with K-step-old weights")
    parser.add_argument("--is", dest="is_mode", choices=["tis", "icepop", "none"], default="tis")
    parser.add_argument(
        "--reset-optimizer", action="store_true", help="clear Adam moments after warm-up"
    )
    parser.add_argument(
        "--drop-zero", action="store_true", help="leave zero-advantage samples out of the batch"
    )
    parser.add_argument("--alphabet", default="0123456789EO=", help="the char tokenizer's")
    parser.add_argument(
        "--chat", action="store_true", help="prompt through the chat template, as the platform"
    )
    parser.add_argument(
        "--system",
        default="even or odd?",
        help="system prompt with --chat ('none': no system message)",
    )
    parser.add_argument("--entropy", type=float, default=0.0, help="entropy bonus weight")
    parser.add_argument("--no-std", action="store_true", help="advantages not divided by std")
    parser.add_argument("--per-digit", action="store_true", help="report accuracy by last digit")
    parser.add_argument("--suffix", type=int, default=1, help="'=' tokens after the digits")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--window", type=int, default=1, help="target: mean of the last N steps")
    parser.add_argument(
        "--platform",
        action="store_true",
        help="the cpu-tiny recipe here and `rollout train --preset cpu-tiny`, side by side",
    )
    parser.add_argument("--keep-going", action="store_true", help="run all steps after target")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()

    if args.single_seed is not None:
        print("RESULT " + json.dumps(run_seed(args, args.single_seed)), flush=True)
        return
    if args.platform:
        platform_side_by_side(args)
        return

    results: list[dict[str, Any]] = []
    passthrough = [a for a in sys.argv[1:] if a != "--cpu-tiny"]
    if args.cpu_tiny:
        passthrough = [*CPU_TINY_RECIPE, *passthrough]
    for seed in range(args.seed_offset, args.seed_offset + args.seeds):
        # Each seed in a fresh process: times count from that process's start, like a real run.
        proc = subprocess.run(
            [sys.executable, __file__, *passthrough, "--single-seed", str(seed)],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                results.append(json.loads(line[len("RESULT ") :]))
            else:
                print(line, flush=True)
    print()
    print(
        f"warmup={args.warmup_steps} lag={args.lag} is={args.is_mode} lora={args.lora_rank} "
        f"lr={args.lr} target={args.target} reset_optimizer={args.reset_optimizer} "
        f"drop_zero={args.drop_zero}"
    )
    print("seed  s_to_target  cpu_s  steps  ready_s  warmup_s  best")
    for r in results:
        s, c = r["seconds_to_target"], r["cpu_seconds_to_target"]
        print(
            f"{r['seed']:4d}  {'   -   ' if s is None else f'{s:7.1f}'}      "
            f"{'  -  ' if c is None else f'{c:5.1f}'}  "
            f"{r['steps_to_target'] or '-':>5}  {r['ready_s']:7.1f}  {r['warmup_s']:8.1f}  "
            f"{r['best_reward']:.3f}"
        )
    hits = [r["seconds_to_target"] for r in results if r["seconds_to_target"] is not None]
    cpu = [r["cpu_seconds_to_target"] for r in results if r["cpu_seconds_to_target"] is not None]
    steps = [r["steps_to_target"] for r in results if r["steps_to_target"] is not None]
    print(
        f"reached {args.target} in {len(hits)}/{len(results)} runs"
        + (
            f"; wall median {statistics.median(hits):.1f}s (max {max(hits):.1f}s), "
            f"CPU median {statistics.median(cpu):.1f}s, steps median {statistics.median(steps)}"
            if hits
            else ""
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()

"""Learning under sampling lag: the tool-call gridworld, in one process and through `rollout train`.

`gridworld.environment:environment`: two agents share a 3x3 grid, each walks to its own goal
(1-2 steps away) in at most 3 moves, reading a view such as `mate -1,0. goal 2:right 1:down.`
under the chat template's tools block (~430 tokens of prompt with the tiny model's tokenizer).
Its rewards, per move on the move's turn: 0.7 x the share of the start distance the move won
(0 for a move that wins no new ground, -0.35 of a step's share for a reply that is no move), and
0.3 on the last turn when both agents reached their goals (`gridworld.environment.move_reward`).

`--in-process` plays that task with the training pieces in one process: the world is the
sandbox's own `World` (environments/gridworld/server.py), each agent's text and rewards are
`Walk`'s (the same `describe`, `move_reward`, `team_reward` and message shapes), prompts are
rendered by the tiny model's chat template with the `move` tool, replies sampled by
`rollout.training.sampler` and trained by `TorchProvider` with the run's objective. `--lag K`
samples every episode with the weights of K optimizer steps ago, as `max_lag` K does on the
platform at full throughput. It prints, per step, the share of moves toward the goal and the
measurements the diagnosis uses: the trainer/sampler ratio of trained tokens, the share of
tokens the objective truncated, masked or clipped, the policy's entropy, the gradient norm and
how far each step moved the policy on a fixed probe batch (`probe_kl`: KL(before || after) of
the first move over 64 views).
`--variant words` plays the same task without the tools block in the prompt. `--credit turn`
(the default) trains each turn on the discounted reward-to-go of the seat's rewards (`--discount`,
default 1 as the platform's), as `rollout train` does with `Walk`'s per-move rewards;
`--credit episode` gives every turn of a seat the advantage of the seat's summed reward (what
`rollout train` did when `Walk` had only an `End` reward).

Without `--in-process`, each cell (`--lags` x `--modes`) is a `rollout train` run of the
environment with the given preset (fresh state folder each), and the benchmark reads the
per-step rewards and the moves toward the goal by sampling checkpoint from its ledger.

    uv run python benchmarks/gridworld_lag.py --in-process --lag 1 --mode tis --seeds 3
    uv run python benchmarks/gridworld_lag.py --lags 0,1,2 --modes none,tis,icepop,clip --seeds 3

The chance level (uniformly random moves on the same layouts) is printed with each result.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import json
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platform_run import mean, sem, sets, train_fresh

from rollout.ledger import stop_embedded

ENV = "gridworld.environment:environment"


def chance(variant: str = "tools", layouts: int = 2000, seed: int = 12345) -> float:
    """Moves toward the goal of a uniformly random mover on the environment's layouts."""
    from gridworld.environment import DIRECTIONS, compact, environment
    from gridworld.server import World

    draw = (compact if variant == "compact" else environment).parameters
    assert callable(draw)
    rng = random.Random(seed)
    shares = []
    for _ in range(layouts):
        p = draw(rng)
        world = World(1, 2, p["layout"], p["size"], p["reach"])
        closer = [0, 0]
        moves = [0, 0]
        done = [False, False]
        for _turn in range(p["max_moves"]):
            for agent in range(2):
                if done[agent]:
                    continue
                before = world.distance(agent)
                world.move(agent, rng.choice(DIRECTIONS))
                moves[agent] += 1
                closer[agent] += world.distance(agent) < before
                done[agent] = world.distance(agent) == 0
        shares += [c / m for c, m in zip(closer, moves, strict=True)]
    return mean(shares)


class Seat:
    """One agent of one in-process episode: `Walk`'s bookkeeping over a shared `World`."""

    def __init__(self, world: Any, agent: int, parameters: Mapping[str, Any]) -> None:
        from gridworld.environment import MOVE, distance

        from rollout.contracts import Message

        self.world, self.agent = world, agent
        self.max_moves = int(parameters["max_moves"])
        self.short = bool(parameters.get("short", False))
        view = world.view(agent)
        self.messages = [Message.user(self.describe(view))]
        self.tools = [MOVE] if parameters.get("tools", True) else []
        self.distance = self.start = self.nearest = distance(view)
        self.moves = self.closer = self.invalid = 0
        self.done = False
        self.turns: list[Any] = []
        self.turn_rewards: list[float] = []

    def describe(self, view: dict[str, Any]) -> str:
        from gridworld.environment import describe

        return describe(view, short=self.short)

    def act(self, reply: Any) -> None:
        from gridworld.environment import _call_id, _direction, distance, move_reward

        from rollout.contracts import Message

        direction = _direction(reply)
        self.messages.append(reply)
        self.moves += 1
        if direction is None:
            self.invalid += 1
            view = self.world.view(self.agent)
            text = "call move with up, down, left or right. " + self.describe(view)
        else:
            result = self.world.move(self.agent, direction)
            view = self.world.view(self.agent)
            text = self.describe(view) if result == "moved" else f"{result}. " + self.describe(view)
        now = distance(view)
        self.turn_rewards.append(
            move_reward(self.start, self.nearest, now, valid=direction is not None)
        )
        self.closer += now < self.distance
        self.distance = now
        self.nearest = min(self.nearest, now)
        if view["at_goal"] or self.moves >= self.max_moves:
            self.done = True
        elif direction and reply.tool_calls:
            self.messages.append(Message.tool(text, tool_call_id=_call_id(reply)))
        else:
            self.messages.append(Message.user(text))

    def rewards(self, team: bool) -> dict[int, float]:
        """The seat's rewards by turn: each move's, and the team's part on its last turn."""
        from gridworld.environment import team_reward

        out = dict(enumerate(self.turn_rewards))
        last = len(self.turn_rewards) - 1
        out[last] = out.get(last, 0.0) + team_reward(team)
        return out

    def reward(self, team: bool) -> float:
        return sum(self.rewards(team).values())


def _oracle_example(example: Any, rng: random.Random) -> tuple[list[Any], str]:
    """`example`'s warm-up prompt answered with its view's last word (a move toward the goal)."""
    messages, _ = example(rng)
    return messages, messages[-1].text.rstrip(".").split()[-1].split(":")[-1]


def _pretrain(provider: Any, folder: Path, args: argparse.Namespace, rng: random.Random) -> None:
    """Next-token prediction on the Python standard library's source (text every machine has),
    `args.pretrain` steps of 32 windows of 256 tokens: a base model instead of a random one."""
    import sysconfig

    from transformers import AutoTokenizer

    from rollout.training.loss import LossConfig
    from rollout.training.providers.base import TrainBatch
    from rollout.training.segments import Segment

    tokenizer = AutoTokenizer.from_pretrained(folder)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    text = "\n".join(f.read_text(errors="replace") for f in files[:150])
    ids = tokenizer(text)["input_ids"]
    provider.lr = args.pretrain_lr
    began = time.monotonic()
    for step in range(args.pretrain):
        segments = []
        for _ in range(32):
            start = rng.randrange(len(ids) - 256)
            window = tuple(ids[start : start + 256])
            segments.append(Segment(window, (False,) + (True,) * 255, (0.0,) * 256, (-1,) * 256))
        result = provider.forward_backward(TrainBatch(tuple(segments), LossConfig("supervised")))
        provider.optim_step()
        if step % 50 == 0 or step == args.pretrain - 1:
            print(f"pretrain {step} loss {result.metrics.get('loss', 0):.3f} "
                  f"{time.monotonic() - began:.0f} s", flush=True)  # fmt: skip
    provider.reset_optimizer()
    provider.lr = args.warmup_lr


def in_process(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train the tool-call gridworld in one process (see the module docstring)."""
    import torch
    from gridworld.environment import compact, environment
    from gridworld.server import World

    from rollout.contracts import Turn
    from rollout.models import init_model
    from rollout.rendering import HFRenderer
    from rollout.runs.config import ImportanceConfig
    from rollout.training.advantages import group_advantages, turn_advantages
    from rollout.training.loss import LossConfig
    from rollout.training.providers.base import TrainBatch
    from rollout.training.providers.torch import TorchProvider
    from rollout.training.sampler import sample_batch
    from rollout.training.segments import build_segments
    from rollout.training.warmup import warmup_segments

    torch.manual_seed(seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(seed)
    began = time.monotonic()
    folder = init_model(
        tempfile.mkdtemp(prefix="gridworld-model-"),
        **{"arch": args.arch, "hidden": args.hidden, "layers": args.layers, "heads": 4},
        **{"kv_heads": 2, "vocab_size": args.vocab, "tokenizer": args.tokenizer, "alphabet": None},
        head_dim=args.head_dim,
        seed=seed,
        sliding_window=args.sliding or None,
        sliding_layers=[int(n) for n in args.sliding_layers.split(",")] if args.sliding else None,
    )
    renderer = HFRenderer(folder)
    stop = renderer.stop_token_ids[0]
    clip = args.grad_clip or None
    provider = TorchProvider(
        folder, lora_rank=None, lr=args.warmup_lr, weight_decay=0.0, grad_clip=clip,
        betas=(0.9, args.beta2), device="cpu", seed=seed, compute_entropy=True,
    )  # fmt: skip
    env = compact if args.variant == "compact" else environment
    assert env.warmup is not None
    warmup: Any = env.warmup
    if args.variant == "words":  # the tool-call gridworld's task without the tools block
        from gridworld.environment import _format_example

        warmup = functools.partial(_format_example, tools=False, short=False)

    if args.pretrain:
        _pretrain(provider, folder, args, rng)
    if args.oracle_warmup:  # diagnosis: teach the task itself (the view's last word) instead
        warmup = functools.partial(_oracle_example, warmup)

    for step in range(args.warmup):
        examples = [warmup(rng) for _ in range(args.warmup_batch)]
        batch = TrainBatch(tuple(warmup_segments(renderer, examples)), LossConfig("supervised"))
        warm_loss = provider.forward_backward(batch).metrics.get("loss", 0.0)
        provider.optim_step()
        if not args.quiet and (step % 10 == 0 or step == args.warmup - 1):
            print(f"seed {seed} warm-up {step} loss {warm_loss:.4f}", flush=True)
    provider.reset_optimizer()
    provider.lr = args.lr
    importance = ImportanceConfig(
        mode=args.mode, cap=args.cap, clip_low=args.clip_low, clip_high=args.clip_high
    )
    loss = LossConfig(importance=importance, entropy_coef=args.entropy)
    generator = torch.Generator().manual_seed(seed)
    sampler_model = copy.deepcopy(provider.model) if args.lag else provider.model
    history: deque[dict[str, torch.Tensor]] = deque(maxlen=args.lag + 1)
    short = args.variant == "compact"
    probe = _probe_prompts(renderer, random.Random(seed + 1), 64, short=short)
    base = env.parameters
    assert callable(base)
    draw: Any = base
    if args.variant == "words":
        draw = lambda r: {**base(r), "tools": False}  # noqa: E731

    max_tokens = int(env.sampling["max_tokens"])
    rows: list[dict[str, float]] = []
    for step in range(args.steps):
        version = provider.step
        if args.lag:
            history.append({k: v.detach().clone() for k, v in provider.model.state_dict().items()})
            sampler_model.load_state_dict(history[0])
            version = provider.step - (len(history) - 1)
        groups: list[list[list[Seat]]] = []
        for _ in range(args.groups):
            layout = draw(rng)
            episodes = []
            for _ in range(args.group_size):
                world = World(1, 2, layout["layout"], layout["size"], layout["reach"])
                episodes.append([Seat(world, a, layout) for a in range(2)])
            groups.append(episodes)
        seats = [seat for episodes in groups for episode in episodes for seat in episode]
        first_logps: list[float] = []
        while active := [s for s in seats if not s.done]:
            prompts = [tuple(renderer.render(s.messages, s.tools)) for s in active]
            samples = sample_batch(
                sampler_model, prompts, max_new_tokens=max_tokens, stop_token_ids=[stop],
                pad_token_id=stop, temperature=1.0, generator=generator,
            )  # fmt: skip
            for seat, prompt, sample in zip(active, prompts, samples, strict=True):
                index = len(seat.turns)
                turn = Turn(
                    episode_id=str(id(seat)), agent=seat.agent, attempt=1, index=index,
                    prompt_tokens=prompt, completion_tokens=sample.tokens,
                    logprobs=sample.logprobs, version=version, stop_reason=sample.stop_reason,
                )  # fmt: skip
                seat.turns.append(turn)
                if index == 0 and sample.logprobs:
                    first_logps.append(sample.logprobs[0])
                seat.act(renderer.parse(sample.tokens))
        segments = []
        rewards_all = []
        for episodes in groups:
            team = [all(e[0].world.distance(a) == 0 for a in range(2)) for e in episodes]
            for agent in range(2):
                members = [episode[agent] for episode in episodes]
                rewards = [s.reward(t) for s, t in zip(members, team, strict=True)]
                rewards_all += rewards
                if args.credit == "turn":
                    per_turn = [s.rewards(t) for s, t in zip(members, team, strict=True)]
                    counts = [len(s.turns) for s in members]
                    by_turn = turn_advantages(per_turn, counts, discount=args.discount)
                    for seat, advs in zip(members, by_turn, strict=True):
                        if any(advs):
                            segments += build_segments(
                                seat.turns, stop_token_ids=[stop], turn_advantages=advs
                            )
                    continue
                advantages = group_advantages(rewards)
                for seat, advantage in zip(members, advantages, strict=True):
                    if advantage:
                        segments += build_segments(seat.turns, advantage, stop_token_ids=[stop])
        before = _probe(provider.model, probe)
        metrics: dict[str, float] = {}
        if segments:
            result = provider.forward_backward(TrainBatch(tuple(segments), loss=loss))
            metrics = {**result.metrics, **provider.optim_step()}
        else:
            provider.optim_step()
        after = _probe(provider.model, probe)
        closer = mean([s.closer / s.moves for s in seats])
        row = {
            "step": float(step + 1),
            "closer": closer,
            "reward": mean(rewards_all),
            "invalid": mean([s.invalid / s.moves for s in seats]),
            "probe_kl": float((before.exp() * (before - after)).sum(-1).mean()),
            "probe_entropy": float(-(before.exp() * before).sum(-1).mean()),
            "sampled_first_logp": mean(first_logps),
            **{k: metrics.get(k, float("nan")) for k in _DIAGNOSTICS},
        }
        rows.append(row)
        if not args.quiet:
            print(
                f"seed {seed} step {step + 1:3d} closer {closer:.3f} reward {row['reward']:.3f} "
                + " ".join(f"{k.split('/')[-1]} {row[k]:.3g}" for k in _PRINTED),
                flush=True,
            )
    closers = [r["closer"] for r in rows]
    w = args.window
    return {
        "seed": seed,
        "lag": args.lag,
        "mode": args.mode,
        "steps": len(rows),
        "seconds": round(time.monotonic() - began, 1),
        "first_mean": mean(closers[:w]),
        "first_sem": sem(closers[:w]),
        "last_mean": mean(closers[-w:]),
        "last_sem": sem(closers[-w:]),
        "rows": rows,
    }


_DIAGNOSTICS = (
    "is/ratio_mean", "is/ratio_min", "is/ratio_max", "is/kl_k3", "is/truncated_frac",
    "is/masked_frac", "is/clipped_frac", "train/entropy", "grad_norm", "train/lag_mean",
)  # fmt: skip
_PRINTED = ("probe_kl", "probe_entropy", "is/kl_k3", "is/ratio_max", "grad_norm", "invalid")


def _probe_prompts(
    renderer: Any, rng: random.Random, n: int, *, short: bool
) -> list[tuple[int, ...]]:
    """First-turn prompts of `n` random views (a fixed batch to measure each step's move)."""
    from gridworld.environment import MOVE, describe

    from rollout.contracts import Message

    prompts = []
    for _ in range(n):
        goal = [0, 0]
        while goal == [0, 0]:
            goal = [rng.randint(-2, 2), rng.randint(-2, 2)]
        mate = [1, rng.randint(-2, 2), rng.randint(-2, 2)]
        view = {"goal": goal, "mates": [mate], "heard": [], "at_goal": False}
        text = describe(view, short=short)
        prompts.append(tuple(renderer.render([Message.user(text)], [] if short else [MOVE])))
    return prompts


def _probe(model: Any, prompts: list[tuple[int, ...]]) -> Any:
    """Log-probabilities of the first reply token for each probe prompt, [n, vocab]."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):  # right-padded: causal attention never sees the padding
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = 1
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    model.train(was)
    last = torch.tensor([len(p) - 1 for p in prompts])
    return torch.log_softmax(logits[torch.arange(len(prompts)), last], -1)


def platform(args: argparse.Namespace, lag: int, mode: str, seed: int) -> dict[str, Any]:
    """One `rollout train` run of the environment in a fresh state folder."""
    run_args = ["--max-lag", str(lag), *sets([f"importance.mode={mode}", f"seed={seed}"])]
    if args.steps:
        run_args += ["--steps", str(args.steps)]
    run = train_fresh(
        args.env, args.preset, [*run_args, *sets(args.overrides)], f"lag {lag}, {mode}, seed {seed}"
    )
    state, summary = run.state, run.summary
    try:
        steps, closer = asyncio.run(_read_run(state, summary["run_id"]))
    finally:
        stop_embedded(state)
    rewards = [s["reward"] for s in steps]
    w = args.window
    return {
        "lag": lag,
        "mode": mode,
        "seed": seed,
        "steps": len(steps),
        "seconds": round(run.seconds, 1),
        "load": round(run.load, 1),
        "reward_first": mean(rewards[:w]),
        "reward_last": mean(rewards[-w:]),
        "first_mean": mean(closer[:w]),
        "first_sem": sem(closer[:w]),
        "last_mean": mean(closer[-w:]),
        "last_sem": sem(closer[-w:]),
        "closer_by_version": closer,
        "step_metrics": steps,
        "command": run.command,
    }


async def _read_run(state: Path, run_id: str) -> tuple[list[dict[str, float]], list[float]]:
    """Each RL step's metrics, and the moves toward the goal by sampling checkpoint."""
    from rollout.ledger import Ledger

    ledger = await Ledger.connect(state_dir=state)
    try:
        steps = await ledger.train_steps(run_id)
        episodes = await ledger.list_episodes(run_id, limit=1_000_000)
    finally:
        await ledger.close()
    metrics = [dict(s.metrics) for s in sorted(steps, key=lambda s: s.step) if s.step > 0]
    by_version: dict[int, list[float]] = {}
    for episode in episodes:
        for end in episode.ends:
            turns = [t for t in episode.turns if t.agent == end.agent]
            if turns and "closer_moves" in end.metrics:
                by_version.setdefault(turns[0].version, []).append(end.metrics["closer_moves"])
    return metrics, [round(mean(by_version[v]), 3) for v in sorted(by_version)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--out", default=None, help="append each result as a JSON line here")
    # in process
    parser.add_argument("--lag", type=int, default=0)
    parser.add_argument("--mode", default="tis", choices=["none", "tis", "icepop", "clip"])
    parser.add_argument("--cap", type=float, default=2.0)
    parser.add_argument("--clip-low", type=float, default=0.2)
    parser.add_argument("--clip-high", type=float, default=0.2)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--grad-clip", type=float, default=1.0, help="0: none (the presets')")
    parser.add_argument("--entropy", type=float, default=0.0)
    parser.add_argument("--beta2", type=float, default=0.999, help="Adam's beta2")
    parser.add_argument("--pretrain", type=int, default=0, help="steps of LM on stdlib text")
    parser.add_argument("--pretrain-lr", type=float, default=3e-3)
    parser.add_argument(
        "--oracle-warmup", action="store_true",
        help="diagnosis: the warm-up answers with the view's last word (the task, supervised)",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--warmup-lr", type=float, default=3e-3)
    parser.add_argument("--warmup-batch", type=int, default=32)
    parser.add_argument("--credit", default="turn", choices=["episode", "turn"])
    parser.add_argument("--discount", type=float, default=1.0)
    parser.add_argument("--variant", default="tools", choices=["tools", "compact", "words"])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=400)
    parser.add_argument(
        "--tokenizer", default="chars", choices=["chars", "bytes"], help="bytes: cpu-text's model"
    )
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--arch", default="qwen3", choices=["qwen3", "qwen2", "llama"])
    parser.add_argument("--head-dim", type=int, default=None, help="default hidden / 4")
    parser.add_argument("--sliding", type=int, default=0, help="local attention window")
    parser.add_argument("--sliding-layers", default="0", help="the layers with local attention")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quiet", action="store_true")
    # through the platform
    parser.add_argument("--env", default=ENV)
    parser.add_argument("--preset", default="cpu-text", help="the preset, with its own recipe")
    parser.add_argument("--lags", default="0,1,2")
    parser.add_argument("--modes", default="none,tis,icepop,clip")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        help="run fields after the preset's",
    )
    args = parser.parse_args()
    level = chance(args.variant if args.in_process else "tools")
    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    if args.in_process:
        args.steps = args.steps or 120
        runs = [in_process(args, seed) for seed in seeds]
    else:
        cells = [(int(lag), mode) for lag in args.lags.split(",") for mode in args.modes.split(",")]
        runs = []
        for lag, mode in cells:
            for seed in seeds:
                runs.append(platform(args, lag, mode, seed))
                _report(runs[-1], level, args)
        return
    for run in runs:
        _report(run, level, args)


def _report(run: dict[str, Any], level: float, args: argparse.Namespace) -> None:
    print(
        f"RESULT lag {run['lag']} {run['mode']} seed {run['seed']}: {run['steps']} steps in "
        f"{run['seconds']:.0f} s; moves toward the goal first {args.window} "
        f"{run['first_mean']:.3f} +- {run['first_sem']:.3f}, last {args.window} "
        f"{run['last_mean']:.3f} +- {run['last_sem']:.3f} (chance {level:.3f})",
        flush=True,
    )
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({**run, "chance": level, "argv": sys.argv}) + "\n")


if __name__ == "__main__":
    main()

"""Trainer and sampler agree on logprobs through the whole path.

Episodes are played by a runner through the real gateway (HTTP) with the local PyTorch backend;
the gateway records each turn's logprobs in the ledger. The trainer then builds segments from the
recorded turns (multi-turn turns merge into one sequence) and scores them with the same weights:
on every sampled token the two logprobs agree to mean |diff| < 1e-5 in fp32.
"""

from __future__ import annotations

from pathlib import Path

from rollout.contracts import Message
from rollout.gateway import create_app
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.inference.local import LocalBackend
from rollout.ledger import EpisodeSpec, Ledger
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer
from rollout.runners.runner import Runner
from rollout.training.providers.torch import TorchProvider
from rollout.training.segments import build_segments
from tests.training.logprob_helpers import abs_diffs


class ThreeNumbers(Task):
    """Three turns in one conversation: each reply is followed by the next number."""

    async def start(self, run: RunContext) -> Observation:
        self.left = [str(run.random.randint(100, 999)) for _ in range(2)]
        return Observation(str(run.random.randint(100, 999)))

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        if not self.left:
            return End(reward=float(len(reply.text)))
        return Observation(self.left.pop())


environment = Environment(
    name="three-numbers",
    task=ThreeNumbers,
    max_turns=3,
    sampling={"max_tokens": 6, "temperature": 1.0},
)


async def test_gateway_recorded_logprobs_match_the_trainer(
    ledger: Ledger, tiny_model_dir: Path
) -> None:
    run = await ledger.create_run(
        "agreement", "tests.training.test_whole_path_logprobs:environment", {}
    )
    await ledger.add_episodes(
        run.run_id,
        [EpisodeSpec(group_index=0, member=m, parameters={}, seed=m) for m in range(6)],
    )
    renderer = HFRenderer(tiny_model_dir)
    backend = LocalBackend(tiny_model_dir)
    server = await AppServer(create_app(ledger, renderer, backend, model_name="tiny")).start()
    runner = Runner(ledger, f"{server.url}/v1", run_id=run.run_id, concurrency=6)
    try:
        claims = [await ledger.claim_seat("test", run_id=run.run_id) for _ in range(6)]
        for claim in claims:
            assert claim is not None
            await runner.play(claim)
    finally:
        await runner.close()
        await server.stop()
        await backend.close()

    segments = []
    for episode in await ledger.list_episodes(run.run_id):
        assert len(episode.turns) == 3
        assert all(t.extends_previous for t in episode.turns[1:])
        merged = build_segments(list(episode.turns), advantage=1.0)
        assert len(merged) == 1  # the three turns train as one sequence
        segments.extend(merged)

    provider = TorchProvider(tiny_model_dir, lr=1e-3)
    trainer = provider.logprobs(segments)
    diffs = abs_diffs(segments, trainer)
    assert len(diffs) >= 6 * 3
    assert sum(diffs) / len(diffs) < 1e-5, (sum(diffs) / len(diffs), max(diffs))
    print(f"mean |diff| {sum(diffs) / len(diffs):.2e}, max {max(diffs):.2e}, {len(diffs)} tokens")

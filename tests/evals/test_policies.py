"""Evals of a run with several policies: a score per policy and environment.

The run maps agent 0 to policy `walker` and agent 1 to `avoider`; each policy's checkpoint 1 is a
tiny model of its own (different weights). An eval of version 1 plays every seat on its agent's
policy's checkpoint 1 (the turn records that policy and version, and its tokens are what that
policy's model samples greedily, with that model's logprobs, not the other's), and records one
score per policy and environment from that policy's agents' seats only. Real Postgres, real
gateway, real models.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from rollout.blobs import BlobStore
from rollout.contracts import Completion, SamplingParams
from rollout.evals.errors import EvalError
from rollout.evals.suite import Suite
from rollout.inference.local import LocalBackend
from rollout.launch.evaluator.demand import checkpoint_version, evaluate
from rollout.launch.evaluator.worker import Evaluator
from rollout.ledger import CheckpointRecord, Ledger
from rollout.ledger.leases import trainer_lease
from rollout.models import init_model
from tests.cli_helpers import rollout

POLICIES = {"walker": {"agents": [0]}, "avoider": {"agents": [1]}}
POLICY_OF = {0: "walker", 1: "avoider"}
MAX_TOKENS = 6

SUITE = Suite.model_validate(
    {
        "name": "two-roles",
        "version": "1",
        "sampling": {"max_tokens": MAX_TOKENS},
        "environments": [
            {"environment": "tests.evals.envs:roles", "episodes": 3},
            {"environment": "tests.evals.envs:first_character", "episodes": 2},
        ],
    }
)
"""Two agents (agent 0 ends with 1.0, agent 1 with 0.25), then a one-agent environment that
only agent 0, the walker, plays."""


def tiny(folder: Path, seed: int) -> Path:
    return init_model(folder, hidden=32, layers=1, heads=2, kv_heads=1, seed=seed)


async def two_policy_run(
    ledger: Ledger, model: str, versions: dict[str, dict[int, str]], **training: object
) -> str:
    """A run of the two policies whose chains hold `versions` (policy -> version -> uri)."""
    run = await ledger.create_run(
        "two",
        "tests.evals.envs:roles",
        {
            "kind": "train",
            "model": model,
            "training": {"policies": POLICIES, **training},
        },
    )
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "trainer")
    for policy, chain in versions.items():
        for version, uri in chain.items():
            parent = version - 1 if version else None
            record = CheckpointRecord(
                run.run_id, version, parent, uri, "full", time.time(), {}, policy
            )
            await ledger.record_checkpoint(lease, record)
    return run.run_id


async def greedy(model: Path, prompt: tuple[int, ...]) -> Completion:
    backend = LocalBackend(model)
    try:
        return await backend.sample(
            list(prompt), SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
        )
    finally:
        await backend.close()


def test_a_two_policy_eval_scores_each_policy_on_its_own_checkpoint(
    database_url: str,
    blob_store: BlobStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = tiny(tmp_path / "base", seed=0)
    models = {"walker": tiny(tmp_path / "walker", seed=1), "avoider": tiny(tmp_path / "avoider", 2)}
    uris = {
        policy: {
            0: blob_store.put_dir(base, f"ckpt/{policy}/v0"),
            1: blob_store.put_dir(models[policy], f"ckpt/{policy}/v1"),
        }
        for policy in POLICIES
    }

    async def play() -> str:
        async with await Ledger.connect(database_url) as ledger:
            run_id = await two_policy_run(ledger, str(base), uris)
            job = await evaluate(
                ledger,
                blob_store,
                "tests.evals.test_policies:SUITE",
                checkpoint="latest",
                run=run_id,
                cache_dir=tmp_path / "cache",
            )
            assert job.scored and job.version == 1 and job.seats_ended == job.seats == 3 * 2 + 2

            scores = {(s.environment, s.policy): s for s in await ledger.eval_scores(run_id)}
            # Each policy's score is the mean reward of its own agents' seats: 1.0 for the
            # walker's, 0.25 for the avoider's (0.625 would mean the seats were mixed).
            assert set(scores) == {
                ("roles", "walker"),
                ("roles", "avoider"),
                ("first-character", "walker"),
            }
            assert (scores["roles", "walker"].score, scores["roles", "walker"].episodes) == (1, 3)
            assert (scores["roles", "avoider"].score, scores["roles", "avoider"].episodes) == (
                0.25,
                3,
            )
            assert scores["first-character", "walker"].episodes == 2
            assert {s.backend for s in scores.values()} == {"local"}

            # Every seat sampled from its agent's policy's checkpoint 1.
            episodes = await ledger.list_episodes(run_id, kind="eval")
            turns = [turn for episode in episodes for turn in episode.turns]
            assert len(turns) == 8
            for turn in turns:
                policy = POLICY_OF[turn.agent]
                other = "avoider" if policy == "walker" else "walker"
                assert (turn.policy, turn.version) == (policy, 1)
                own = await greedy(models[policy], turn.prompt_tokens)
                theirs = await greedy(models[other], turn.prompt_tokens)
                n = len(turn.completion_tokens)
                assert own.tokens[:n] == turn.completion_tokens
                assert own.logprobs[:n] == pytest.approx(turn.logprobs, abs=1e-4)
                assert theirs.logprobs[:n] != pytest.approx(turn.logprobs, abs=1e-2)
            return run_id

    run_id = asyncio.run(play())

    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    code, out, err = rollout(capsys, "evals", "show", run_id, "--json")
    assert code == 0, err
    assert [(r["environment"], r["policy"], r["checkpoint"]) for r in json.loads(out)] == [
        ("roles", "avoider", "v1"),
        ("roles", "walker", "v1"),
        ("first-character", "walker", "v1"),
    ]
    code, out, err = rollout(capsys, "evals", "show", run_id)
    assert code == 0, err
    assert "policy" in out and "avoider" in out and "walker" in out


async def test_a_two_policy_run_is_evaluated_at_the_versions_every_policy_has(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    # The walker is a step ahead of the avoider: version 2 is not the run's yet.
    versions = {"walker": {0: "w0", 1: "w1", 2: "w2"}, "avoider": {0: "a0", 1: "a1"}}
    run_id = await two_policy_run(
        ledger, "m", versions, evals=[{"suite": "tests.evals.test_policies:SUITE", "every": 1}]
    )
    evaluator = Evaluator(ledger, blob_store, run_id=run_id)
    await evaluator.request_scheduled()
    assert [r.version for r in await ledger.eval_requests(run_id)] == [0, 1]

    run = await ledger.get_run(run_id)
    assert await checkpoint_version(ledger, run, "latest") == 1
    with pytest.raises(EvalError, match="not 2"):
        await checkpoint_version(ledger, run, "2")


async def test_a_suite_with_an_agent_no_policy_plays_is_refused(
    ledger: Ledger, blob_store: BlobStore, tmp_path: Path
) -> None:
    run_id = await two_policy_run(ledger, "m", {"walker": {0: "w0"}, "avoider": {0: "a0"}})
    path = tmp_path / "three.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "three",
                "version": 1,
                "environments": [{"environment": "tests.evals.envs:trio", "episodes": 1}],
            }
        )
    )
    with pytest.raises(EvalError, match="maps 2 to its policies"):
        await evaluate(ledger, blob_store, str(path), checkpoint="base", run=run_id, play=False)

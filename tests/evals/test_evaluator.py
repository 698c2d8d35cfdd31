"""On-demand evals played end to end: real Postgres, real gateway, the scripted model.

The scripted model answers arithmetic exactly and anything else with a fixed reply, which makes
every score predictable without a trained model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rolloutlib.evals import run_benchmark
from rolloutlib.graders import Score

from rollout.blobs import BlobStore
from rollout.evals.report import score_rows
from rollout.evals.suite import resolve
from rollout.launch.evaluator.demand import evaluate
from rollout.ledger import Ledger
from rollout.ledger.evals import SuiteVersionConflict
from tests.cli_helpers import rollout


async def _scripted_run(ledger: Ledger) -> str:
    run = await ledger.create_run(
        "scripted", "arithmetic.environment:environment", {"kind": "single", "model": "scripted"}
    )
    return run.run_id


@pytest.mark.slow
async def test_a_suite_is_scored_per_environment_on_the_checkpoint_asked_for(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    run_id = await _scripted_run(ledger)
    job = await evaluate(ledger, blob_store, "math-sample", checkpoint="base", run=run_id)
    assert job.scored and job.seats_ended == job.seats == 26 and job.suite_version == "1"
    rows = {r["environment"]: r for r in score_rows(await ledger.eval_scores(run_id))}
    assert list(rows) == ["arithmetic", "gsm8k-sample", "aime-sample"]
    arithmetic = rows["arithmetic"]
    assert (arithmetic["score"], arithmetic["episodes"], arithmetic["method"]) == (
        1.0,
        16,
        "wilson",
    )
    assert 0.75 < arithmetic["ci_low"] < 1.0 == arithmetic["ci_high"]
    assert all(r["checkpoint"] == "base" and r["suite_version"] == "1" for r in rows.values())

    episodes = await ledger.list_episodes(run_id, limit=100, kind="eval")
    assert len(episodes) == 26
    # Played on the checkpoint asked for: every eval turn was sampled by the base model (-1).
    assert {turn.version for e in episodes for turn in e.turns} == {-1}
    # Greedy sampling, as the suite says.
    assert {turn.temperature for e in episodes for turn in e.turns} == {0.0}

    # GSM8K graded exactly as rolloutlib's run_benchmark grades the same answers.
    suite = resolve("math-sample")
    gsm8k = suite.members[1]
    predicted: dict[str, str | None] = {}
    for episode in episodes:
        if episode.parameters in gsm8k.parameters:
            (end,) = episode.ends
            assert end.score is not None
            predicted[episode.parameters["id"]] = end.score["metadata"]["predicted"]
    assert len(predicted) == 8
    from rollout.evals.members import benchmark_of

    benchmark = benchmark_of("gsm8k", gsm8k.parameters, gsm8k.template)

    def replay(env: Any) -> Score:
        env.reset()
        answer = predicted[env.item["id"]]
        info = env.step(f"#### {answer}" if answer is not None else "no idea")[4]
        return Score.from_info(info)

    expected = run_benchmark(benchmark, replay)
    assert rows["gsm8k-sample"]["score"] == pytest.approx(expected.value)
    assert 0 < expected.value < 1  # the check is not vacuous: some right, some wrong


async def test_multi_agent_episodes_count_once_with_their_mean_reward(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    run_id = await _scripted_run(ledger)
    job = await evaluate(
        ledger, blob_store, "tests.evals.test_suite:PYTHON_SUITE", checkpoint="base", run=run_id
    )
    assert (job.episodes, job.seats, job.seats_ended) == (2, 4, 4)
    (row,) = score_rows(await ledger.eval_scores(run_id))
    assert (row["environment"], row["score"], row["episodes"]) == ("pair", 0.5, 2)


async def test_a_changed_suite_needs_a_new_version(
    ledger: Ledger, blob_store: BlobStore, tmp_path: Path
) -> None:
    run_id = await _scripted_run(ledger)
    path = tmp_path / "s.yaml"
    suite = {"name": "s", "version": 1, "environments": [{"environment": "tests.evals.envs:pair"}]}
    path.write_text(
        json.dumps({**suite, "environments": [{**suite["environments"][0], "episodes": 1}]})
    )  # type: ignore[index]
    await evaluate(ledger, blob_store, str(path), checkpoint="base", run=run_id, play=False)
    path.write_text(
        json.dumps({**suite, "environments": [{**suite["environments"][0], "episodes": 2}]})
    )  # type: ignore[index]
    with pytest.raises(SuiteVersionConflict, match="'s' version '1'"):
        await evaluate(ledger, blob_store, str(path), checkpoint="base", run=run_id, play=False)


def test_the_cli_runs_lists_and_shows_evals(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    async def setup() -> str:
        async with await Ledger.connect(database_url) as ledger:
            return await _scripted_run(ledger)

    run_id = asyncio.run(setup())
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    code, out, err = rollout(
        capsys, "evals", "run", "tests/evals/slow.yaml", "--checkpoint", "base", "--run", run_id,
        "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["job"]["state"] == "done" and result["scores"][0]["episodes"] == 40
    code, out, _ = rollout(capsys, "evals", "list", "--json")
    assert [(j["suite"], j["checkpoint"], j["state"]) for j in json.loads(out)] == [
        ("slow", "base", "done")
    ]
    code, out, _ = rollout(capsys, "evals", "show", "scripted", "--json")
    (row,) = json.loads(out)
    assert (row["environment"], row["checkpoint"], row["suite_version"]) == (
        "slow-sum",
        "base",
        "1",
    )
    assert row["ci_low"] <= row["score"] <= row["ci_high"] and row["delta_base"] is None
    assert rollout(capsys, "evals", "show", "scripted")[0] == 0  # the table
    code, _, err = rollout(capsys, "evals", "run", "slow", "--checkpoint", "base", "--run", run_id)
    assert code == 2 and "suite 'slow' not found" in err
    code, _, err = rollout(capsys, "evals", "run", "tests/evals/slow.yaml", "--run", run_id)
    assert code == 2 and "no checkpoint yet" in err

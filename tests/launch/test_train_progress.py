"""`rollout train`'s parts on a real Postgres: the new run's records, the progress follower that
reads only new train steps over one connection, and the summary."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from rich.console import Console

from rollout.errors import RolloutError
from rollout.launch import progress as progress_module
from rollout.launch.model_folder import resolve_model
from rollout.launch.new_run import create_run, training_config
from rollout.launch.progress import TrainingProgress, say_while, watch_training
from rollout.launch.summary import print_summary, summarize
from rollout.ledger import CheckpointRecord, Lease, Ledger
from rollout.ledger.leases import trainer_lease
from rollout.runs.config import RunConfig
from rollout.runs.spec import RunSpec


async def _trainer(ledger: Ledger, run_id: str) -> Lease:
    return await ledger.acquire_lease(trainer_lease(run_id), "test-trainer")


async def _step(ledger: Ledger, lease: Lease, run_id: str, step: int, reward: float) -> None:
    parent = step - 1 if step else None
    checkpoint = CheckpointRecord(run_id, step, parent, f"v{step}", "full", 0.0, {})
    metrics = {"reward": reward, "loss": 0.5, "lag_mean": 1.0, "episodes": 16.0}
    await ledger.record_train_step(lease, run_id, step, [], metrics, checkpoint)


@pytest.fixture
async def run_id(ledger: Ledger, tmp_path: Path) -> str:
    config = training_config("cpu-tiny", ["temperature=0.7"], steps=12, max_lag=2)
    record = await create_run(
        ledger, "parity.environment:environment", config, tmp_path, "progress-test"
    )
    return record.run_id


async def test_create_run_records_the_spec_and_the_settings_roles_follow(
    ledger: Ledger, run_id: str, tmp_path: Path
) -> None:
    record = await ledger.get_run("progress-test")
    assert record.run_id == run_id and record.environment == "parity.environment:environment"
    spec = RunSpec.of(record)
    assert spec.kind == "train" and spec.model == str(tmp_path)
    assert spec.training is not None and spec.training.steps == 12
    settings = await ledger.settings(run_id)
    assert settings["max_lag"] == 2
    assert settings["sampling"] == {"temperature": 0.7}


def test_training_config_applies_overrides_then_steps_and_max_lag() -> None:
    config = training_config("cpu-tiny", ["steps=7", "max_lag=0"], steps=None, max_lag=3)
    assert (config.steps, config.max_lag) == (7, 3)
    with pytest.raises(RolloutError, match="max_lag") as caught:
        training_config("cpu-tiny", ["max_lag=many"])
    assert "many" in str(caught.value)
    # --max-lag is checked by the same bounds as the preset's field (rollout.runs.live).
    with pytest.raises(RolloutError, match=r"--max-lag: invalid preset: max_lag: .*\(got -1\)"):
        training_config("cpu-tiny", max_lag=-1)


def test_resolve_model_prefers_the_override_and_names_a_folder_without_config(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(RunConfig.model_validate({}), str(tmp_path)) == tmp_path.resolve()
    with pytest.raises(RolloutError, match=r"has no config\.json"):
        resolve_model(RunConfig.model_validate({}), str(tmp_path / "missing"))


async def test_train_steps_after_reads_only_newer_steps(ledger: Ledger, run_id: str) -> None:
    lease = await _trainer(ledger, run_id)
    for step in range(4):
        await _step(ledger, lease, run_id, step, reward=step / 10)
    assert [s.step for s in await ledger.train_steps(run_id, after=1)] == [2, 3]
    assert [s.step for s in await ledger.train_steps(run_id)] == [0, 1, 2, 3]
    assert await ledger.train_steps(run_id, after=3) == []


async def test_each_poll_reads_only_the_new_steps(ledger: Ledger, run_id: str) -> None:
    lease = await _trainer(ledger, run_id)
    progress = TrainingProgress(run_id)
    assert await progress.poll(ledger) == [] and progress.last_step == -1
    await _step(ledger, lease, run_id, 0, reward=0.0)
    await _step(ledger, lease, run_id, 1, reward=0.2)
    assert [s.step for s in await progress.poll(ledger)] == [0, 1]
    await _step(ledger, lease, run_id, 2, reward=0.4)
    assert [s.step for s in await progress.poll(ledger)] == [2]
    assert await progress.poll(ledger) == []
    assert [s.step for s in progress.steps] == [0, 1, 2] and not progress.finished
    await ledger.set_setting(run_id, "finished", True)
    await progress.poll(ledger)
    assert progress.finished


async def test_watch_follows_the_run_until_it_finishes(
    ledger: Ledger, make_ledger: Callable[..., Awaitable[Ledger]], run_id: str
) -> None:
    trainer_ledger = await make_ledger()  # another process's connection, as the trainer's
    lease = await _trainer(trainer_ledger, run_id)

    async def train() -> None:
        for step, reward in enumerate([0.0, 0.1, 0.5, 0.95]):
            await _step(trainer_ledger, lease, run_id, step, reward)
            await asyncio.sleep(0.05)
        await trainer_ledger.set_setting(run_id, "finished", True)

    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    progress = TrainingProgress(run_id)
    trainer = asyncio.create_task(train())
    await asyncio.wait_for(
        watch_training(ledger, progress, 3, console, interval=0.05, max_lag=2), 30
    )
    await trainer
    assert [s.step for s in progress.steps] == [0, 1, 2, 3] and progress.finished
    assert "step 3/3" in out.getvalue() and "reward 0.950" in out.getvalue()
    # Not a terminal (piped): whole plain lines, one per change, none cut.
    steps = [line for line in out.getvalue().splitlines() if line.startswith("training step")]
    assert "training step 3/3  reward 0.950  loss +0.5000  lag 1.00 (max_lag 2)" in steps[-1]
    assert "…" not in out.getvalue() and "━" not in out.getvalue()  # no bar, nothing cut
    # The lag is shown beside max_lag and explained once (a lag above max_lag).
    assert "lag 1.00 (max_lag 2)" in out.getvalue()
    assert out.getvalue().count("lag: how many steps older") == 1
    assert "can pass max_lag" in " ".join(out.getvalue().split())

    summary = {"run_id": run_id, "name": "progress-test", "status": "finished", "seconds": 9.0}
    summary |= summarize(progress.steps, began=progress.steps[0].created_at)
    assert summary["steps"] == 3 and summary["last_rewards_mean"] == pytest.approx(0.5166, 1e-3)
    print_summary(console, summary)
    assert "progress-test finished after 9 s: 3 steps" in out.getvalue()


async def test_piped_output_gets_a_line_at_least_every_few_seconds(
    ledger: Ledger, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", 0.1)  # 5 s in use: a tenth here
    out = io.StringIO()
    began = asyncio.get_running_loop().time()

    def stopped() -> str | None:
        return "stopped" if asyncio.get_running_loop().time() - began > 0.6 else None

    with pytest.raises(RolloutError, match="stopped"):
        await watch_training(
            ledger, TrainingProgress(run_id), 3, Console(file=out), stopped=stopped, interval=0.05
        )
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4, lines  # nothing changed, yet a line came every 0.1 s
    assert all(line.startswith("training step 0/3  starting roles") for line in lines), lines


async def test_a_long_stop_says_so_on_piped_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "PLAIN_EVERY_S", 0.1)  # 5 s in use: a tenth here
    out = io.StringIO()

    async def stop() -> str:
        await asyncio.sleep(0.55)
        return "stopped"

    assert await say_while(Console(file=out), "stopping the roles", stop()) == "stopped"
    lines = out.getvalue().splitlines()
    assert lines[0] == "stopping the roles..." and len(lines) >= 5, lines  # one every 0.1 s
    assert all(line.startswith("stopping the roles... ") for line in lines[1:]), lines
    terminal = io.StringIO()  # a terminal gets the first line only
    await say_while(Console(file=terminal, force_terminal=True), "stopping", asyncio.sleep(0.3))
    assert terminal.getvalue().splitlines() == ["stopping..."]


async def test_watch_stops_with_the_roles_reason(ledger: Ledger, run_id: str) -> None:
    console = Console(file=io.StringIO())
    progress = TrainingProgress(run_id)
    with pytest.raises(RolloutError, match="the local roles stopped"):
        await watch_training(
            ledger, progress, 3, console, stopped=lambda: "the local roles stopped (exit 1)"
        )

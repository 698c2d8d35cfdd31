"""A run whose failures pass a threshold pauses itself and stops as failed with the first error:
the run is paused and marked failed, says why everywhere, and `rollout runs resume RUN`
continues the same run, judged afresh."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rollout.launch.failures import check_failures
from rollout.launch.local import LocalSupervisor
from rollout.ledger import EpisodeSpec, Ledger
from rollout.monitor.queries import run_summaries
from rollout.settings import get_settings
from tests.cli_helpers import rollout
from tests.launch.failed_runs import new_run, play


async def _wanted(ledger: Ledger, run_id: str) -> bool:
    supervisor = LocalSupervisor(ledger, get_settings())
    return await supervisor._wanted(await ledger.get_run(run_id), await ledger.run_settings(run_id))


async def test_a_failing_run_pauses_itself_and_resume_continues_it_judged_afresh(
    ledger: Ledger, tmp_path: Path
) -> None:
    run_id = await new_run(ledger, tmp_path, "flaky")
    await play(ledger, run_id, 0, failed=9, completed=1)
    error = await check_failures(ledger, run_id)
    assert error is not None and "9 of 10 episodes failed" in error
    assert "the first error: Broken.start raised RuntimeError: group 0 number 0;" in error
    assert "the run is paused: fix the environment, then `uv run rollout runs resume flaky`" in (
        error
    )
    assert "\n" not in error
    settings = await ledger.settings(run_id)
    assert settings["paused"] is True and settings["status"] == "failed"
    assert settings["error"] == error
    # Paused: a waiting episode is not handed out, and supervisors retire the run's roles.
    await ledger.add_episodes(run_id, [EpisodeSpec(1, 0, {"number": "3"}, seed=0)])
    assert await ledger.claim_seat("test-runner", run_id=run_id) is None
    assert not await _wanted(ledger, run_id)
    (row,) = [r for r in await run_summaries(ledger) if r["run_id"] == run_id]
    assert row["state"] == "failed"

    # The environment is fixed; resuming clears the failure and keeps every recorded fact.
    assert await ledger.resume_run(run_id)
    settings = await ledger.settings(run_id)
    assert settings["paused"] is False and settings["status"] == "running"
    assert settings["error"] is None
    assert settings["failures_baseline"]["ended"] == 10
    assert settings["failures_baseline"]["failed"] == 9
    assert (await ledger.episode_counts(run_id))["failed"] == 9  # nothing forgotten
    # The old failures do not re-trip it: only episodes ended since the resume count.
    assert await check_failures(ledger, run_id) is None
    assert await _wanted(ledger, run_id)
    claim = await ledger.claim_seat("test-runner", run_id=run_id)
    assert claim is not None  # seats are handed out again
    await ledger.end_seat(claim, reward=1.0)
    await play(ledger, run_id, 2, failed=3, completed=5)  # 3 of 9 since: under 0.5
    assert await check_failures(ledger, run_id) is None

    # Still broken: it pauses again, judged on the episodes since the resume only.
    await play(ledger, run_id, 3, failed=8, completed=0)
    error = await check_failures(ledger, run_id)
    assert error is not None and "11 of 17 episodes failed since the last resume" in error
    assert "the first error: Broken.start raised RuntimeError: group 2 number 0;" in error
    assert (await ledger.settings(run_id))["paused"] is True
    assert not await _wanted(ledger, run_id)


def test_runs_list_show_and_resume_say_why_a_run_paused_itself(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")

    async def fail() -> str:
        async with await Ledger.connect(database_url) as ledger:
            run_id = await new_run(ledger, tmp_path, "broken")
            await play(ledger, run_id, 0, failed=8, completed=0)
            error = await check_failures(ledger, run_id)
            assert error is not None
            return error

    error = asyncio.run(fail())
    code, out, _ = rollout(capsys, "runs", "list")
    assert code == 0
    assert "failed" in out and f"broken paused: {error}" in out.replace("\n", "")
    code, out, _ = rollout(capsys, "runs", "show", "broken")
    assert code == 0
    assert f"broken paused: {error}" in out.replace("\n", "")

    code, out, _ = rollout(capsys, "runs", "resume", "broken")
    assert code == 0
    out = out.replace("\n", "")
    assert "resumed" in out and "cleared the failure (8 of 8 episodes failed" in out
    assert "uv run rollout up --run broken --until-finished" in out
    code, out, _ = rollout(capsys, "runs", "list")
    assert "paused:" not in out and "active" in out


async def test_the_monitor_shows_why_a_run_paused_itself_and_resumes_it(
    ledger: Ledger, tmp_path: Path
) -> None:
    import httpx

    from rollout.monitor.app import create_app
    from rollout.monitor.store import MonitorStore
    from rollout.net.server import AppServer

    run_id = await new_run(ledger, tmp_path, "shown")
    await play(ledger, run_id, 0, failed=8, completed=0)
    error = await check_failures(ledger, run_id)
    assert error is not None
    store = await MonitorStore.open(ledger.url)
    server = AppServer(create_app(store))
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as web:
            status = (await web.get("/_/runs/shown/status")).text
            assert "state-failed" in status and "8 of 8 episodes failed" in status
            assert 'id="resume"' in status  # the Resume button clears the failure
            assert (await web.get("/api/runs/shown")).json()["state"] == "failed"
            resumed = await web.post("/api/runs/shown/resume", json={})
            assert resumed.json()["state"] == "active"
        assert (await ledger.settings(run_id))["status"] == "running"
        assert await check_failures(ledger, run_id) is None
    finally:
        await server.stop()
        await store.close()

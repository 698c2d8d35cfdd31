"""Runs and settings: idempotent creation, lookup by id or name, latest setting wins."""

from __future__ import annotations

import pytest

from rollout.ledger import InvalidInput, Ledger, LedgerError, NotFound, RunRecord
from rollout.runs import live
from rollout.runs.config import RunConfig
from rollout.runs.errors import InvalidSetting


async def test_create_run_is_idempotent_on_name(ledger: Ledger) -> None:
    first = await ledger.create_run("r1", "env:a", {"x": 1})
    again = await ledger.create_run("r1", "env:a", {"x": 1})
    assert again == first
    assert [r.run_id for r in await ledger.list_runs()] == [first.run_id]


async def test_create_run_refuses_a_taken_name_with_other_config(ledger: Ledger) -> None:
    await ledger.create_run("r1", "env:a", {"x": 1})
    with pytest.raises(LedgerError, match="'r1' is taken"):
        await ledger.create_run("r1", "env:a", {"x": 2})


async def test_get_run_by_id_or_name(ledger: Ledger, run: RunRecord) -> None:
    assert await ledger.get_run(run.run_id) == run
    assert await ledger.get_run("test-run") == run
    assert run.config == {"lr": 1e-5}
    with pytest.raises(NotFound, match="'nope'"):
        await ledger.get_run("nope")


async def test_latest_setting_wins_and_repeats_are_not_stored(
    ledger: Ledger, run: RunRecord
) -> None:
    assert await ledger.set_setting(run.run_id, "max_lag", 2)
    assert await ledger.set_setting(run.run_id, "max_lag", 3)
    assert not await ledger.set_setting(run.run_id, "max_lag", 3)
    assert await ledger.set_setting(run.run_id, "sampling", {"temperature": 0.5})
    assert await ledger.settings(run.run_id) == {"max_lag": 3, "sampling": {"temperature": 0.5}}
    assert await ledger.pause_run(run.run_id)
    assert (await ledger.settings(run.run_id))["paused"] is True
    assert await ledger.resume_run(run.run_id)
    assert (await ledger.settings(run.run_id))["paused"] is False


async def test_settings_of_an_unknown_run(ledger: Ledger) -> None:
    with pytest.raises(NotFound, match="'ghost'"):
        await ledger.set_setting("ghost", "paused", True)


async def test_bad_input_names_the_field(ledger: Ledger, run: RunRecord) -> None:
    with pytest.raises(InvalidInput, match="run name"):
        await ledger.create_run("  ", "env:a", {})
    with pytest.raises(InvalidInput, match="NaN"):
        await ledger.set_setting(run.run_id, live.SAMPLING, {"temperature": float("nan")})


async def test_settings_are_checked_by_their_field_and_read_back_typed(
    ledger: Ledger, run: RunRecord
) -> None:
    for key, value, problem in [
        ("max_lag", -1, "max_lag = -1: Input should be greater than or equal to 0"),
        ("max_lag", float("nan"), "max_lag = nan"),
        ("keep_checkpoints", 0, "keep_checkpoints = 0"),
        ("status", "gone", "status = 'gone'"),
        ("max_lagg", 1, "unknown run setting 'max_lagg'"),
    ]:
        with pytest.raises(InvalidSetting, match=problem):
            await ledger.set_setting(run.run_id, key, value)
    assert await ledger.settings(run.run_id) == {}
    # Unset: the run's config, else the default; a value given as text is stored as a number.
    typed = await ledger.run_settings(run.run_id, RunConfig.model_validate({"max_lag": 4}))
    assert (typed.max_lag, typed.paused, typed.status) == (4, False, None)
    assert (await ledger.run_settings(run.run_id)).max_lag == live.DEFAULT_MAX_LAG
    assert await ledger.set_setting(run.run_id, live.MAX_LAG, "2")
    assert (await ledger.settings(run.run_id))[live.MAX_LAG] == 2
    assert (
        await ledger.run_settings(run.run_id, RunConfig.model_validate({"max_lag": 4}))
    ).max_lag == 2

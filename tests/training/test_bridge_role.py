"""The bridge role on a real ledger and blob folder: it converts every checkpoint of every
policy once, skips those retention deleted, and what each wake-up reads does not grow with the
ledger's history (only the checkpoints after those it handled; a finished run is not read again).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rollout.blobs import BlobStore
from rollout.bridges import Bridge
from rollout.bridges.convert import STATE_SUMMARY
from rollout.ledger import CheckpointRecord, Lease, Ledger
from rollout.ledger.leases import trainer_lease
from rollout.runs import live
from rollout.training.loop import checkpoint_uri

TWO_POLICIES = {"walker": {"agents": [0]}, "avoider": {"agents": [1]}}


async def _checkpoint(
    ledger: Ledger, blobs: BlobStore, lease: Lease, run_id: str, version: int, policy: str
) -> None:
    """Record `policy`'s checkpoint `version` (a full-weights folder in the blob store)."""
    local = blobs.path("scratch") / f"{policy}-v{version}"  # type: ignore[attr-defined]
    local.mkdir(parents=True)
    (local / "model.safetensors").write_bytes(bytes([version]) * 64)
    (local / STATE_SUMMARY).write_text(json.dumps({"kind": "full", "base_model": "scripted"}))
    uri = blobs.put_dir(local, checkpoint_uri(run_id, version, policy=policy), move=True)
    parent = version - 1 if version else None
    checkpoint = CheckpointRecord(run_id, version, parent, uri, "full", 0.0, {}, policy)
    await ledger.record_train_step(lease, run_id, version, [], {}, checkpoint)


def _first_byte(path: Path) -> int:
    return path.read_bytes()[0]


def _spy(
    monkeypatch: pytest.MonkeyPatch, ledger: Ledger, name: str
) -> list[tuple[tuple[Any, ...], dict[str, Any], Any]]:
    """Record each call of the ledger's method `name` (arguments and result); it still runs."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any], Any]] = []
    real: Callable[..., Awaitable[Any]] = getattr(ledger, name)

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        result = await real(*args, **kwargs)
        calls.append((args, kwargs, result))
        return result

    monkeypatch.setattr(ledger, name, recorded)
    return calls


async def test_the_bridge_converts_each_checkpoint_once_reading_only_what_is_new(
    ledger: Ledger, blob_store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"model": "scripted", "training": {"policies": TWO_POLICIES}}
    run = await ledger.create_run("two", "gridworld.environment:pair", config)
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "test-trainer")
    done = await ledger.create_run("done", "parity.environment:environment", {"model": "scripted"})
    done_lease = await ledger.acquire_lease(trainer_lease(done.run_id), "test-trainer")
    await _checkpoint(ledger, blob_store, done_lease, done.run_id, 0, "main")
    await ledger.set_setting(done.run_id, live.FINISHED, True)
    for version in range(3):
        await _checkpoint(ledger, blob_store, lease, run.run_id, version, "walker")
    await _checkpoint(ledger, blob_store, lease, run.run_id, 0, "avoider")
    await ledger.set_setting(run.run_id, live.DELETED_POLICY_CHECKPOINTS, {"walker": [0]})
    bridge = Bridge(ledger, blob_store)
    reads = _spy(monkeypatch, ledger, "checkpoints")
    settings = _spy(monkeypatch, ledger, "run_settings")

    assert await bridge.sync_once() == 3  # walker v1, v2 and avoider v0; walker v0 deleted
    for policy, versions in (("walker", [1, 2]), ("avoider", [0])):
        for version in versions:
            conversions = await ledger.conversions(run.run_id, version, policy=policy)
            assert set(conversions) == {"local"}
            assert _first_byte(Path(conversions["local"], "model.safetensors")) == version
    assert await ledger.conversions(run.run_id, 0, policy="walker") == {}
    assert await ledger.conversions(done.run_id, 0) == {}  # finished: not converted
    assert [call[1]["after"] for call in reads] == [-1]  # the finished run's are not read

    # The avoider lags: a wake-up reads the checkpoints after the oldest handled of any policy.
    await _checkpoint(ledger, blob_store, lease, run.run_id, 3, "walker")
    await _checkpoint(ledger, blob_store, lease, run.run_id, 1, "avoider")
    assert await bridge.sync_once() == 2
    _, kwargs, read = reads[-1]
    assert kwargs["after"] == 0
    assert sorted((c.policy, c.version) for c in read) == [
        ("avoider", 1),
        ("walker", 1),
        ("walker", 2),
        ("walker", 3),
    ]
    assert sorted(await ledger.conversions(run.run_id, 3, policy="walker")) == ["local"]
    assert sorted(await ledger.conversions(run.run_id, 1, policy="avoider")) == ["local"]

    assert await bridge.sync_once() == 0  # nothing new: only versions after 1 read
    assert reads[-1][1]["after"] == 1 and [(c.policy, c.version) for c in reads[-1][2]] == [
        ("walker", 2),
        ("walker", 3),
    ]
    # The finished run's settings were read once, on the first wake-up; never again.
    assert [call[0][0] for call in settings].count(done.run_id) == 1
    assert [call[0][0] for call in settings].count(run.run_id) == 3

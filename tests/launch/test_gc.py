"""State that does not pile up: checkpoint retention, `rollout runs delete` and
`rollout gc`, on a real Postgres and a real blob folder, the commands run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.blobs import BlobStore
from rollout.evals import EvalError
from rollout.inference.weights_cache import fetch, weights_folder
from rollout.launch.evaluator.demand import evaluate
from rollout.launch.gc import ORPHAN_AGE, collect
from rollout.ledger import CheckpointRecord, Ledger
from rollout.ledger.leases import trainer_lease
from rollout.training import retention
from rollout.training.loop import Trainer, checkpoint_uri

WEIGHT_BYTES = 4096


async def _train(ledger: Ledger, blobs: BlobStore, name: str, versions: int) -> str:
    """A run with `versions` checkpoints (each with a `local` conversion) in the blob store."""
    run = await ledger.create_run(name, "parity.environment:environment", {})
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "test-trainer")
    for version in range(versions):
        local = blobs.path("scratch") / f"v{version}"  # type: ignore[attr-defined]
        local.mkdir(parents=True, exist_ok=True)
        (local / "model.safetensors").write_bytes(bytes([version]) * WEIGHT_BYTES)
        uri = blobs.put_dir(local, checkpoint_uri(run.run_id, version))
        checkpoint = CheckpointRecord(run.run_id, version, version - 1 if version else None, uri,
                                      "full", 0.0, {})  # fmt: skip
        await ledger.record_train_step(lease, run.run_id, version, [], {}, checkpoint)
        conversion = blobs.put_dir(local, checkpoint_uri(run.run_id, version) + "-local")
        await ledger.record_conversion(run.run_id, version, "local", conversion)
    blobs.delete("scratch")
    return run.run_id


async def test_retention_keeps_the_last_k_and_marked_and_records_the_rest(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    run_id = await _train(ledger, blob_store, "kept", versions=6)
    await ledger.set_setting(run_id, "keep_versions", [1])
    planned = await retention.plan(ledger, run_id)
    assert (planned.kept, planned.to_delete) == ([1, 3, 4, 5], [0, 2])
    assert await retention.apply(ledger, blob_store, run_id, dry_run=True) == 4 * WEIGHT_BYTES
    assert blob_store.exists(checkpoint_uri(run_id, 0))  # a dry run deletes nothing
    assert await retention.apply(ledger, blob_store, run_id) == 4 * WEIGHT_BYTES
    for version in range(6):
        assert blob_store.exists(checkpoint_uri(run_id, version)) == (version not in (0, 2))
        assert blob_store.exists(checkpoint_uri(run_id, version) + "-local") == (
            version not in (0, 2)
        )
    assert (await ledger.settings(run_id))["deleted_checkpoints"] == [0, 2]
    assert await retention.apply(ledger, blob_store, run_id) == 0  # nothing more to let go
    # An eval of a deleted checkpoint is refused in one line naming the kept ones; nothing queued.
    with pytest.raises(EvalError) as refused:
        await evaluate(ledger, blob_store, "parity", checkpoint="2", run=run_id)
    assert "deleted the files of checkpoint 2 (it keeps 1, 3, 4, 5;" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert await ledger.eval_requests(run_id) == [] and await ledger.eval_jobs(run_id) == []
    await ledger.set_setting(run_id, "keep_checkpoints", 1)
    assert (await retention.plan(ledger, run_id)).to_delete == [3, 4]  # v1 marked, v5 newest


async def _train_policies(
    ledger: Ledger, blobs: BlobStore, name: str, versions: dict[str, int]
) -> str:
    """A run whose policies have `versions[policy]` checkpoints each, each with a `local`
    conversion, in the blob store (a policy's chain under a folder of its own)."""
    run = await ledger.create_run(name, "gridworld.environment:pair", {})
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "test-trainer")
    for policy, count in versions.items():
        for version in range(count):
            local = blobs.path("scratch") / f"{policy}-v{version}"  # type: ignore[attr-defined]
            local.mkdir(parents=True, exist_ok=True)
            (local / "model.safetensors").write_bytes(bytes([version]) * WEIGHT_BYTES)
            key = checkpoint_uri(run.run_id, version, policy=policy)
            uri = blobs.put_dir(local, key)
            checkpoint = CheckpointRecord(run.run_id, version, version - 1 if version else None,
                                          uri, "full", 0.0, {}, policy)  # fmt: skip
            await ledger.record_train_step(lease, run.run_id, version, [], {}, checkpoint)
            conversion = blobs.put_dir(local, key + "-local")
            await ledger.record_conversion(run.run_id, version, "local", conversion, policy=policy)
    blobs.delete("scratch")
    return run.run_id


async def test_the_trainer_applies_retention_at_most_every_few_seconds(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    run_id = await _train(ledger, blob_store, "paced", versions=5)
    trainer = Trainer(ledger, blob_store, run_id)
    await trainer._retain()  # a first pass at once: v0 and v1 go
    assert (await ledger.settings(run_id))["deleted_checkpoints"] == [0, 1]
    await ledger.set_setting(run_id, "keep_checkpoints", 1)
    await trainer._retain()  # the pass before was under RETENTION_SECONDS ago: nothing changes
    assert (await ledger.settings(run_id))["deleted_checkpoints"] == [0, 1]
    assert blob_store.exists(checkpoint_uri(run_id, 2))
    await trainer._retain(every=0.0)  # as when the run finishes: whatever the last pass's age
    assert (await ledger.settings(run_id))["deleted_checkpoints"] == [0, 1, 2, 3]
    assert not blob_store.exists(checkpoint_uri(run_id, 3))
    assert blob_store.exists(checkpoint_uri(run_id, 4))


async def test_retention_keeps_the_last_k_of_each_policy(
    ledger: Ledger, blob_store: BlobStore
) -> None:
    run_id = await _train_policies(ledger, blob_store, "two", {"walker": 6, "avoider": 5})
    await ledger.set_setting(run_id, "keep_versions", [1])  # in every policy's chain
    await ledger.ack_serving(run_id, "s1", 0, policy="avoider")  # served: kept
    plans = {p.policy: p for p in await retention.plans(ledger, run_id)}
    assert list(plans) == ["main", "avoider", "walker"]
    assert (plans["walker"].kept, plans["walker"].to_delete) == ([1, 3, 4, 5], [0, 2])
    assert (plans["avoider"].kept, plans["avoider"].to_delete) == ([0, 1, 2, 3, 4], [])
    assert (plans["main"].kept, plans["main"].to_delete) == ([], [])
    await ledger.ack_serving(run_id, "s1", 4, policy="avoider")  # v0 is no longer served
    assert await retention.apply(ledger, blob_store, run_id) == 3 * 2 * WEIGHT_BYTES
    for policy, deleted in (("walker", (0, 2)), ("avoider", (0,))):
        for version in range(5):
            uri = checkpoint_uri(run_id, version, policy=policy)
            assert blob_store.exists(uri) == (version not in deleted)
            assert blob_store.exists(uri + "-local") == (version not in deleted)
    settings = await ledger.run_settings(run_id)
    assert settings.deleted_of("walker") == (0, 2) and settings.deleted_of("avoider") == (0,)
    assert settings.deleted_checkpoints == ()  # the default policy's: it has no checkpoints
    assert await retention.apply(ledger, blob_store, run_id) == 0  # nothing more to let go
    await ledger.set_setting(run_id, "keep_checkpoints", 1)
    plans = {p.policy: p for p in await retention.plans(ledger, run_id)}
    assert plans["walker"].to_delete == [3, 4] and plans["walker"].deleted == [0, 2]
    assert plans["avoider"].to_delete == [2, 3]  # v1 marked, v4 newest and served


async def test_gc_keeps_each_policy_s_chain(ledger: Ledger, tmp_path: Path) -> None:
    blobs = BlobStore.from_url(str(tmp_path / "blobs"))
    run_id = await _train_policies(ledger, blobs, "two", {"main": 4, "scout": 4})
    cache = tmp_path / "cache"
    backend = weights_folder(cache, run_id, "local", 0).parent
    for name in ("v0", "v3", "scout-v0", "scout-v3"):  # as inference servers cache them
        (backend / name).mkdir(parents=True)
    done = await collect(ledger, blobs, cache)
    assert done.checkpoints == {"two": [0], "two/scout": [0]} and done.blobs == []
    # Once the policy's folder is old, what no fact names in it would be taken: not its chain.
    old = time.time() - 2 * ORPHAN_AGE
    os.utime(blobs.path(f"runs/{run_id}/checkpoints/scout"), (old, old))  # type: ignore[attr-defined]
    again = await collect(ledger, blobs, cache)
    assert (again.checkpoints, again.blobs, again.bytes_freed) == ({}, [], 0)
    for policy in ("main", "scout"):
        for version in range(4):
            uri = checkpoint_uri(run_id, version, policy=policy)
            assert blobs.exists(uri) == (version != 0)
            assert blobs.exists(uri + "-local") == (version != 0)
    assert sorted(p.name for p in backend.iterdir()) == ["scout-v3", "v3"]


def test_the_shared_weights_cache_keeps_one_copy(blob_store: BlobStore, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"w" * 10)
    uri = blob_store.put_dir(source, "runs/r/checkpoints/v000001-local")
    folder = weights_folder(tmp_path / "cache", "r", "local", 1)
    assert fetch(blob_store, uri, folder) == folder  # the inference server's
    assert fetch(blob_store, uri, folder) == folder  # the evaluator's: found, not copied again
    assert [p.name for p in folder.parent.iterdir()] == ["v1"]  # no partial copies left


def _rollout(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )


@pytest.mark.slow  # a dozen `rollout` processes
async def test_runs_delete_and_gc_free_the_files(
    ledger: Ledger, database_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    blobs = BlobStore.from_url(str(state / "blobs"))
    env = dict(
        os.environ,
        ROLLOUT_DATABASE_URL=database_url,
        ROLLOUT_STATE_DIR=str(state),
        ROLLOUT_BLOB_URL=str(state / "blobs"),
        COLUMNS="200",
    )
    doomed = await _train(ledger, blobs, "doomed", versions=2)
    kept = await _train(ledger, blobs, "kept", versions=5)
    cache = state / "cache"
    for run_id in (doomed, kept):
        for version in range(2):
            uri = checkpoint_uri(run_id, version) + "-local"
            fetch(blobs, blobs.uri(uri), weights_folder(cache, run_id, "local", version))
    dead = cache / kept / "trainer-999999999"  # a scratch folder of a process that is gone
    dead.mkdir()
    (dead / "scratch.bin").write_bytes(b"x" * 100)
    (cache / "all" / "evaluator-1").mkdir(parents=True)  # an old per-process layout

    refused = _rollout(env, "runs", "delete", "doomed", "--yes")
    assert refused.returncode == 2 and "runs stop doomed" in refused.stderr
    assert _rollout(env, "runs", "stop", "doomed").returncode == 0
    unconfirmed = _rollout(env, "runs", "delete", "doomed", stdin="n\n")
    assert unconfirmed.returncode != 0 and blobs.exists(checkpoint_uri(doomed, 0))

    deleted = _rollout(env, "runs", "delete", "doomed", "--yes", "--json")
    assert deleted.returncode == 0, deleted.stderr
    freed = json.loads(deleted.stdout)["bytes_freed"]
    assert freed == 2 * 2 * WEIGHT_BYTES + 2 * WEIGHT_BYTES  # blobs + its cached weights
    assert blobs.list(f"runs/{doomed}") == [] and not (cache / doomed).exists()
    gone = _rollout(env, "runs", "show", "doomed")
    assert gone.returncode == 2 and "not found" in gone.stderr

    dry = json.loads(_rollout(env, "gc", "--dry-run", "--json").stdout)
    assert dry["checkpoints"] == {"kept": [0, 1]} and dry["dry_run"]
    assert blobs.exists(checkpoint_uri(kept, 0))
    collected = _rollout(env, "gc")
    assert collected.returncode == 0, collected.stderr
    assert "run kept: checkpoints past retention: v0 v1" in collected.stdout
    expected = 2 * 2 * WEIGHT_BYTES + 2 * WEIGHT_BYTES + 100  # blobs, cached v0 v1, scratch
    assert f"freed {expected / 1e6:.1f} MB ({expected} bytes)" in collected.stdout
    assert not blobs.exists(checkpoint_uri(kept, 0)) and blobs.exists(checkpoint_uri(kept, 2))
    assert not dead.exists() and not (cache / "all").exists()
    assert not weights_folder(cache, kept, "local", 0).exists()
    assert "freed 0.0 MB (0 bytes)" in _rollout(env, "gc").stdout  # nothing left to free

    show = _rollout(env, "runs", "show", "kept", "--json")
    detail = json.loads(show.stdout)
    assert detail["checkpoints_kept"] == [2, 3, 4] and detail["checkpoints_deleted"] == [0, 1]
    assert "checkpoints kept: v2 v3 v4; files deleted by retention: v0 v1" in " ".join(
        _rollout(env, "runs", "show", "kept").stdout.split()
    )

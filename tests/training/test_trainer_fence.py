"""The trainer's fenced writes, in process: after a take-over, the old trainer's checkpoint,
train step and serving record are refused, its upload never replaces the new holder's files, and
a lease it lost and took again makes it stand down (its memory may be behind the ledger)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from rollout.blobs import LocalBlobStore
from rollout.ledger import Ledger, RunRecord, StaleFence
from rollout.ledger.leases import trainer_lease
from rollout.runs.config import RunConfig
from rollout.training.errors import FencedOut
from rollout.training.loop import Trainer, checkpoint_uri, make_provider


async def _expire(database_url: str, run_id: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE leases SET expires_at = now() WHERE name = %s", (trainer_lease(run_id),)
        )


@pytest.fixture
async def run(ledger: Ledger) -> RunRecord:
    return await ledger.create_run("fence", "parity.environment:environment", {})


async def test_the_old_trainer_s_writes_are_refused_and_its_files_kept_apart(
    ledger: Ledger, database_url: str, run: RunRecord, tiny_model_dir: Path, tmp_path: Path
) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    old = Trainer(ledger, store, run.run_id, holder="old", work_dir=tmp_path / "old")
    new = Trainer(ledger, store, run.run_id, holder="new", work_dir=tmp_path / "new")
    provider = make_provider(RunConfig.model_validate({}), tiny_model_dir)
    old_lease = await old._renew()
    await old._save(provider, old_lease, 0, None, [], {})
    await _expire(database_url, run.run_id)  # the old trainer was paused past its lease
    new_lease = await new._renew()
    assert new_lease.epoch == old_lease.epoch + 1
    await new._save(provider, new_lease, 1, 0, [], {})
    new_files = store.folder_sizes(checkpoint_uri(run.run_id, 1, new_lease.epoch))

    # Revived: its checkpoint of the same version and its serving record are refused.
    with pytest.raises(StaleFence, match="taken over by 'new'"):
        await old._save(provider, old_lease, 1, 0, [], {})
    await ledger.record_conversion(run.run_id, 1, "local", checkpoint_uri(run.run_id, 1, 2))
    with pytest.raises(StaleFence):
        await old._publish_serving(old_lease)
    assert await ledger.serving(run.run_id) is None
    [v0, v1] = await ledger.checkpoints(run.run_id)
    assert v1.uri == checkpoint_uri(run.run_id, 1, new_lease.epoch)  # the new holder's record
    assert store.folder_sizes(v1.uri) == new_files  # and its files, untouched
    assert v0.uri == checkpoint_uri(run.run_id, 0, old_lease.epoch)
    assert await new._publish_serving(new_lease)


async def test_a_lease_lost_and_taken_again_makes_the_trainer_stand_down(
    ledger: Ledger, database_url: str, run: RunRecord, tmp_path: Path
) -> None:
    old = Trainer(ledger, LocalBlobStore(str(tmp_path)), run.run_id, holder="old")
    new = Trainer(ledger, LocalBlobStore(str(tmp_path)), run.run_id, holder="new")
    await old._renew()
    await _expire(database_url, run.run_id)
    await new._renew()  # epoch 2, then the new trainer dies too
    await _expire(database_url, run.run_id)
    old._lease_renewed -= 60  # the old trainer's next renewal is due
    with pytest.raises(StaleFence, match="epoch 1 lapsed and another trainer held it"):
        await old._renew()


async def test_run_turns_a_refused_write_into_one_stand_down_error(
    ledger: Ledger, database_url: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    from rollout.launch.new_run import create_run

    config = RunConfig.model_validate({"steps": 3, "groups_per_step": 1, "group_size": 1})
    record = await create_run(
        ledger, "parity.environment:environment", config, tiny_model_dir, "fence-run"
    )
    store = LocalBlobStore(str(tmp_path / "blobs"))
    trainer = Trainer(ledger, store, record.run_id, holder="old", work_dir=tmp_path / "w")
    stop = asyncio.Event()
    task = asyncio.create_task(trainer.run(stop))
    for _ in range(600):  # until v0 is recorded: then it waits for groups
        if await ledger.checkpoints(record.run_id):
            break
        await asyncio.sleep(0.05)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(  # taken over in one statement (no window for a renewal)
            "UPDATE leases SET holder = 'new', epoch = epoch + 1,"
            " expires_at = now() + interval '30 seconds' WHERE name = %s",
            (trainer_lease(record.run_id),),
        )
    trainer._lease_renewed -= 60  # its next renewal is due
    with pytest.raises(FencedOut) as caught:
        await asyncio.wait_for(task, 30)
    message = str(caught.value)
    assert "\n" not in message and "'old'" in message and "stands down" in message
    assert "held by 'new' (epoch 2)" in message

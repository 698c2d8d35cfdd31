"""The trainer's publish order under blob store faults: a checkpoint whose upload fails is never
recorded (no record points at a missing or partial folder), a retry after the fault clears
publishes it, and a serving record is never written for files that are not there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rollout.blobs import BlobError, LocalBlobStore
from rollout.ledger import CheckpointRecord, Ledger, RunRecord
from rollout.runs.config import RunConfig
from rollout.training.loop import Trainer, checkpoint_uri, make_provider


@pytest.fixture
async def run(ledger: Ledger) -> RunRecord:
    return await ledger.create_run("faults", "parity.environment:environment", {})


async def test_a_failed_checkpoint_upload_is_not_recorded_and_a_retry_publishes_it(
    ledger: Ledger, run: RunRecord, tiny_model_dir: Path, tmp_path: Path
) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    trainer = Trainer(ledger, store, run.run_id, work_dir=tmp_path / "work")
    trainer.upload_delay = 0.01
    lease = await trainer._renew()
    provider = make_provider(RunConfig.model_validate({}), tiny_model_dir)
    # The store cannot write under the run's folder: a file is in its way (a failing disk).
    blocker = store.root / "runs" / run.run_id
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")

    with pytest.raises(BlobError, match="failed 4 times"):
        await trainer._save(provider, lease, 0, None, [], {"loss": 0.0})
    assert await ledger.checkpoints(run.run_id) == []  # nothing recorded without its files
    assert await ledger.train_steps(run.run_id) == []

    blocker.unlink()  # the fault clears: the same step is saved again and published
    await trainer._save(provider, lease, 0, None, [], {"loss": 0.0})
    [checkpoint] = await ledger.checkpoints(run.run_id)
    assert checkpoint.uri == checkpoint_uri(run.run_id, 0, lease.epoch)
    assert checkpoint.uri.endswith(f"v000000-e{lease.epoch}")
    restored = store.get_dir(checkpoint.uri, tmp_path / "restored")
    provider.load(restored)  # whole: the provider loads it
    [step] = await ledger.train_steps(run.run_id)
    assert step.metrics["save_seconds"] > 0  # save + upload, timed before the record


async def test_a_serving_record_never_names_missing_files(
    ledger: Ledger, run: RunRecord, tmp_path: Path
) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    trainer = Trainer(ledger, store, run.run_id, work_dir=tmp_path / "work")
    lease = await trainer._renew()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 100)
    uri = store.put_dir(folder, checkpoint_uri(run.run_id, 0, lease.epoch))
    await ledger.record_checkpoint(
        lease,
        CheckpointRecord(
            run_id=run.run_id,
            version=0,
            parent_version=None,
            uri=uri,
            kind="full",
            created_at=time.time(),
            metadata={},
        ),
    )
    conversion = str(store.path(checkpoint_uri(run.run_id, 0, lease.epoch) + "-local"))
    await ledger.record_conversion(run.run_id, 0, "local", conversion)

    assert not await trainer._publish_serving(lease)  # the conversion's files are missing
    assert await ledger.serving(run.run_id) is None

    store.put_dir(folder, conversion)
    assert await trainer._publish_serving(lease)
    serving = await ledger.serving(run.run_id)
    assert serving is not None and serving.uris == {"local": conversion}

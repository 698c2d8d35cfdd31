"""Blob store faults: a failed checkpoint write leaves nothing at its key, and `upload_dir`
retries it (bounded, with backoff) until a copy lands whole."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from rollout.blobs import BlobError, LocalBlobStore, upload_dir

KEY = "runs/r1/checkpoints/v000001-e1"


def _checkpoint(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"tag": "a"}')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    return folder


def _leftovers(store: LocalBlobStore) -> list[str]:
    """Everything under the checkpoints folder: complete folders and temporary ones."""
    folder = store.root / "runs" / "r1" / "checkpoints"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_write_that_fails_midway_leaves_nothing_and_gives_up_after_its_attempts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    source = _checkpoint(tmp_path / "ckpt")
    # A file that cannot be read: the copy writes the others, then fails (as a full disk would).
    (source / "sub" / "vanished.bin").symlink_to(tmp_path / "gone")
    with caplog.at_level(logging.WARNING, "rollout.blobs"), pytest.raises(BlobError) as caught:
        upload_dir(store, source, KEY, attempts=3, delay=0.01)
    assert KEY in str(caught.value) and "3 times" in str(caught.value)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2  # one line per failed attempt but the last
    assert not store.exists(KEY)
    assert _leftovers(store) == []  # no partial folder, no temporary copy left behind


def test_a_transient_fault_is_retried_until_the_copy_lands_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    source = _checkpoint(tmp_path / "ckpt")
    # The store's folder cannot be created (a file is in the way) until the fault clears.
    blocker = store.root / "runs" / "r1"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("in the way")
    with pytest.raises(BlobError):
        upload_dir(store, source, KEY, attempts=2, delay=0.01)
    assert blocker.is_file() and not store.exists(KEY)

    clear = threading.Timer(0.3, blocker.unlink)
    clear.start()
    try:
        with caplog.at_level(logging.WARNING, "rollout.blobs"):
            uri = upload_dir(store, source, KEY, attempts=6, delay=0.1)
    finally:
        clear.join()
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert uri == str(store.path(KEY))
    assert store.folder_sizes(KEY) == {"adapter_config.json": 12, "sub/weights.bin": 256 * 64}
    assert _leftovers(store) == ["v000001-e1"]


def test_upload_dir_refuses_a_missing_source_without_retrying(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    with pytest.raises(BlobError, match="does not exist"):
        upload_dir(store, tmp_path / "nothing", KEY, attempts=5, delay=10.0)
    with pytest.raises(BlobError, match="attempts must be >= 1, got 0"):
        upload_dir(store, tmp_path, KEY, attempts=0)

"""The blob store: a local folder for real, and S3 against moto's S3 server on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.blobs import MARKER, BlobError, BlobNotFound, BlobStore, LocalBlobStore, S3BlobStore


def _checkpoint(folder: Path, tag: str) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "adapter_config.json").write_text(f'{{"tag": "{tag}"}}')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    return folder


def _roundtrip(store: BlobStore, tmp_path: Path) -> None:
    """Behaviour both backends share."""
    source = _checkpoint(tmp_path / "ckpt", "a")
    key = "runs/r1/checkpoints/v000001"
    assert not store.exists(key)
    uri = store.put_dir(source, key)
    assert store.exists(key) and store.exists(uri)
    out = store.get_dir(key, tmp_path / "restored")
    assert (out / "adapter_config.json").read_text() == '{"tag": "a"}'
    assert (out / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert store.get_dir(uri, tmp_path / "by-uri").joinpath("sub", "weights.bin").exists()
    linked = store.get_dir(key, tmp_path / "linked", link=True)  # a reader's: links or copies
    assert (linked / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert store.list("runs/r1") == [
        f"{key}/adapter_config.json",
        f"{key}/sub/weights.bin",
    ]

    # Replacing a folder leaves only the new files.
    replacement = tmp_path / "ckpt2"
    replacement.mkdir()
    (replacement / "adapter_config.json").write_text('{"tag": "b"}')
    store.put_dir(replacement, key)
    again = store.get_dir(key, tmp_path / "restored2")
    assert (again / "adapter_config.json").read_text() == '{"tag": "b"}'

    store.put_bytes(b"hello", "notes/a.txt")
    assert store.read_bytes("notes/a.txt") == b"hello"
    with store.open("notes/a.txt") as handle:
        assert handle.read() == b"hello"
    file = tmp_path / "f.bin"
    file.write_bytes(b"\x00\x01")
    store.put_file(file, "notes/f.bin")
    assert store.get_file("notes/f.bin", tmp_path / "g" / "f.bin").read_bytes() == b"\x00\x01"
    assert store.exists("notes/f.bin")

    # Deleting frees the bytes and leaves nothing behind; a missing key frees none.
    assert store.delete(key) >= len('{"tag": "b"}')
    assert not store.exists(key) and store.list("runs/r1") == []
    assert store.delete("notes/a.txt") == 5 and not store.exists("notes/a.txt")
    assert store.delete("nothing/here") == 0

    assert not store.exists("nothing/here")
    with pytest.raises(BlobNotFound):
        store.read_bytes("nothing/here")
    with pytest.raises(BlobNotFound):
        store.get_dir("nothing/here", tmp_path / "x")
    with pytest.raises(BlobError, match="'rb'"):
        store.open("notes/a.txt", "wb")
    with pytest.raises(BlobError, match=r"'\.\.'"):
        store.exists("../escape")


def test_local_store(tmp_path: Path) -> None:
    store = BlobStore.from_url(str(tmp_path / "blobs"))
    assert isinstance(store, LocalBlobStore)
    _roundtrip(store, tmp_path)
    # No temporary files are left behind.
    leftovers = [p for p in (tmp_path / "blobs").rglob(".*tmp-*")]
    assert leftovers == []


def test_local_put_dir_is_atomic(tmp_path: Path) -> None:
    store = BlobStore.from_url(f"file://{tmp_path / 'blobs'}")
    source = _checkpoint(tmp_path / "ckpt", "a")
    (source / "zz-dangling").symlink_to(tmp_path / "missing")  # copying fails after the rest
    with pytest.raises(shutil.Error):
        store.put_dir(source, "ckpt")
    assert not store.exists("ckpt")  # a failed write leaves nothing at the key
    assert list((tmp_path / "blobs").iterdir()) == []


def test_local_store_moves_and_links_instead_of_copying(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    source = _checkpoint(tmp_path / "ckpt", "a")
    inode = (source / "sub" / "weights.bin").stat().st_ino
    store.put_dir(source, "runs/r1/c", move=True)
    assert not source.exists()  # given away: renamed into the store, not copied
    stored = store.path("runs/r1/c")
    assert (stored / "sub" / "weights.bin").stat().st_ino == inode

    read = store.get_dir("runs/r1/c", tmp_path / "read", link=True)
    assert (read / "sub" / "weights.bin").stat().st_ino == inode
    assert (read / "sub" / "weights.bin").stat().st_nlink == 2
    assert store.local_folder("runs/r1/c") == stored
    # A reader that replaces a file (written aside, renamed) leaves the blob as it was.
    (read / "new").write_text("changed")
    os.replace(read / "new", read / "adapter_config.json")
    assert (stored / "adapter_config.json").read_text() == '{"tag": "a"}'
    # Linking again over a folder replaces its files by links, never writes through them.
    store.get_dir("runs/r1/c", read, link=True)
    assert (read / "adapter_config.json").read_text() == '{"tag": "a"}'
    # Without `link` a reader gets copies of its own.
    copied = store.get_dir("runs/r1/c", tmp_path / "copied")
    assert (copied / "sub" / "weights.bin").stat().st_ino != inode
    with pytest.raises(BlobNotFound):
        store.local_folder("runs/r1/none")
    scratch = store.scratch_dir()
    assert scratch is not None and scratch.parent == store.root
    assert store.list("") == ["runs/r1/c/adapter_config.json", "runs/r1/c/sub/weights.bin"]


def test_local_store_copies_across_file_systems(tmp_path: Path) -> None:
    """A folder given away from another file system (here /dev/shm's tmpfs) is copied; so are
    files linked into one."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a second file system at /dev/shm")
    store = LocalBlobStore(str(tmp_path / "blobs"))
    other = Path(tempfile.mkdtemp(dir=shm))
    try:
        source = _checkpoint(other / "ckpt", "a")
        store.put_dir(source, "c", move=True)
        assert (store.path("c") / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 64
        read = store.get_dir("c", other / "read", link=True)
        assert (read / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 64
        assert (read / "sub" / "weights.bin").stat().st_dev == shm.stat().st_dev
    finally:
        shutil.rmtree(other)


def test_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ROLLOUT_BLOB_URL", raising=False)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    store = BlobStore.from_url()
    assert isinstance(store, LocalBlobStore) and store.root == tmp_path / "state" / "blobs"
    monkeypatch.setenv("ROLLOUT_BLOB_URL", "s3://bucket/prefix")
    assert isinstance(BlobStore.from_url(), S3BlobStore)
    with pytest.raises(BlobError, match="'gs'"):
        BlobStore.from_url("gs://bucket/x")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on loopback (a fake of the hosted service, which cannot run here)."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_store(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3BlobStore:
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"b{_free_port()}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    store = BlobStore.from_url(f"s3://{bucket}/rollout?endpoint_url={s3_endpoint}")
    assert isinstance(store, S3BlobStore)
    return store


@pytest.mark.slow  # starting moto's server takes a few seconds
def test_s3_store(s3_store: S3BlobStore, tmp_path: Path) -> None:
    _roundtrip(s3_store, tmp_path)
    assert s3_store.uri("a/b").startswith(f"s3://{s3_store.bucket}/rollout/a/b")


def test_s3_folder_without_marker_does_not_exist(s3_store: S3BlobStore, tmp_path: Path) -> None:
    # A writer that died after uploading files but before the marker.
    s3_store.put_bytes(b"partial", "ckpt/model.safetensors")
    assert not s3_store.exists("ckpt")
    with pytest.raises(BlobNotFound, match="no complete folder"):
        s3_store.get_dir("ckpt", tmp_path / "out")
    s3_store.put_dir(_checkpoint(tmp_path / "src", "a"), "ckpt")
    assert s3_store.exists("ckpt")
    assert s3_store.fs.exists(f"{s3_store.path('ckpt')}/{MARKER}")
    # The manifest lists what was put, so stray objects are not downloaded.
    restored = s3_store.get_dir("ckpt", tmp_path / "restored")
    assert not (restored / "model.safetensors").exists()


def test_s3_endpoint_from_environment(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    store = BlobStore.from_url("s3://bucket/p")
    assert isinstance(store, S3BlobStore) and store.endpoint_url == s3_endpoint

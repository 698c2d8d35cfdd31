"""The blob store: checkpoints and other large files, in a local folder or on S3.

`BlobStore.from_url(url)` picks the backend:

- a folder path or `file://` URL (default: ROLLOUT_BLOB_URL, else `<state_dir>/blobs`);
- `s3://bucket/prefix` for S3 or any S3-compatible service (through fsspec/s3fs). The endpoint
  comes from the URL's `endpoint_url` query parameter (`s3://b/p?endpoint_url=http://host:9000`)
  or AWS_ENDPOINT_URL; credentials from the usual AWS environment variables.

Keys are paths relative to the store's root (`runs/abc/checkpoints/v000001`); a full URI
(`s3://...`, `file://...`, or an absolute path) is accepted wherever a key is and used as is.

Writes are atomic, so a reader never sees half a blob:

- a local file or folder is written under a temporary name beside its target, then renamed;
- on S3 a single object appears whole when its upload ends; a folder's files are uploaded first
  and its marker object `<key>/.rollout-complete` (a JSON manifest of the files) last. A folder
  without its marker does not exist as far as `exists` and `get_dir` are concerned.

A local store copies nothing it need not: `put_dir(..., move=True)` renames a folder the
caller gives away into place, and `get_dir(..., link=True)` hard-links the files of a reader that
never writes them (both fall back to copies across file systems). A blob is never changed once
written, so a link is as good as a copy.

A failed write (disk full, an S3 error: s3fs raises them as `OSError`s) leaves nothing at the
key; `upload_dir` retries it a bounded number of times with backoff and checks what landed
against the local folder (`folder_sizes`) before it returns, so a caller that records the URI
afterwards (the trainer's checkpoint record) never points at a missing or partial folder.

All methods are synchronous (blocking I/O); call them through `asyncio.to_thread` in async code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from rollout.errors import RolloutError
from rollout.settings import BLOB_SCHEMES, get_settings
from rollout.settings import state_dir as resolve_state_dir

MARKER = ".rollout-complete"
UPLOAD_ATTEMPTS = 4
"""Attempts `upload_dir` makes by default (waiting 0.5, 1, 2 s between them)."""
SCRATCH = ".scratch"
"""A local store's folder for temporary files (`LocalBlobStore.scratch_dir`)."""

log = logging.getLogger("rollout.blobs")


class BlobError(RolloutError):
    """A blob store failure (the message names the key or URL)."""


class BlobNotFound(BlobError, FileNotFoundError):
    """No blob (or no complete folder) at that key."""


def default_blob_url(state_dir: str | os.PathLike[str] | None = None) -> str:
    """`<state_dir>/blobs` when `state_dir` is given, else the settings' blob URL
    (ROLLOUT_BLOB_URL, else `<state>/blobs`)."""
    if state_dir is not None:
        return str(resolve_state_dir(state_dir) / "blobs")
    return get_settings().blob_url


class BlobStore:
    """A local folder or an S3 prefix holding files and folders under keys."""

    url: str
    """The store's root, as given to `from_url`."""

    def __init__(self, url: str) -> None:
        self.url = url

    @classmethod
    def from_url(cls, url: str | None = None) -> BlobStore:
        """The store at `url` (default: ROLLOUT_BLOB_URL, else `<state_dir>/blobs`)."""
        chosen = url or default_blob_url()
        scheme = urlsplit(chosen).scheme
        if scheme in BLOB_SCHEMES and scheme.startswith("s3"):
            return S3BlobStore(chosen)
        if scheme in BLOB_SCHEMES or (len(scheme) == 1 and os.name == "nt"):
            return LocalBlobStore(chosen)
        raise BlobError(f"blob store URL {chosen!r} has an unsupported scheme {scheme!r}")

    def check_writable(self) -> None:
        """Raise `BlobError` (one line naming the URL) when files cannot be written here; a
        local folder is created if needed. S3 is not probed (its errors come with each write)."""

    # The interface; both backends implement every method.

    def uri(self, key: str) -> str:
        """The full URI of `key` (what to store in the ledger)."""
        raise NotImplementedError

    def put_bytes(self, data: bytes, key: str) -> str:
        """Write `data` at `key` atomically; returns its URI."""
        raise NotImplementedError

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> str:
        """Copy a local file to `key` atomically; returns its URI."""
        raise NotImplementedError

    def put_dir(self, local_dir: str | os.PathLike[str], key: str, *, move: bool = False) -> str:
        """Copy a local folder (for example a checkpoint) to `key` atomically; returns its URI.

        Writing to a key that exists replaces it. `move`: the caller gives the folder away (it
        would delete it next): a store on the same file system renames it into place instead of
        copying its files, and the folder is gone afterwards.
        """
        raise NotImplementedError

    def get_dir(self, key: str, local_dir: str | os.PathLike[str], *, link: bool = False) -> Path:
        """Copy the folder at `key` into `local_dir` (created; existing files are overwritten).

        `link`: the caller only reads the files, never writes them in place: a store on the same
        file system hard-links them instead of copying (a blob is never changed once written, so
        a link is as good as a copy; a file replaced by rename leaves the blob as it was).
        """
        raise NotImplementedError

    def get_file(self, key: str, local_path: str | os.PathLike[str]) -> Path:
        """Copy the file at `key` to `local_path`."""
        raise NotImplementedError

    def local_folder(self, key: str) -> Path | None:
        """The folder at `key` on this machine, to read in place (never to write); None for a
        store that is not a local folder (copy it with `get_dir`).

        Raises:
            BlobNotFound: A local store has no folder at `key`.
        """
        return None

    def scratch_dir(self) -> Path | None:
        """A folder for temporary files on the store's own file system, so that a folder made
        there goes in with `put_dir(..., move=True)` by a rename; None: the system's default."""
        return None

    def folder_sizes(self, key: str) -> dict[str, int]:
        """The complete folder at `key`: relative path -> size of each file.

        Raises:
            BlobNotFound: no complete folder at `key`.
        """
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as handle:
            return handle.read()

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        """Open the file at `key` for reading (mode 'rb' only: writes go through put_*)."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        """True if `key` is a file, or a folder whose atomic write completed."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """Keys of the files under `prefix` (recursively), relative to the root, sorted."""
        raise NotImplementedError

    def delete(self, key: str) -> int:
        """Remove the file or folder at `key` (a missing one is no error); return bytes freed."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _check_read_mode(mode: str) -> None:
    if mode not in ("rb", "r"):
        raise BlobError(f"open mode must be 'rb' (writes go through put_*), got {mode!r}")


def _check_key(key: str) -> None:
    if ".." in Path(key).parts:
        raise BlobError(f"key must not contain '..', got {key!r}")


class LocalBlobStore(BlobStore):
    """Blobs in a local folder; atomic by write-then-rename in the same folder."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        path = url[len("file://") :] if url.startswith("file://") else url
        self.root = Path(path).expanduser().resolve()

    def path(self, key: str) -> Path:
        """The local path of `key` (a relative key, a `file://` URI or an absolute path)."""
        if key.startswith("file://"):
            return Path(key[len("file://") :])
        if "://" in key:
            raise BlobError(f"a local blob store cannot read {key!r}")
        if os.path.isabs(key):
            return Path(key)
        _check_key(key)
        return self.root / key

    def uri(self, key: str) -> str:
        return str(self.path(key))

    def check_writable(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self._temp_beside(self.root / "probe")
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise BlobError(
                f"cannot write blobs to {self.url!r} ({error.strerror or error}: "
                f"{error.filename}); set ROLLOUT_BLOB_URL to a writable folder or s3:// URL"
            ) from None

    def _temp_beside(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"

    def put_bytes(self, data: bytes, key: str) -> str:
        target = self.path(key)
        temp = self._temp_beside(target)
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
        return str(target)

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> str:
        source = Path(local_path)
        if not source.is_file():
            raise BlobNotFound(f"local file {str(source)!r} does not exist")
        target = self.path(key)
        temp = self._temp_beside(target)
        try:
            shutil.copyfile(source, temp)
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
        return str(target)

    def put_dir(self, local_dir: str | os.PathLike[str], key: str, *, move: bool = False) -> str:
        source = Path(local_dir)
        if not source.is_dir():
            raise BlobNotFound(f"local folder {str(source)!r} does not exist")
        target = self.path(key)
        temp = self._temp_beside(target)
        try:
            if not (move and _renamed(source, temp)):
                shutil.copytree(source, temp)
            try:
                os.rename(temp, target)  # atomic when target does not exist
            except OSError:
                if not target.exists():
                    raise
                # Replace: move the old folder aside, move the new one in, drop the old one.
                old = self._temp_beside(target)
                os.rename(target, old)
                os.rename(temp, target)
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)
        return str(target)

    def get_dir(self, key: str, local_dir: str | os.PathLike[str], *, link: bool = False) -> Path:
        source = self.path(key)
        if not source.is_dir():
            raise BlobNotFound(f"no folder at {key!r} in {self.url}")
        destination = Path(local_dir)
        shutil.copytree(
            source,
            destination,
            dirs_exist_ok=True,
            copy_function=link_or_copy if link else shutil.copy2,
        )
        return destination

    def folder_sizes(self, key: str) -> dict[str, int]:
        source = self.path(key)
        if not source.is_dir():
            raise BlobNotFound(f"no folder at {key!r} in {self.url}")
        return _sizes(source)

    def get_file(self, key: str, local_path: str | os.PathLike[str]) -> Path:
        source = self.path(key)
        if not source.is_file():
            raise BlobNotFound(f"no file at {key!r} in {self.url}")
        destination = Path(local_path)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        return destination

    def local_folder(self, key: str) -> Path | None:
        source = self.path(key)
        if not source.is_dir():
            raise BlobNotFound(f"no folder at {key!r} in {self.url}")
        return source

    def scratch_dir(self) -> Path | None:
        scratch = self.root / SCRATCH  # a dot folder: never listed as blobs
        scratch.mkdir(parents=True, exist_ok=True)
        return scratch

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        _check_read_mode(mode)
        source = self.path(key)
        if not source.is_file():
            raise BlobNotFound(f"no file at {key!r} in {self.url}")
        return open(source, "rb")

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def delete(self, key: str) -> int:
        target = self.path(key)
        if target.is_file():
            size = target.stat().st_size
            target.unlink(missing_ok=True)
            return size
        if not target.is_dir():
            return 0
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        # Renamed aside first, so a reader never sees a half-deleted folder as complete.
        aside = self._temp_beside(target)
        try:
            os.rename(target, aside)
        except FileNotFoundError:
            return 0  # another process (the trainer, `rollout gc`) deleted it first
        shutil.rmtree(aside, ignore_errors=True)
        return size

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else self.root
        if base.is_file():
            return [base.relative_to(self.root).as_posix()]
        if not base.is_dir():
            return []
        keys = []
        for path in base.rglob("*"):
            relative = path.relative_to(self.root)
            if path.is_file() and not any(part.startswith(".") for part in relative.parts):
                keys.append(relative.as_posix())
        return sorted(keys)


class S3BlobStore(BlobStore):
    """Blobs under an S3 prefix (S3 or a compatible service) through s3fs."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.bucket = parts.netloc
        if not self.bucket:
            raise BlobError(f"S3 URL {url!r} names no bucket (expected s3://bucket/prefix)")
        self.prefix = parts.path.strip("/")
        endpoint = (query.get("endpoint_url") or query.get("endpoint") or [None])[0]
        self.endpoint_url = endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
        self._fs: Any = None

    @property
    def fs(self) -> Any:
        """The s3fs filesystem (created on first use)."""
        if self._fs is None:
            import s3fs

            client_kwargs: dict[str, Any] = {}
            if self.endpoint_url:
                client_kwargs["endpoint_url"] = self.endpoint_url
            # No listings cache: other processes write here too.
            self._fs = s3fs.S3FileSystem(
                client_kwargs=client_kwargs, skip_instance_cache=True, use_listings_cache=False
            )
        return self._fs

    def path(self, key: str) -> str:
        """`bucket/prefix/key` (what s3fs takes) for a key or a full `s3://` URI."""
        if key.startswith(("s3://", "s3a://")):
            return key.split("://", 1)[1].rstrip("/")
        if "://" in key:
            raise BlobError(f"an S3 blob store cannot read {key!r}")
        _check_key(key)
        parts = [self.bucket, self.prefix, key.strip("/")]
        return "/".join(part for part in parts if part)

    def uri(self, key: str) -> str:
        return "s3://" + self.path(key)

    def _relative(self, path: str) -> str:
        root = "/".join(part for part in (self.bucket, self.prefix) if part) + "/"
        return path[len(root) :] if path.startswith(root) else path

    def put_bytes(self, data: bytes, key: str) -> str:
        self.fs.pipe_file(self.path(key), data)  # one PUT: the object appears whole
        return self.uri(key)

    def put_file(self, local_path: str | os.PathLike[str], key: str) -> str:
        source = Path(local_path)
        if not source.is_file():
            raise BlobNotFound(f"local file {str(source)!r} does not exist")
        self.fs.put_file(str(source), self.path(key))
        return self.uri(key)

    def put_dir(self, local_dir: str | os.PathLike[str], key: str, *, move: bool = False) -> str:
        source = Path(local_dir)
        if not source.is_dir():
            raise BlobNotFound(f"local folder {str(source)!r} does not exist")
        target = self.path(key)
        marker = f"{target}/{MARKER}"
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(marker)  # a replaced folder is incomplete until its new marker
        files: list[dict[str, Any]] = []
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            relative = path.relative_to(source).as_posix()
            self.fs.put_file(str(path), f"{target}/{relative}")
            files.append({"path": relative, "size": path.stat().st_size})
        self.fs.pipe_file(marker, json.dumps({"files": files}).encode())
        return self.uri(key)

    def delete(self, key: str) -> int:
        target = self.path(key)
        if not self.fs.exists(target):
            return 0
        size = int(self.fs.du(target))
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(f"{target}/{MARKER}")  # incomplete (never half-read) from here on
        self.fs.rm(target, recursive=True)
        return size

    def _manifest(self, key: str) -> list[dict[str, Any]]:
        marker = f"{self.path(key)}/{MARKER}"
        try:
            data = self.fs.cat_file(marker)
        except FileNotFoundError:
            raise BlobNotFound(f"no complete folder at {key!r} in {self.url}") from None
        return list(json.loads(data)["files"])

    def folder_sizes(self, key: str) -> dict[str, int]:
        self._manifest(key)  # only a complete folder counts
        target = self.path(key)
        found = self.fs.find(target, detail=True)
        prefix = target + "/"
        return {
            path[len(prefix) :]: int(info["size"])
            for path, info in found.items()
            if path.startswith(prefix) and path.rsplit("/", 1)[-1] != MARKER
        }

    def get_dir(self, key: str, local_dir: str | os.PathLike[str], *, link: bool = False) -> Path:
        destination = Path(local_dir)
        destination.mkdir(parents=True, exist_ok=True)
        target = self.path(key)
        for entry in self._manifest(key):
            local = destination / entry["path"]
            local.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(f"{target}/{entry['path']}", str(local))
        return destination

    def get_file(self, key: str, local_path: str | os.PathLike[str]) -> Path:
        destination = Path(local_path)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fs.get_file(self.path(key), str(destination))
        except FileNotFoundError:
            raise BlobNotFound(f"no file at {key!r} in {self.url}") from None
        return destination

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        _check_read_mode(mode)
        try:
            return self.fs.open(self.path(key), "rb")
        except FileNotFoundError:
            raise BlobNotFound(f"no file at {key!r} in {self.url}") from None

    def read_bytes(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self.path(key)))
        except FileNotFoundError:
            raise BlobNotFound(f"no file at {key!r} in {self.url}") from None

    def exists(self, key: str) -> bool:
        path = self.path(key)
        if self.fs.exists(f"{path}/{MARKER}"):
            return True
        try:
            return bool(self.fs.isfile(path))
        except FileNotFoundError:
            return False

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else "/".join(p for p in (self.bucket, self.prefix) if p)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        return sorted(
            self._relative(path) for path in found if not path.rsplit("/", 1)[-1].startswith(".")
        )

    def iter_files(self, key: str) -> Iterator[str]:
        """The files of the complete folder at `key`, from its manifest."""
        for entry in self._manifest(key):
            yield str(entry["path"])


def _renamed(source: Path, target: Path) -> bool:
    """Rename `source` to `target`; False (nothing moved) when they are on different file
    systems or the rename is refused, so the caller copies instead."""
    try:
        os.rename(source, target)
    except OSError:
        return False
    return True


def link_or_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Hard-link `source` at `target`, or copy it where links cannot be made (another file
    system, one without links)."""
    try:
        if os.path.lexists(target):
            os.unlink(target)  # overwritten, as a copy would; a link must not write through
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _sizes(folder: Path) -> dict[str, int]:
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()
    }


def upload_dir(
    store: BlobStore,
    local_dir: str | os.PathLike[str],
    key: str,
    *,
    attempts: int = UPLOAD_ATTEMPTS,
    delay: float = 0.5,
    move: bool = False,
) -> str:
    """Copy a local folder to `key` and check it landed whole; retry failures with backoff.

    Each attempt is an atomic `put_dir` followed by a check that the folder at `key` has
    exactly the local files, each of the local size. A failed attempt logs one warning line
    and waits `delay` seconds, doubled after each attempt. Returns the URI once a copy checks.
    `move`: the caller gives the folder away (`BlobStore.put_dir`); it may be gone afterwards.

    Raises:
        BlobNotFound: `local_dir` is not a folder (not retried).
        BlobError: every attempt failed; the message names the key and the last error.
    """
    if attempts < 1:
        raise BlobError(f"attempts must be >= 1, got {attempts!r}")
    source = Path(local_dir)
    if not source.is_dir():
        raise BlobNotFound(f"local folder {str(source)!r} does not exist")
    expected = _sizes(source)
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            uri = store.put_dir(source, key, move=move)
            landed = store.folder_sizes(key)
            if landed == expected:
                return uri
            missing = sorted(set(expected) - set(landed))
            wrong = sorted(p for p in expected if p in landed and landed[p] != expected[p])
            last = BlobError(f"copy at {key!r} is incomplete (missing {missing}, size of {wrong})")
        except (OSError, BlobError) as error:
            last = error
        if attempt < attempts:
            log.warning(
                "upload of %r failed (attempt %d of %d: %s); retrying in %.1f s",
                key,
                attempt,
                attempts,
                last,
                delay,
            )
            time.sleep(delay)
            delay *= 2
    raise BlobError(f"upload of {key!r} to {store.url} failed {attempts} times; last: {last}")

"""The default tokenizer folder: what the scripted model and a renderer need, with no weights.

Importable without torch (only `tokenizers` and transformers' tokenizer classes), so that
`rollout run` against the scripted model, the gateway and the CLI load no model code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from rollout.models.tokenizer import build_tokenizer
from rollout.settings import state_dir as resolve_state_dir

DEFAULT_VOCAB_SIZE = 512
"""The vocabulary size of the default byte-level tokenizer (and of `init_model`'s)."""


def default_tokenizer_dir(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """A folder with the default tiny tokenizer and chat template, built once and cached.

    It holds no weights: it is what the scripted backend and the renderer need to run with
    nothing downloaded. The folder is `<state>/models/scripted`, where `<state>` is
    `state_dir`, else the settings' state folder (`rollout.settings`). It is
    rebuilt when the tokenizer recipe changes (a fingerprint file records which one built it)
    and written atomically, so concurrent callers never see a half-written folder.
    """
    target = resolve_state_dir(state_dir) / "models" / "scripted"
    fingerprint = recipe_fingerprint()
    stamp = target / "rollout-fingerprint.txt"
    if stamp.is_file() and stamp.read_text() == fingerprint:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".scripted-", dir=target.parent))
    try:
        build_tokenizer(vocab_size=DEFAULT_VOCAB_SIZE).save_pretrained(staging)
        (staging / "rollout-fingerprint.txt").write_text(fingerprint)
        if target.exists():
            # A stale build (older recipe): move it aside, then swap the new one in.
            stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=target.parent))
            with contextlib.suppress(OSError):  # another process moved it first
                target.rename(stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:
            # Another process installed its build first; theirs is identical.
            if not (stamp.is_file() and stamp.read_text() == fingerprint):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def recipe_fingerprint() -> str:
    """A hash of the sources that define the default tokenizer and template."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("tokenizer.py", "template.py"):
        digest.update((here / name).read_bytes())
    digest.update(json.dumps(DEFAULT_VOCAB_SIZE).encode())
    return digest.hexdigest()[:16]

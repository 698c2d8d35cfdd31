"""Token ids to text for the monitor's token view, with the run's own tokenizer.

A run's model (`RunSpec.model`) is a Hugging Face folder, or `scripted`, whose tokenizer lives
under the state folder's `models/scripted` (built by the first process that needed it; the
monitor only reads it). When the folder's `tokenizer.json` cannot be read (another machine's
path, a deleted folder, a config that is not a run spec), tokens are shown as ids.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from rollout.ledger import RunRecord
from rollout.settings import get_settings

log = logging.getLogger("rollout.monitor")


class Decoder:
    """Decodes ids with a tokenizer, or says it cannot (`tokenizer` None: ids only).

    Example:
        >>> Decoder(None, "ids only").pieces([1, 2]) is None
        True
    """

    def __init__(self, tokenizer: Tokenizer | None, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source
        """Where the tokenizer came from (a folder), or why there is none."""

    def pieces(self, ids: Sequence[int]) -> list[str] | None:
        """Each token's own text (special tokens included), or None without a tokenizer."""
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)

    def text(self, ids: Sequence[int]) -> str | None:
        if self.tokenizer is None:
            return None
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


def model_folder(record: RunRecord) -> Path | None:
    """The folder holding the run's tokenizer, or None when the run names none."""
    from rollout.runs.spec import RunSpec

    try:
        model = RunSpec.of(record).model
    except Exception:  # not a run spec (an old or foreign run): show ids
        return None
    if model == "scripted":
        return get_settings().models_dir / "scripted"
    return Path(model)


_LOADED: dict[str, Decoder] = {}


def _load(folder: str) -> Decoder:
    """A folder's decoder; loaded tokenizers are kept, failures retried (it may appear)."""
    if folder in _LOADED:
        return _LOADED[folder]
    path = Path(folder) / "tokenizer.json"
    try:
        decoder = Decoder(Tokenizer.from_file(str(path)), folder)
    except Exception as error:  # unreadable here: ids only, and say why
        log.info("no tokenizer at %s: %s", path, error)
        return Decoder(None, f"no readable tokenizer at {path}")
    if len(_LOADED) >= 32:
        _LOADED.clear()
    _LOADED[folder] = decoder
    return decoder


async def decoder_for(record: RunRecord) -> Decoder:
    """The run's decoder (loaded once per folder)."""
    folder = model_folder(record)
    if folder is None:
        return Decoder(None, "the run names no model")
    return await asyncio.to_thread(_load, str(folder))

"""Presets in the ledger: validating preset files, storing them, resolving `--preset NAME`.

`read_presets(folder)` reads and validates every `*.yaml` of a folder (a broken file raises one
line naming the file and the field); `store_presets` stores them in the ledger (idempotent);
`resolve_preset(name)` is what `--preset` means: a YAML path as it is, else the preset stored in
the ledger under that name, else the built-in one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import yaml

from rollout.errors import RolloutError
from rollout.ledger import COMMAND_WAIT_S, Ledger
from rollout.runs.config import RunConfig
from rollout.runs.presets import load_preset, parse_config


@dataclass(frozen=True)
class PresetFile:
    """A validated preset file: its name (the file's stem), body and parsed config."""

    name: str
    path: Path
    body: str
    config: RunConfig


def parse_preset(name: str, body: str, *, source: str) -> RunConfig:
    """Validate a preset's YAML body; errors name `source` and the field."""
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise RolloutError(f"{source}: not valid YAML{line}: {error}".splitlines()[0]) from None
    config = parse_config({} if data is None else data, source=source)
    if isinstance(data, dict) and "name" in data and data["name"] != name:
        raise RolloutError(
            f"{source}: name: {data['name']!r} differs from the preset's name {name!r} "
            "(the file name)"
        )
    return config


def read_presets(folder: Path) -> list[PresetFile]:
    """Every `*.yaml` preset in `folder`, validated (all of them, before anything is stored)."""
    if not folder.is_dir():
        raise RolloutError(f"preset folder {str(folder)!r} does not exist")
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise RolloutError(f"preset folder {str(folder)!r} has no *.yaml files")
    presets = []
    for path in files:
        body = path.read_text()
        presets.append(
            PresetFile(path.stem, path, body, parse_preset(path.stem, body, source=str(path)))
        )
    return presets


async def store_presets(ledger: Ledger, presets: list[PresetFile]) -> list[tuple[str, bool]]:
    """Store each preset; returns (name, stored) pairs: False where the body was already there."""
    return [
        (p.name, await ledger.store_preset(p.name, p.body, source=str(p.path))) for p in presets
    ]


async def resolve_preset(name_or_path: str, database_url: str | None = None) -> RunConfig:
    """`--preset`: a YAML path as it is; else the preset stored in the ledger under that name;
    else the built-in preset of that name."""
    stored = await asyncio.to_thread(stored_preset, name_or_path, database_url)
    return stored or load_preset(name_or_path)


def stored_preset(name_or_path: str, database_url: str | None = None) -> RunConfig | None:
    """The preset stored in the ledger under this name (`rollout preset load`), or None for a
    path or a name with none stored (then the built-in preset applies)."""
    if Path(name_or_path).suffix:
        return None

    async def find() -> RunConfig | None:
        ledger = await Ledger.connect(database_url, wait_s=COMMAND_WAIT_S)
        try:
            stored = await ledger.find_preset(name_or_path)
        finally:
            await ledger.close()
        if stored is None:
            return None
        return parse_preset(
            stored.name, stored.body, source=f"preset {stored.name!r} in the ledger"
        )

    return asyncio.run(find())

"""Presets: YAML files of `RunConfig` fields, built in or given by path.

The built-in presets live in `deploy/chart/rollout/files/presets/` (packaged as
`rollout/presets` in the wheel). `load_preset(name_or_path)` reads one; `parse_config(data,
source=...)` validates any mapping, raising one `InvalidPreset` that names each bad field and
its value. Presets stored in the ledger (`rollout preset load`) are resolved in
`rollout.launch.presets`.

Example:
    >>> parse_config({"steps": 5}, source="preset.yaml").steps
    5
    >>> parse_config(["steps"], source="preset.yaml")
    Traceback (most recent call last):
    ...
    rollout.runs.errors.InvalidPreset: preset.yaml: a preset must be a mapping, got list
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rollout.errors import problems
from rollout.runs.config import RunConfig
from rollout.runs.errors import InvalidPreset
from rollout.shipped import shipped_dir


def presets_dir() -> Path:
    """Where the built-in presets live (packaged with rollout, or in a source checkout)."""
    return shipped_dir("presets")


def load_preset(name_or_path: str) -> RunConfig:
    """A preset by name (built-in) or by path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = presets_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        available = sorted(p.stem for p in presets_dir().glob("*.yaml"))
        raise InvalidPreset(
            f"preset {name_or_path!r} not found (looked for {path}); built-in presets: "
            f"{', '.join(available) or 'none'}"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise InvalidPreset(f"preset {path} is not valid YAML: {error}") from error
    return parse_config(data, source=str(path))


def parse_config(data: Any, *, source: str) -> RunConfig:
    """Validate a preset's mapping; a problem raises one error naming each field and value."""
    if not isinstance(data, dict):
        raise InvalidPreset(f"{source}: a preset must be a mapping, got {type(data).__name__}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise InvalidPreset(f"{source}: invalid preset: {problems(error)}") from None

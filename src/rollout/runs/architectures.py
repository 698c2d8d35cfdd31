"""The architectures `rollout model init` builds tiny models of: the one list of their names.

This module imports nothing heavy, so run configs (`rollout.runs.config.ModelInit`) and the
command line can check an `arch` without loading torch; `models.tiny.ARCHITECTURES` maps each
name to its transformers classes.

>>> ARCH_NAMES
('qwen3', 'qwen2', 'llama')
>>> describe_names(ARCH_NAMES)
'qwen3, qwen2 or llama'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

Arch = Literal["qwen3", "qwen2", "llama"]
ARCH_NAMES: tuple[str, ...] = get_args(Arch)


def describe_names(names: Sequence[str]) -> str:
    """`a, b or c`: names as a sentence lists them."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"

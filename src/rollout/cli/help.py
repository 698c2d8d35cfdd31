"""Help text a person reads: value names like `TEXT` and `INTEGER`, no `<bool>` after flags and
no `{spec}` in usage lines.

Typer's own labels (`<str>`, `<int>`, `<bool>` after every flag, `{spec}` for a required
argument) read like code. `plain_help()` swaps the two methods that make them, once, for the
whole `rollout` command: a flag shows no value name, a value shows click's familiar name, an
argument shows its name in capitals (`SPEC`, `[NAME]` when optional).
tests/cli/test_help_and_version.py checks every command's help.

Example:
    >>> plain_label("<str>"), plain_label("<int>"), plain_label("<list[str]>")
    ('TEXT', 'INTEGER', 'TEXT')
    >>> plain_label("<a|b>")
    'a|b'
"""

from __future__ import annotations

from typing import Any

from typer import core

LABELS = {
    "str": "TEXT",
    "int": "INTEGER",
    "float": "FLOAT",
    "bool": "BOOLEAN",
    "Path": "PATH",
    "int range": "INTEGER",
    "float range": "FLOAT",
}


def plain_label(label: str) -> str:
    """Typer's `<type>` label as click names it (`TEXT`, `INTEGER`, ...); choices stay."""
    inner = label[1:-1] if label.startswith("<") and label.endswith(">") else label
    if inner.startswith("list[") and inner.endswith("]"):
        inner = inner[5:-1]
    return LABELS.get(inner, inner)


def plain_help() -> None:
    """Make every `rollout` help screen use plain value names (idempotent)."""
    parameter: Any = core._TyperParameter  # pyright: ignore[reportPrivateUsage]
    if getattr(parameter, "_rollout_plain", False):
        return
    typer_label = parameter.display_type

    def display_type(self: Any, ctx: Any) -> str:
        if getattr(self, "is_flag", False):
            return ""  # a flag takes no value
        return plain_label(typer_label(self, ctx))

    def usage_name(self: Any) -> str:
        name = self.metavar or self.name.upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    parameter.display_type = display_type
    core.TyperArgument._usage_display_name = usage_name  # pyright: ignore[reportPrivateUsage]
    parameter._rollout_plain = True

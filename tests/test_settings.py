"""Every `ROLLOUT_*` variable is read through `rollout.settings`, and named only there.

Outside `src/rollout/settings.py`, no module reads such a variable from the environment
(`os.environ[...]`, `.get`, `.pop`, `.setdefault`, `in os.environ`, `os.getenv`), whether it
spells the name or uses a constant, and no module spells a variable's name as a string of its own:
a child process is given a variable under the constant `rollout.settings` defines. A failure
names the file and line.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

import rollout.settings
from rollout.settings import Settings

ROOT = Path(__file__).resolve().parents[1] / "src" / "rollout"
SETTINGS = ROOT / "settings.py"
NAME = re.compile(r"ROLLOUT_[A-Z0-9_]+")
CONSTANTS = {
    name
    for name, value in vars(rollout.settings).items()
    if isinstance(value, str) and NAME.fullmatch(value)
}
"""The names of `rollout.settings`' variable constants (`DATABASE_URL_VAR`, ...)."""


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _is_variable(node: ast.expr | None) -> bool:
    """A `ROLLOUT_*` name, spelled out or as a settings constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return NAME.fullmatch(node.value) is not None
    if isinstance(node, ast.Name):
        return node.id in CONSTANTS
    return isinstance(node, ast.Attribute) and node.attr in CONSTANTS


def _read_key(node: ast.AST) -> ast.expr | None:
    """The key `node` reads from the environment, if it reads one."""
    if isinstance(node, ast.Call) and node.args:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in ("get", "pop", "setdefault") and _is_environ(func.value):
                return node.args[0]
            if func.attr == "getenv":
                return node.args[0]
        if isinstance(func, ast.Name) and func.id == "getenv":
            return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.slice if _is_environ(node.value) else None
    if not isinstance(node, ast.Compare):
        return None
    in_environ = isinstance(node.ops[0], ast.In | ast.NotIn) and _is_environ(node.comparators[0])
    return node.left if in_environ else None


def problems(path: Path) -> list[str]:
    """`file:line: what` for each read of a `ROLLOUT_*` variable and each name spelled out."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr):
            continue
        key = _read_key(node)
        if key is not None and _is_variable(key):
            found.append(f"{where}:{node.lineno}: reads {ast.unparse(key)} from the environment")
        elif isinstance(node, ast.Constant) and NAME.fullmatch(str(node.value)):
            found.append(f"{where}:{node.lineno}: names {node.value} (use rollout.settings)")
    return found


def test_rollout_variables_are_read_only_by_the_settings() -> None:
    found = [p for path in sorted(ROOT.rglob("*.py")) if path != SETTINGS for p in problems(path)]
    assert not found, "read these through rollout.settings.get_settings():\n" + "\n".join(found)


def test_the_check_sees_each_way_of_reading(tmp_path: Path) -> None:
    module = tmp_path / "reads.py"
    module.write_text(
        "import os\n"
        "from os import environ, getenv\n"
        "from rollout.settings import DATABASE_URL_VAR\n"
        "a = os.environ.get(DATABASE_URL_VAR)\n"
        "b = os.environ['ROLLOUT_X']\n"
        "c = getenv(DATABASE_URL_VAR)\n"
        "d = DATABASE_URL_VAR in environ\n"
        "e = {'ROLLOUT_ROLE': 'trainer'}\n"
        "f = os.environ.get('HOME')  # not ours\n"
        "g = 'set ROLLOUT_DATABASE_URL to use another server'  # prose\n"
    )
    lines = [int(problem.split(":")[1]) for problem in problems(module)]
    # b's name is both read (line 5) and spelled out; e's is spelled out.
    assert sorted(lines) == [4, 5, 5, 6, 7, 8]


def test_the_variables_other_modules_used_to_read_are_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rollout.inference.vllm_env import vllm_env_dir
    from rollout.launch.owner import Owner

    given = Settings.from_environ(
        {"ROLLOUT_VLLM_ENV": str(tmp_path), "ROLLOUT_MONITOR_TOKEN": "t", "ROLLOUT_OWNER_PID": "7"}
    )
    assert (given.vllm_env, given.monitor_token, given.owner_pid) == (tmp_path, "t", 7)
    unset = Settings.from_environ({"ROLLOUT_OWNER_PID": "not a pid"})
    assert (unset.vllm_env, unset.monitor_token, unset.owner_pid) == (None, None, None)
    # Read through get_settings(): a changed environment is read again.
    monkeypatch.setenv("ROLLOUT_VLLM_ENV", str(tmp_path / "vllm"))
    assert vllm_env_dir() == tmp_path / "vllm"
    monkeypatch.setenv("ROLLOUT_OWNER_PID", "12345")
    assert Owner.from_environment().pid == 12345
    assert "ROLLOUT_OWNER_PID" not in os.environ  # read once: grandchildren are not owned by it

"""The tests are organised by the concept they test: each folder of `tests/` is named after a
package of `src/rollout` (or a top-level folder of the repository: `docs`, `scripts`, `deploy`,
`environments`), and no test names a work item ("issue 10") instead of the behaviour."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGES = {
    p.stem
    for p in (ROOT / "src" / "rollout").iterdir()
    if (p / "__init__.py").is_file() or p.suffix == ".py"
}
"""The packages and top-level modules of `src/rollout` (`ledger`, `blobs`, ...)."""
REPOSITORY_FOLDERS = {"docs", "scripts", "deploy", "environments"}
WORK_ITEM = re.compile(r"(?<![a-z])(issue|work item)[ _-]?#?\d+", re.IGNORECASE)


def work_items(source: str, name: str) -> list[str]:
    """Where a test module names a work item: its docstrings, test names and comments."""
    found: list[str] = []
    for number, line in enumerate(source.splitlines(), 1):
        if WORK_ITEM.search(line):
            found.append(f"{name}:{number}: {line.strip()}")
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and WORK_ITEM.search(node.name):
            found.append(f"{name}:{node.lineno}: test named {node.name}")
    return found


def test_every_test_folder_is_a_package_or_a_repository_folder() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith("__")}
    strays = sorted(folders - PACKAGES - REPOSITORY_FOLDERS)
    assert not strays, f"test folders that mirror nothing in src/rollout: {strays}"


def test_no_test_names_a_work_item() -> None:
    found = [
        hit
        for path in sorted([*TESTS.rglob("*.py"), *(ROOT / "packages").rglob("tests/**/*.py")])
        if path != Path(__file__).resolve()
        for hit in work_items(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, "\n".join(found)


def test_the_work_item_check_finds_them() -> None:
    source = '"""Issue 10, runs you can stop."""\n\ndef test_issue_12_works():\n    pass\n'
    assert [hit.split(":")[1] for hit in work_items(source, "t.py")] == ["1", "3", "3"]
    assert work_items('"""Ctrl-C stops every role."""\n', "t.py") == []

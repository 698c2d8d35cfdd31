"""Run every ```python block of the README and of docs/rolloutlib.md.

Blocks of one file run in order in one namespace, like a notebook, so later blocks may use
earlier definitions. Top-level `await` is allowed. A block directly preceded by the line
`<!-- no-test -->` is skipped (none are, at the time of writing).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parents[1]
DOCUMENTS = {
    "README.md": PACKAGE / "README.md",
    "docs/rolloutlib.md": ROOT / "docs" / "rolloutlib.md",
}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SKIP = "<!-- no-test -->"


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(line number, code, skipped) for each ```python block."""
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip().splitlines()
        skipped = bool(before) and before[-1].strip() == SKIP
        blocks.append((line, match.group(2), skipped))
    return blocks


def test_block_extraction():
    text = "a\n```python\nx = 1\n```\n<!-- no-test -->\n```python\nboom()\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n", False), (6, "boom()\n", True)]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_document_code_blocks_run(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    path = DOCUMENTS[name]
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    assert len(blocks) >= 5, f"{name} should show its API with examples"
    monkeypatch.chdir(tmp_path)  # examples may write files
    # Examples load local files only: forbid Hub access for this test.
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    ran = 0
    for line, code, skipped in blocks:
        if skipped:
            continue
        compiled = compile(
            code, f"{name}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        try:
            result = eval(compiled, namespace)
            if inspect.iscoroutine(result):
                asyncio.run(result)
        except Exception as exc:
            exc.add_note(f"in the python block at {name} line {line}")
            raise
        ran += 1
    assert ran == sum(1 for _, _, skipped in blocks if not skipped)
    capsys.readouterr()

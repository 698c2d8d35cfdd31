"""docs/gateway.md's Python examples run against this test's own database and state folder.

(tests/docs/test_examples.py runs every page too; this runs the gateway page hermetically.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
FENCE = re.compile(r"(<!-- no-test -->\s*)?```(\w+)\n(.*?)```", re.DOTALL)


def python_blocks() -> list[str]:
    return [
        body
        for skip, lang, body in FENCE.findall(PAGE.read_text())
        if lang == "python" and not skip
    ]


def test_gateway_page_examples_run(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path))
    blocks = python_blocks()
    assert len(blocks) == 2
    namespace: dict[str, object] = {"__name__": "docs_gateway"}
    for code in blocks:
        exec(compile(code, str(PAGE), "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["42", "42", "42"]
    assert out[-1].endswith("/v1 4")

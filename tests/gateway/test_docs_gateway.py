"""docs/gateway.md's Python examples run against this test's own database and state folder.

(tests/docs/test_examples.py runs every page too; this runs the gateway page hermetically.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import blocks as page_blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def python_blocks() -> list[str]:
    return page_blocks(PAGE, "python")


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

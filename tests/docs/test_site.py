"""The documentation site: the API reference is current, the pages follow the docs rules, and
rolloutlib's documented development command works as written.

`uv run --group docs mkdocs build --strict` itself runs in `.ci/run` (the docs group is not part
of the default sync).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDE = DOCS / "getting-started.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "generate_reference", ROOT / "scripts" / "generate_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_current(tmp_path: Path) -> None:
    written = _generator().write(tmp_path)
    fresh = {path.name: path.read_text() for path in written}
    committed = {path.name: path.read_text() for path in (DOCS / "reference").glob("*.md")}
    stale = sorted(
        name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name)
    )
    assert not stale, (
        f"docs/reference is out of date ({', '.join(stale)}): "
        "run `uv run python scripts/generate_reference.py`"
    )


def test_the_reference_shows_signatures_and_docstrings(tmp_path: Path) -> None:
    pages = _generator().pages()
    ledger = pages["rollout.ledger.md"]
    assert "## `rollout.ledger`" in ledger
    assert "### `Ledger`" in ledger
    errors = pages["rollout.errors.md"]
    assert "class RolloutError(Exception)" in errors
    assert "[`rolloutlib.spaces`](rolloutlib.spaces.md)" in pages["index.md"]
    assert not any("._" in name for name in pages), "private modules are left out"


def _nav_files(entries: list) -> list[str]:
    files = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files += _nav_files(value) if isinstance(value, list) else [value]
    return files


def test_every_page_in_the_nav_exists_and_every_new_page_is_in_it() -> None:
    config = yaml.safe_load(re.sub(r"!!python/name:\S+", "null", (ROOT / "mkdocs.yml").read_text()))
    files = _nav_files(config["nav"])
    assert [name for name in files if not (DOCS / name).is_file()] == []
    assert [page for page in SITE_PAGES if page not in files] == []


SITE_PAGES = [
    "index.md",
    "start-here.md",
    "first-episode.md",
    "laptop.md",
    "agents.md",
    "write-an-environment.md",
    "guarantees.md",
    "presets.md",
    "getting-started.md",
]
FENCE = re.compile(r"(<!-- no-test -->\s*)?```(\w+)\n(.*?)```", re.DOTALL)


def test_skipped_blocks_say_why() -> None:
    """A `<!-- no-test -->` block in the site's own pages is introduced by the reason."""
    for name in SITE_PAGES:
        text = (DOCS / name).read_text()
        for match in re.finditer(r"<!-- no-test -->", text):
            before = text[max(0, match.start() - 300) : match.start()]
            assert "not run by the tests" in " ".join(before.lower().split()), (
                f"{name}: the no-test block at character {match.start()} does not say why"
            )


def test_every_block_of_the_site_pages_runs_or_says_why_not() -> None:
    """Python and `uv run rollout` console blocks run in tests/docs/test_examples.py; mermaid
    blocks are pictures; anything else must be marked `<!-- no-test -->`."""
    for name in SITE_PAGES:
        for skip, language, body in FENCE.findall((DOCS / name).read_text()):
            if skip or language in ("python", "mermaid"):
                continue
            assert language == "console", f"{name}: a {language} block is neither run nor marked"
            lines = [line for line in body.splitlines() if line.strip()]
            assert all(line.startswith("uv run rollout ") for line in lines), (
                f"{name}: a console block runs something tests/docs/test_examples.py does not: "
                f"{lines}"
            )


def test_rolloutlibs_documented_lint_command_works_as_written() -> None:
    development = GUIDE.read_text().split("## Development", 1)[1]
    lines = [
        line
        for skip, _, body in FENCE.findall(development)
        for line in body.splitlines()
        if line.startswith("uv run ruff check")
    ]
    assert lines == ["uv run ruff check rolloutlib tests"]
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH"
    result = subprocess.run(
        [uv, *shlex.split(lines[0])[1:]],
        cwd=ROOT / "packages" / "rolloutlib",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_links_the_beginners_path_first() -> None:
    links = re.findall(r"\]\((docs/[\w-]+\.md)", (ROOT / "README.md").read_text())
    assert links[:4] == [
        "docs/deploy.md",  # the overview's pointer, then the path a newcomer follows
        "docs/start-here.md",
        "docs/first-episode.md",
        "docs/laptop.md",
    ], links[:4]

"""Every code example in README.md, CONTRIBUTING.md and docs/ runs here.

- ```python blocks are executed in order, one namespace per page.
- ```console lines of the form `uv run rollout ...` run through the real CLI entry point, with
  `RUN` and `EPISODE` replaced by a run and an episode this test creates. Long-running commands
  (`train`, `up`, `playground`, `gateway`, `sandboxes serve`) are exercised by their own
  end-to-end tests and are only checked to parse here (`--help`).
- A block preceded by `<!-- no-test: REASON -->` is skipped (a cluster, CI itself, an
  interactive agent CLI, or another test runs it); `tests/docs/test_site.py` checks that every
  other block is run or validated, and that every skip gives its reason.

docs/rolloutlib.md and packages/rolloutlib/README.md are run by rolloutlib's own tests, and the
python blocks of docs/gateway.md by tests/gateway/test_docs_gateway.py (against their own
database). docs/architecture.md's table of layers must match tests/test_layers.py, and every
place its table of concepts names must exist.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from pathlib import Path

import pytest

from tests.cli_helpers import rollout
from tests.docs.blocks import PAGES as ALL_PAGES
from tests.docs.blocks import ROOT, blocks

PAGES = [p for p in ALL_PAGES if p.name != "rolloutlib.md"]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LONG_RUNNING = {"train", "up", "playground", "gateway", "inference", "trainer", "runner", "bridge"}
LONG_RUNNING |= {"monitor", "evaluator"}
LONG_RUNNING_SUBCOMMANDS = [["sandboxes", "serve"]]


def test_there_are_examples() -> None:
    assert blocks(ROOT / "README.md", "python")
    assert blocks(ROOT / "README.md", "console")


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "gateway.md"], ids=lambda p: p.name)
def test_python_examples_run(
    page: Path, monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for code in blocks(page, "python"):
        exec(compile(code, str(page), "exec"), namespace)


def test_readme_task_plays_against_the_scripted_model() -> None:
    """The README's Arithmetic task, wrapped in an Environment, passes `env check`."""
    namespace: dict[str, object] = {"__name__": "docs_readme"}
    for code in blocks(ROOT / "README.md", "python"):
        exec(compile(code, "README.md", "exec"), namespace)
    from rollout.harness import Environment
    from rollout.harness.check import check_environment
    from rollout.inference.direct import DirectModel
    from rollout.inference.factory import load_model

    environment = Environment(
        name="readme-arithmetic",
        task=namespace["Arithmetic"],  # type: ignore[arg-type]
        parameters=[{"question": "What is 6 * 7?", "answer": "42"}],
    )
    renderer, backend = load_model("scripted")
    report = asyncio.run(check_environment(environment, DirectModel(renderer, backend).complete))
    assert report.ok and report.seats[0].result is not None
    assert report.seats[0].result.reward == 1.0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_console_examples_run(
    page: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    commands = [
        shlex.split(line.split("#", 1)[0])[3:]
        for body in blocks(page, "console")
        for line in body.splitlines()
        if line.startswith("uv run rollout ")
    ]
    if not commands:
        pytest.skip(f"{page.name} has no rollout commands")
    code, out, _ = rollout(capsys, "run", "arithmetic.environment:environment", "--json")
    assert code == 0
    outcome = json.loads(out)
    names = {"RUN": outcome["run_id"], "EPISODE": outcome["episode_id"]}
    for args in commands:
        args = [names.get(a, a) for a in args]
        if args[0] in LONG_RUNNING:
            args = [args[0], "--help"]
        elif args[:2] in LONG_RUNNING_SUBCOMMANDS:
            args = [*args[:2], "--help"]
        code, out, err = rollout(capsys, *args)
        assert code == 0, f"`rollout {' '.join(args)}` exited {code}: {err or out}"


def _section(page: Path, title: str) -> str:
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_architecture_shows_the_layers_that_test_layers_enforces() -> None:
    from tests.test_layers import LAYERS

    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", _section(ARCHITECTURE, "Layers"), re.M)
    shown = {name: int(layer) for layer, names in rows for name in re.findall(r"`(\w+)`", names)}
    assert shown == LAYERS


def test_architecture_names_only_places_that_exist() -> None:
    lines = _section(ARCHITECTURE, "Where each concept lives").splitlines()
    table = "\n".join(line for line in lines if line.startswith("|"))
    places = re.findall(r"`([\w/]+(?:\.py|/))`", table)
    assert len(places) > 30
    missing = [place for place in places if not (ROOT / "src" / "rollout" / place).exists()]
    assert not missing, f"docs/architecture.md names places that do not exist: {missing}"

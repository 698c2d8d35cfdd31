"""Every docstring example (`>>>`) in `src/rollout` runs here, one test per module that has any.

Modules are found by a text scan first, so only those with examples are imported. An example
that cannot run here (it needs a live server) carries `# doctest: +SKIP`, and the prose around it
says why and where it is tested instead.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "rollout"


def modules_with_examples() -> list[str]:
    """Dotted names of the modules under src/rollout whose source holds a `>>>` prompt."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" not in path.read_text():
            continue
        parts = path.relative_to(SRC).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = modules_with_examples()


def test_the_scan_finds_the_examples() -> None:
    assert "rollout.training.advantages" in MODULES and "rollout.settings" in MODULES
    assert len(MODULES) >= 10


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no docstring example doctest can find"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(report)

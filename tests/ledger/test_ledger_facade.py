"""The `Ledger` facade: its documented example runs, each method is defined once and used."""

from __future__ import annotations

import doctest
import inspect
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest

from rollout.ledger import Ledger
from rollout.ledger.connection import LedgerConnection

ROOT = Path(__file__).resolve().parents[2]
# Methods every mixin may chain to with super() (resources opened and closed per concept).
CHAINED = {"close"}
# Methods with no caller outside the ledger's own tests, and why they stay.
UNCALLED = {
    "listen": "a follower that must not miss the first notification starts listening with it "
    "before its first query; the wake-up tests rely on it",
}


def _public_methods() -> dict[str, list[type]]:
    owners: dict[str, list[type]] = defaultdict(list)
    for cls in Ledger.__mro__:
        if cls is object:
            continue
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) or isinstance(value, classmethod):
                owners[name].append(cls)
    return owners


async def test_the_facade_example_runs(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Ledger`'s docstring example, skipped as a doctest (it needs a database), runs here."""
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    examples = doctest.DocTestParser().get_examples(Ledger.__doc__ or "")
    skipped = [e for e in examples if e.options.get(doctest.SKIP)]
    assert len(skipped) == 1 and skipped[0].source.startswith("asyncio.run(demo())")
    namespace: dict[str, object] = {}
    for example in examples:
        if example not in skipped:
            exec(compile(example.source, "<Ledger example>", "exec"), namespace)
    demo = cast(Callable[[], Awaitable[float]], namespace["demo"])
    assert repr(await demo()) == skipped[0].want.strip()


def test_each_method_is_defined_by_one_concept() -> None:
    twice = {
        name: [cls.__name__ for cls in owners]
        for name, owners in _public_methods().items()
        if len(owners) > 1 and name not in CHAINED
    }
    assert not twice, f"defined by more than one mixin: {twice}"
    assert Ledger.connect.__func__ is LedgerConnection.connect.__func__  # one way to connect


def test_every_method_has_a_caller_outside_the_ledger() -> None:
    """No unused methods: each is called by the platform, a benchmark, the docs, an environment
    or another component's tests (not only by the ledger's own tests)."""
    texts = []
    for folder in ("src", "benchmarks", "docs", "environments", "tests"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in {".py", ".md"} or not path.is_file():
                continue
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(("src/rollout/ledger/", "tests/ledger/")):
                continue
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    corpus = "\n".join(texts)
    uncalled = sorted(
        name
        for name in _public_methods()
        if name not in UNCALLED and name not in CHAINED and not re.search(rf"\.{name}\b", corpus)
    )
    assert not uncalled, f"Ledger methods nothing calls: {uncalled}"
    for name in UNCALLED:
        assert hasattr(Ledger, name), f"{name} is gone: drop it from UNCALLED"

"""The examples in rolloutlib's docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import rolloutlib

MODULES = sorted(
    info.name for info in pkgutil.walk_packages(rolloutlib.__path__, prefix="rolloutlib.")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_the_public_modules_have_examples():
    documented = {
        name
        for name in MODULES
        if doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS).attempted
    }
    expected = {
        "rolloutlib.core",
        "rolloutlib.graders",
        "rolloutlib.rollouts",
        "rolloutlib.datasets",
        "rolloutlib.evals.benchmarks",
        "rolloutlib.spaces.text",
        "rolloutlib.spaces.tools",
    }
    assert expected <= documented

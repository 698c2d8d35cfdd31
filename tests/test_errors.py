"""One exception root: every exception class the platform defines derives from `RolloutError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import rollout
from rollout.errors import RolloutError


def platform_modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(rollout.__path__, "rollout.")
        if not info.name.endswith("__main__")
    ]
    assert len(names) > 40  # the walk found the tree
    return names


def test_every_platform_exception_is_a_rollout_error() -> None:
    strays = []
    for name in platform_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            defined_here = value.__module__ == module.__name__
            is_error = issubclass(value, BaseException)
            if defined_here and is_error and not issubclass(value, RolloutError):
                strays.append(f"{value.__module__}.{value.__qualname__}")
    assert not strays, f"exceptions outside RolloutError: {strays}"

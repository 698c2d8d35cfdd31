"""Load an environment from `MODULE:ATTR`.

The attribute may be an `Environment`, a function returning one, or a rolloutlib `Env`/`AsyncEnv`
class or factory whose actions are text or chat messages (wrapped by `rollout.harness.adapter`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from rollout.harness.core import Environment
from rollout.harness.errors import EnvironmentLoadError


def load_environment(spec: str) -> Environment:
    """Import `MODULE:ATTR` and return the platform `Environment` it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise EnvironmentLoadError(
            f"environment must look like MODULE:ATTR (e.g. arithmetic.environment:environment), "
            f"got {spec!r}"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # let users name modules in the folder they run from
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise EnvironmentLoadError(f"cannot import module {module_name!r}: {error}") from error
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise EnvironmentLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    return as_environment(value, spec)


def as_environment(value: object, spec: str) -> Environment:
    if isinstance(value, Environment):
        return value
    from rollout.harness.adapter import is_rolloutlib_env_factory, rolloutlib_environment

    if is_rolloutlib_env_factory(value):
        assert callable(value)
        return rolloutlib_environment(value, name=spec.partition(":")[2])
    if callable(value) and not inspect.isclass(value):
        try:
            produced = value()
        except TypeError:
            produced = None
        if isinstance(produced, Environment):
            return produced
    raise EnvironmentLoadError(
        f"{spec} is {type(value).__name__}, not a rollout Environment (or a rolloutlib Env "
        f"class/factory with text or chat actions)"
    )

"""Load an environment from `MODULE:ATTR`.

The attribute may be an `Environment`, a function returning one, or a rolloutlib `Env`/`AsyncEnv`
class or factory whose actions are text or chat messages (wrapped by `rollout.harness.adapter`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
import traceback
from pathlib import Path

from rollout.harness.core import Environment, Task
from rollout.harness.errors import EnvironmentLoadError
from rollout.settings import find_state_dir

# Where a user's module did not go wrong: the platform, the standard library, installed
# packages, and generated code (`<frozen importlib...>`, a dataclass's `<string>` __init__).
_NOT_USER_CODE = (
    str(Path(__file__).resolve().parents[1]),
    *{sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")},
    "<",
)


def load_environment(spec: str) -> Environment:
    """Import `MODULE:ATTR` and return the platform `Environment` it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise EnvironmentLoadError(
            f"environment must look like MODULE:ATTR (e.g. arithmetic.environment:environment), "
            f"got {spec!r}"
        )
    # Users name modules in the folder they run from, or at their project's root (the folder of
    # its `.rollout` state, or its uv workspace) from any folder inside it.
    folders = [str(Path.cwd()), str(find_state_dir(Path.cwd()).parent)]
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        where = " and ".join(dict.fromkeys(folders))
        raise EnvironmentLoadError(
            f"cannot import module {module_name!r}: {error} (looked in {where} and the "
            "installed packages; run from the folder that holds it, or add that to PYTHONPATH)"
        ) from error
    except Exception as error:  # the module itself raised (a bad Environment(...), a typo)
        raise EnvironmentLoadError(
            f"importing module {module_name!r} raised {type(error).__name__}"
            f"{_where(error)}: {' '.join(str(error).split())}"
        ) from error
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise EnvironmentLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    return as_environment(value, spec)


def _where(error: BaseException) -> str:
    """` at FILE:LINE` of the innermost frame in the user's code, or ''."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [frame for frame in frames if not frame.filename.startswith(_NOT_USER_CODE)]
    if not outside:
        return ""
    frame = outside[-1]
    return f" at {frame.filename}:{frame.lineno}"


def as_environment(value: object, spec: str) -> Environment:
    """`value` as a platform `Environment` (see the module docstring), named `spec` in errors."""
    if isinstance(value, Environment):
        return value
    from rollout.harness.adapter import is_rolloutlib_env_factory, rolloutlib_environment

    if is_rolloutlib_env_factory(value):
        assert callable(value)
        return rolloutlib_environment(value, name=spec.partition(":")[2])
    if callable(value) and not inspect.isclass(value):
        try:
            produced = value()
        except TypeError:  # a callable that needs arguments is not an environment factory
            produced = None
        except EnvironmentLoadError:
            raise
        except Exception as error:
            raise EnvironmentLoadError(
                f"{spec}() raised {type(error).__name__}{_where(error)}: "
                f"{' '.join(str(error).split())}"
            ) from error
        if isinstance(produced, Environment):
            return produced
    if inspect.isclass(value) and issubclass(value, Task):
        module = spec.partition(":")[0]
        raise EnvironmentLoadError(
            f"{spec} is a Task class, not an Environment: wrap it, e.g. "
            f"`environment = Environment(name=..., task={value.__name__}, parameters=...)` in "
            f"{module}, and pass {module}:environment"
        )
    raise EnvironmentLoadError(
        f"{spec} is {type(value).__name__}, not a rollout Environment (or a rolloutlib Env "
        f"class/factory with text or chat actions)"
    )

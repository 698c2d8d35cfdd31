"""The container image's Dockerfile: it cannot be built here (no Docker), so check what can be:
it parses (Docker's own Go parser), its stages, that every path it copies exists in a checkout
and is not excluded by .dockerignore, that it runs as a non-root user with the `rollout` CLI as
its entrypoint, CPU PyTorch by default, and that its `uv export` steps work on our lock file."""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import dockerfile
import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = dockerfile.parse_file(str(ROOT / "Dockerfile"))


def _stages() -> list[list[dockerfile.Command]]:
    stages: list[list[dockerfile.Command]] = []
    for command in COMMANDS:
        if command.cmd.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(command)
    return stages


def _ignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(Path(prefix).name, pattern[3:])
            ):
                return True
    return False


def test_multi_stage_build() -> None:
    stages = _stages()
    assert len(stages) >= 2
    assert [c.value[-1] for c in COMMANDS if c.cmd.upper() == "FROM"] == ["build", "runtime"]
    runtime = stages[-1]
    # The runtime stage takes only the built environment from the build stage.
    assert [c.flags for c in runtime if c.cmd.upper() == "COPY"] == [("--from=build",)]


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    copies = [c for c in COMMANDS if c.cmd.upper() == "COPY" and not c.flags]
    assert copies
    for command in copies:
        *sources, _destination = command.value
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the checkout"
            assert not _ignored(source.rstrip("/")), f"COPY {source}: excluded by .dockerignore"


def test_the_wheel_gets_its_presets_and_eval_suites() -> None:
    # pyproject's force-include copies the presets and the eval suites into the wheel: the image
    # must copy them (the build fails without them).
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    copied = {c.value[0].rstrip("/") for c in COMMANDS if c.cmd.upper() == "COPY"}
    assert set(included) <= copied


def test_the_image_runs_python_3_13() -> None:
    args = dict(
        c.value[0].split("=", 1) for c in COMMANDS if c.cmd.upper() == "ARG" and "=" in c.value[0]
    )
    assert args["PYTHON_IMAGE"].startswith("python:3.13-"), args["PYTHON_IMAGE"]  # the spec's


def test_runs_the_cli_as_a_non_root_user() -> None:
    runtime = _stages()[-1]
    users = [c.value[0] for c in runtime if c.cmd.upper() == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entrypoint = [c for c in runtime if c.cmd.upper() == "ENTRYPOINT"][-1]
    assert entrypoint.json and list(entrypoint.value) == ["rollout"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["rollout"] == "rollout.cli:main"


def test_cpu_torch_by_default_and_the_cluster_extra() -> None:
    args = dict(
        c.value[0].split("=", 1) for c in COMMANDS if c.cmd.upper() == "ARG" and "=" in c.value[0]
    )
    assert args["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("ray") for d in project["project"]["optional-dependencies"]["cluster"])


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_the_dependency_export_works_on_the_lock(tmp_path: Path) -> None:
    run = next(c.value[0] for c in COMMANDS if c.cmd.upper() == "RUN" and "uv export" in c.value[0])
    first = run.split("&&")[0].replace("/tmp/requirements.txt", str(tmp_path / "req.txt"))
    subprocess.run(shlex.split(first), cwd=ROOT, check=True, capture_output=True)
    requirements = (tmp_path / "req.txt").read_text()
    assert "\nray==" in requirements and "\ntorch==" not in requirements
    pin = subprocess.run(
        ["uv", "export", "--frozen", "--no-dev", "--no-hashes"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert any(line.startswith("torch==") for line in pin.splitlines())


def _image_lacks() -> dict[str, bool]:
    """What the Dockerfile leaves out, read from it: vLLM, the tinker extra, Node.js."""
    text = (ROOT / "Dockerfile").read_text()
    run = " ".join(" ".join(c.value) for c in COMMANDS if c.cmd.upper() == "RUN")
    return {
        "vllm": "vllm" not in run.lower(),
        "tinker": "--extra tinker" not in run,
        "node": not any(word in text.lower() for word in ("nodejs", "npm", "node:")),
    }


def _expected_row(name: str) -> tuple[str, str]:
    from rollout.runs.presets import load_preset

    config = load_preset(name)
    lacks = _image_lacks()
    missing = []
    if config.backend == "vllm" and lacks["vllm"]:
        missing.append("vLLM's environment (`rollout setup vllm`)")
    if "tinker" in (config.backend, config.provider) and lacks["tinker"]:
        missing.append("the `tinker` extra (`uv sync --extra tinker`)")
    if "Minecraft" in config.description and lacks["node"]:  # the preset plays minecraft_team
        missing.append("Node.js (minecraft_team's server and bots)")
    if missing:
        return "no", ", ".join(missing)
    if config.device.startswith("cuda"):
        return "built with `TORCH_INDEX` (CUDA PyTorch)", "nothing"
    return "yes", "nothing"


def test_deploy_md_lists_what_each_preset_needs_that_the_image_lacks() -> None:
    from rollout.runs.presets import presets_dir

    page = (ROOT / "docs" / "deploy.md").read_text()
    section = page.split("\n## What the image runs\n", 1)[1].split("\n## ", 1)[0]
    rows = {
        name: (runs.strip(), missing.strip())
        for name, runs, missing in re.findall(
            r"^\| `([\w-]+)` \|([^|]+)\|([^|]+)\|$", section, re.M
        )
    }
    names = sorted(path.stem for path in presets_dir().glob("*.yaml"))
    assert sorted(rows) == names, "one row per built-in preset"
    assert rows == {name: _expected_row(name) for name in names}
    assert _image_lacks()["node"] == ("no Node.js" in " ".join(section.split()))
    assert "the same image" not in page

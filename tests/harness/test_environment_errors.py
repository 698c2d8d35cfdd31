"""Bad `Environment` fields are `InvalidEnvironment` errors that name the field and the value, and
`rollout env check` prints them (and any module that raises while imported) as one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rollout.contracts import Message
from rollout.errors import RolloutError
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.harness.errors import EnvironmentLoadError, InvalidEnvironment
from rollout.harness.loading import load_environment


class Echo(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("Say something.")

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0)


@pytest.mark.parametrize(
    ("fields", "field", "shown"),
    [
        ({"agents": 0}, "agents", "got 0"),
        ({"agents": True}, "agents", "got True"),
        ({"group_size": -2}, "group_size", "got -2"),
        ({"group_size": "8"}, "group_size", "got '8'"),
        ({"max_turns": 0}, "max_turns", "got 0"),
        ({"name": ""}, "name", "got ''"),
        ({"task": object}, "task", "got <class 'object'>"),
        ({"parameters": []}, "parameters", "must not be empty, got []"),
        ({"parameters": {"q": 1}}, "parameters", "not one mapping, got {'q': 1}"),
        ({"parameters": "abc"}, "parameters", "got 'abc'"),
        ({"parameters": 3}, "parameters", "got 3"),
        ({"version": ""}, "version", "got ''"),
        ({"system_prompt": 7}, "system_prompt", "got 7"),
        ({"sampling": [("temperature", 1.0)]}, "sampling", "got [('temperature', 1.0)]"),
        ({"warmup": "yes"}, "warmup", "got 'yes'"),
        ({"turn_timeout_s": 0}, "turn_timeout_s", "got 0"),
        ({"turn_timeout_s": "60"}, "turn_timeout_s", "got '60'"),
        ({"episode_timeout_s": -1.0}, "episode_timeout_s", "got -1.0"),
        ({"episode_timeout_s": float("inf")}, "episode_timeout_s", "got inf"),
        ({"roles": ["a", "b"]}, "roles", "1 non-empty role names, one per agent, got ['a', 'b']"),
        ({"agents": 2, "roles": "ab"}, "roles", "got 'ab'"),
        ({"agents": 2, "roles": ["a", ""]}, "roles", "got ['a', '']"),
    ],
)
def test_each_bad_field_is_named_with_its_value(
    fields: dict[str, Any], field: str, shown: str
) -> None:
    arguments: dict[str, Any] = {"name": "demo", "task": Echo, **fields}
    with pytest.raises(InvalidEnvironment) as caught:
        Environment(**arguments)
    error = caught.value
    assert isinstance(error, RolloutError) and isinstance(error, ValueError)
    assert error.field == field
    assert str(error).startswith(f"Environment {arguments['name']!r}: {field} ")
    assert shown in str(error)


def test_drawn_parameters_must_be_mappings() -> None:
    rows = [{"a": 1}, ["not", "a", "mapping"]]
    listed = Environment(name="listed", task=Echo, parameters=rows)  # type: ignore[arg-type]
    assert listed.draw_parameters(0, seed=0) == {"a": 1}
    with pytest.raises(InvalidEnvironment, match=r"parameters\[1\] must be a mapping"):
        listed.draw_parameters(3, seed=0)
    number = lambda rng: rng.random()  # noqa: E731
    drawn = Environment(name="drawn", task=Echo, parameters=number)  # type: ignore[arg-type]
    with pytest.raises(InvalidEnvironment, match=r"parameters\(rng\) must be a mapping.*got 0\."):
        drawn.draw_parameters(0, seed=0)


def test_a_parameter_functions_own_error_propagates() -> None:
    def broken(rng: Any) -> dict[str, Any]:
        raise KeyError("no such split")

    environment = Environment(name="broken", task=Echo, parameters=broken)
    with pytest.raises(KeyError, match="no such split"):
        environment.draw_parameters(0, seed=0)


def test_indexable_collections_are_parameter_sources() -> None:
    class Rows:  # like a Hugging Face dataset: sized and indexable, not a Sequence
        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: int) -> dict[str, int]:
            return {"row": index}

    environment = Environment(name="rows", task=Echo, parameters=Rows())  # type: ignore[arg-type]
    assert [environment.draw_parameters(i, seed=0)["row"] for i in range(3)] == [0, 1, 0]


def _write(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


def test_a_module_that_raises_while_imported_is_one_load_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "raises_on_import_9c", "x = 1\nraise RuntimeError('no\\ndataset')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvironmentLoadError) as caught:
        load_environment("raises_on_import_9c:environment")
    message = str(caught.value)
    assert message == (
        f"importing module 'raises_on_import_9c' raised RuntimeError at "
        f"{tmp_path / 'raises_on_import_9c.py'}:2: no dataset"
    )


BAD_MODULES = {
    "zero_agents": """
        from rollout.harness import Environment, Task

        class Quiet(Task):
            async def start(self, run):
                raise NotImplementedError

        environment = Environment(name="zero", task=Quiet, agents=0)
    """,
    "import_fails": """
        import json

        SETTINGS = json.loads("{not json")
    """,
    "factory_fails": """
        def environment():
            raise RuntimeError("the dataset is missing")
    """,
}
EXPECTED = {
    "zero_agents": (
        "importing module 'zero_agents' raised InvalidEnvironment at {path}:8: "
        "Environment 'zero': agents must be an integer >= 1, got 0"
    ),
    "import_fails": "importing module 'import_fails' raised JSONDecodeError at {path}:4: ",
    "factory_fails": "factory_fails:environment() raised RuntimeError at {path}:3: ",
}


@pytest.mark.parametrize("module", sorted(BAD_MODULES))
def test_env_check_prints_one_line_and_exits_2(module: str, tmp_path: Path) -> None:
    _write(tmp_path, module, BAD_MODULES[module])
    environ = {**os.environ, "ROLLOUT_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "60"}
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", "env", "check", f"{module}:environment"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines  # one line even on a narrow terminal
    expected = "error: " + EXPECTED[module].format(path=tmp_path / f"{module}.py")
    assert lines[0].startswith(expected), lines[0]

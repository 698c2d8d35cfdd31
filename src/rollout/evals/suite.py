"""Eval suites: a named, versioned list of environments to score a checkpoint on.

A suite is data: a YAML (or JSON) file, or a `Suite` object named as `MODULE:ATTR`:

```yaml
name: parity
version: 1
sampling: {temperature: 0}          # greedy; or {temperature: 1.0, seed: 7}: seeded sampling
environments:
  - environment: parity.environment:environment   # any platform environment (MODULE:ATTR)
    episodes: 64                                  # parameters drawn with `seed` (default 0)
  - name: gsm8k-sample
    benchmark: gsm8k                              # rolloutlib's GSM8K (or aime) grading
    items: data/gsm8k-sample.jsonl                # a file (relative to the suite) or a list
```

`resolve` turns a suite into a `ResolvedSuite`: every episode's parameters spelled out (drawn
from the environment for `episodes` episodes, or taken from `parameters`/`items`), plus each
environment's version and agent count. Its `content_hash` covers all of that, so changing a
suite's environments, parameters, items or sampling without bumping its version is caught when
the suite is registered in the ledger. The resolved definition is what the ledger stores and
what evaluators play, so a job always plays exactly what was registered.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rollout.errors import problems
from rollout.evals.errors import SuiteError
from rollout.harness.loading import load_environment
from rollout.shipped import shipped_dir

BENCHMARKS = ("gsm8k", "aime")


class SuiteSampling(BaseModel):
    """How eval turns sample: greedy (temperature 0) or with a fixed seed, so scores repeat."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(0.0, ge=0)
    seed: int | None = None
    """With temperature > 0: episode k samples with seed `seed + k`."""
    max_tokens: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _repeatable(self) -> SuiteSampling:
        if self.temperature > 0 and self.seed is None:
            raise ValueError(
                f"temperature {self.temperature} needs a fixed seed (or use temperature 0): "
                "eval scores must be repeatable"
            )
        return self


class SuiteMember(BaseModel):
    """One environment of a suite: a platform environment or a rolloutlib benchmark."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    """The score's name (default: the environment's name, or the benchmark's)."""
    environment: str | None = None
    """A platform environment as MODULE:ATTR."""
    benchmark: Literal["gsm8k", "aime"] | None = None
    """A rolloutlib benchmark whose environments grade the answers (`run_benchmark`'s)."""
    items: list[dict[str, Any]] | str | None = None
    """The benchmark's items: a list, or a .jsonl/.json file (relative to the suite file)."""
    template: str = "{question}"
    """The benchmark's prompt template."""
    parameters: list[dict[str, Any]] | None = None
    """The environment's episode parameters (cycled); default: drawn by the environment."""
    episodes: int | None = Field(None, ge=1)
    """How many episodes (default: one per parameter/item, or 32 drawn ones)."""
    seed: int = 0
    """The seed parameters are drawn with."""

    @model_validator(mode="after")
    def _one_source(self) -> SuiteMember:
        if (self.environment is None) == (self.benchmark is None):
            raise ValueError("give exactly one of `environment` (MODULE:ATTR) or `benchmark`")
        if self.benchmark is not None and self.items is None:
            raise ValueError(f"benchmark {self.benchmark!r} needs `items` (a list or a file)")
        if self.environment is not None and self.items is not None:
            raise ValueError("`items` is for benchmarks; environments take `parameters`")
        return self


class Suite(BaseModel):
    """A named, versioned list of environments with sampling settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    version: str
    description: str = ""
    sampling: SuiteSampling = Field(default_factory=lambda: SuiteSampling.model_validate({}))
    environments: list[SuiteMember] = Field(min_length=1)

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        return str(value) if isinstance(value, int | float) else value


@dataclass(frozen=True)
class ResolvedMember:
    """One environment of a resolved suite, with every episode's parameters."""

    name: str
    kind: str
    """'environment' or 'benchmark'."""
    source: str
    """MODULE:ATTR of the environment, or the benchmark's name."""
    source_version: str
    agents: int
    template: str
    parameters: tuple[dict[str, Any], ...]
    """One mapping per episode (a benchmark item for benchmarks)."""


@dataclass(frozen=True)
class ResolvedSuite:
    name: str
    version: str
    description: str
    sampling: SuiteSampling
    members: tuple[ResolvedMember, ...]

    @property
    def episodes(self) -> int:
        return sum(len(m.parameters) for m in self.members)

    def definition(self) -> dict[str, Any]:
        """The JSON the ledger stores (and `from_definition` reads back)."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "sampling": self.sampling.model_dump(),
            "members": [
                {
                    "name": m.name,
                    "kind": m.kind,
                    "source": m.source,
                    "source_version": m.source_version,
                    "agents": m.agents,
                    "template": m.template,
                    "parameters": list(m.parameters),
                }
                for m in self.members
            ],
        }

    @property
    def content_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the definition without its version."""
        content = {k: v for k, v in self.definition().items() if k != "version"}
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def from_definition(cls, data: Mapping[str, Any]) -> ResolvedSuite:
        try:
            return cls(
                name=data["name"],
                version=data["version"],
                description=data.get("description", ""),
                sampling=SuiteSampling.model_validate(data["sampling"]),
                members=tuple(
                    ResolvedMember(
                        name=m["name"],
                        kind=m["kind"],
                        source=m["source"],
                        source_version=m["source_version"],
                        agents=int(m["agents"]),
                        template=m["template"],
                        parameters=tuple(dict(p) for p in m["parameters"]),
                    )
                    for m in data["members"]
                ),
            )
        except (KeyError, TypeError, ValidationError) as error:
            raise SuiteError(f"not a resolved suite definition: {error}") from None

    def member_of(self, index: int) -> tuple[int, ResolvedMember]:
        """(position, member) of episode `index` of the suite (members' episodes in order)."""
        at = index
        for position, member in enumerate(self.members):
            if at < len(member.parameters):
                return position, member
            at -= len(member.parameters)
        raise SuiteError(f"suite {self.name!r} has {self.episodes} episodes, not {index + 1}")


def builtin_dir() -> Path:
    """Where the built-in suites live: packaged with rollout, or `evals/` in a source checkout."""
    return shipped_dir("suites")


def load_suite(reference: str | Suite) -> tuple[Suite, Path | None]:
    """A suite and the folder its relative file paths start from.

    `reference` is a `Suite`, a path to a .yaml/.yml/.json file, the name of a built-in suite
    (`evals/NAME.yaml`), or MODULE:ATTR naming a `Suite` (or a mapping of one).
    """
    if isinstance(reference, Suite):
        return reference, None
    path = Path(reference)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file():
        return _from_file(path), path.resolve().parent
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as error:
            raise SuiteError(f"cannot load suite {reference!r}: {error}") from None
        if isinstance(value, Suite):
            return value, None
        return parse_suite(value, source=reference), None
    builtin = builtin_dir() / f"{reference}.yaml"
    if builtin.is_file():
        return _from_file(builtin), builtin.parent
    known = sorted(p.stem for p in builtin_dir().glob("*.yaml")) if builtin_dir().is_dir() else []
    raise SuiteError(
        f"suite {reference!r} not found: give a .yaml file, MODULE:ATTR, or a built-in suite "
        f"name ({', '.join(known) or 'none'})"
    )


def _from_file(path: Path) -> Suite:
    if not path.is_file():
        raise SuiteError(f"suite file {str(path)!r} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise SuiteError(f"suite {path} is not valid YAML: {error}") from None
    return parse_suite(data, source=str(path))


def parse_suite(data: Any, *, source: str) -> Suite:
    """Validate a suite mapping; one error names every bad field and its value."""
    if not isinstance(data, Mapping):
        raise SuiteError(f"{source}: a suite must be a mapping, got {type(data).__name__}")
    try:
        return Suite.model_validate(dict(data))
    except ValidationError as error:
        raise SuiteError(f"{source}: invalid suite: {problems(error, whole='suite')}") from None


def resolve(reference: str | Suite) -> ResolvedSuite:
    """Load a suite and spell out every episode (see the module docstring)."""
    suite, folder = load_suite(reference)
    members: list[ResolvedMember] = []
    for index, member in enumerate(suite.environments):
        where = f"suite {suite.name!r} environments[{index}]"
        if member.benchmark is not None:
            members.append(_benchmark_member(member, folder, where))
        else:
            members.append(_environment_member(member, where))
    names = [m.name for m in members]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(
            f"suite {suite.name!r} names environments {duplicates} more than once: give each a "
            "distinct `name`"
        )
    return ResolvedSuite(
        suite.name, suite.version, suite.description, suite.sampling, tuple(members)
    )


def _environment_member(member: SuiteMember, where: str) -> ResolvedMember:
    assert member.environment is not None
    try:
        environment = load_environment(member.environment)
    except Exception as error:
        raise SuiteError(f"{where}: {error}") from None
    if member.parameters is not None:
        if not member.parameters:
            raise SuiteError(f"{where}: parameters must not be empty")
        count = member.episodes or len(member.parameters)
        parameters = [dict(member.parameters[i % len(member.parameters)]) for i in range(count)]
    else:
        parameters = [
            environment.draw_parameters(i, member.seed) for i in range(member.episodes or 32)
        ]
    return ResolvedMember(
        name=member.name or environment.name,
        kind="environment",
        source=member.environment,
        source_version=environment.version,
        agents=environment.agents,
        template="",
        parameters=tuple(parameters),
    )


def _benchmark_member(member: SuiteMember, folder: Path | None, where: str) -> ResolvedMember:
    assert member.benchmark is not None
    items = member.items
    if isinstance(items, str):
        path = Path(items)
        if not path.is_absolute() and folder is not None:
            path = folder / path
        items = _read_items(path, where)
    if not items:
        raise SuiteError(f"{where}: benchmark {member.benchmark!r} has no items")
    items = items[: member.episodes] if member.episodes else items
    from rollout.evals.members import benchmark_of

    benchmark = benchmark_of(member.benchmark, items, member.template)
    for index in range(len(items)):  # fail now on a bad item, not in the middle of a job
        try:
            benchmark.make_env(index)
        except Exception as error:
            raise SuiteError(f"{where}: items[{index}]: {error}") from None
    return ResolvedMember(
        name=member.name or member.benchmark,
        kind="benchmark",
        source=member.benchmark,
        source_version="1",
        agents=1,
        template=member.template,
        parameters=tuple(dict(item) for item in items),
    )


def _read_items(path: Path, where: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise SuiteError(f"{where}: items file {str(path)!r} not found")
    text = path.read_text()
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = json.loads(text)
    except json.JSONDecodeError as error:
        raise SuiteError(f"{where}: items file {path} is not valid JSON: {error}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SuiteError(f"{where}: items file {path} must hold a list of objects")
    return rows

"""A run's spec: what a run records besides its environment (`RunRecord.config`), parsed once.

`rollout train` writes a `train` spec (the model folder and the whole preset); `rollout run` a
`single` one and `rollout playground` a `playground` one (the model only). Every role reads the
run through `RunSpec.of(record)`, where `record` is anything with the run's `name`, `run_id` and
`config` (the ledger's `RunRecord`): never index the config dictionary or restate its defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from rollout.errors import problems
from rollout.runs.config import RunConfig
from rollout.runs.errors import InvalidRunSpec

RunKind = Literal["train", "single", "playground"]


class RecordedRun(Protocol):
    """What `RunSpec.of` reads of a recorded run (the ledger's `RunRecord` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def config(self) -> Mapping[str, Any]: ...


class RunSpec(BaseModel):
    """What a run records besides its environment (`RunRecord.config`), parsed once.

    Example:
        >>> spec = RunSpec(kind="single", model="scripted")
        >>> spec.backend, spec.device, spec.training is None
        ('local', 'cpu', True)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RunKind = "train"
    model: str
    """The model: a Hugging Face folder, or `scripted`."""
    training: RunConfig | None = None
    """The preset the run trains with (train runs)."""

    @property
    def backend(self) -> str:
        """The inference backend that serves the run."""
        return self.training.backend if self.training is not None else "local"

    @property
    def device(self) -> str:
        return self.training.device if self.training is not None else "cpu"

    def require_training(self, run: str) -> RunConfig:
        """The run's preset; an error naming the run when it is not a train run."""
        if self.training is None:
            raise InvalidRunSpec(f"run {run!r} is a {self.kind!r} run: it has nothing to train")
        return self.training

    @classmethod
    def of(cls, record: RecordedRun) -> RunSpec:
        """The spec of a recorded run; an error naming the run and each bad field otherwise."""
        try:
            return cls.model_validate(record.config)
        except ValidationError as error:
            raise InvalidRunSpec(
                f"run {record.name!r} ({record.run_id}) has no valid run spec: {problems(error)}"
            ) from None

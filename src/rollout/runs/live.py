"""A run's live settings: what its roles follow and people change while it trains.

Settings are facts in the ledger: `Ledger.set_setting(run_id, key, value)` appends one and the
latest value per key wins. `RunSettings` is their typed record: each setting is a field here,
named by a constant (`MAX_LAG`, `PAUSED`, ...), with its default and its bounds written once.
`Ledger.set_setting` checks every value against its field (`check_setting`), so a key that is
not a field here or a value out of bounds is refused before it is stored, and
`Ledger.run_settings(run_id)` reads them back as a `RunSettings`.

The settings, by who writes them:

- people (`rollout runs set`, `pause`, `resume`, `stop`, and the monitor): `max_lag`,
  `keep_checkpoints`, `keep_versions`, `max_failure_fraction`, `paused`, `status: stopped`;
- `rollout train`, creating the run: `max_lag` and `keep_checkpoints` (the preset's),
  `sampling`, `internal_secret`;
- the trainer: `groups_queued`, `finished`; checkpoint retention: `deleted_checkpoints` (and
  `deleted_policy_checkpoints`, for a run with several policies);
- the roles and their supervisors: `inference_url`, `gateway_url` (where they serve), `status`;
- the failure threshold: `paused`, `error`, `status: failed`; a resume writes
  `failures_baseline`;
- the evaluator: `evaluated`.

Example:
    >>> settings = RunSettings.of({"max_lag": 3, "paused": True})
    >>> settings.max_lag, settings.paused, settings.keep_checkpoints, settings.stopped
    (3, True, 3, False)
    >>> parse_max_lag("2")
    2
    >>> parse_max_lag(-1)
    Traceback (most recent call last):
    ...
    rollout.runs.errors.InvalidSetting: run setting max_lag = -1: Input should be greater than ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.contracts import DEFAULT_POLICY
from rollout.errors import describe
from rollout.runs.errors import InvalidSetting

if TYPE_CHECKING:
    from rollout.runs.config import RunConfig

DEFAULT_MAX_LAG = 1
"""The `max_lag` of a run whose preset or settings say nothing."""
MaxLag = Annotated[int, Field(ge=0, le=1_000_000)]
"""`max_lag`: a turn may begin only on a version >= newest - max_lag (`gateway.admission`)."""
DEFAULT_KEEP_CHECKPOINTS = 3
"""The `keep_checkpoints` of a run whose preset or settings say nothing."""
KeepCheckpoints = Annotated[int, Field(ge=1)]
"""`keep_checkpoints`: the last N checkpoints keep their files (`training.retention`)."""

DEFAULT_MAX_FAILURE_FRACTION = 0.5
"""The `max_failure_fraction` of a run whose settings say nothing."""

RunStatus = Literal["running", "stopped", "failed"]
STOPPED_STATUSES: tuple[RunStatus, ...] = ("stopped", "failed")
RunState = Literal["active", "paused", "finished", "stopped", "failed"]
"""A run as displays show it (`RunSettings.state`)."""
"""Statuses that plain `rollout up` does not resume."""

# The settings' keys (the names of `RunSettings`' fields).
MAX_LAG = "max_lag"
PAUSED = "paused"
FINISHED = "finished"
EVALUATED = "evaluated"
STATUS = "status"
ERROR = "error"
MAX_FAILURE_FRACTION = "max_failure_fraction"
FAILURES_BASELINE = "failures_baseline"
GROUPS_QUEUED = "groups_queued"
KEEP_CHECKPOINTS = "keep_checkpoints"
KEEP_VERSIONS = "keep_versions"
DELETED_CHECKPOINTS = "deleted_checkpoints"
DELETED_POLICY_CHECKPOINTS = "deleted_policy_checkpoints"
SAMPLING = "sampling"
INTERNAL_SECRET = "internal_secret"
INFERENCE_URL = "inference_url"
GATEWAY_URL = "gateway_url"

ADVERTISED_URLS = {"inference": INFERENCE_URL, "gateway": GATEWAY_URL}
"""The setting where each role that serves a run advertises its address."""
SECRET_SETTINGS = frozenset({INTERNAL_SECRET})
"""Settings that are credentials: roles read them, displays show them hidden."""


class FailuresBaseline(BaseModel):
    """The episode counts when a failed run was resumed: the failure threshold counts from
    here (`rollout.launch.failures`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ended: int = Field(ge=0)
    failed: int = Field(ge=0)
    at: float = 0.0
    """When (Unix seconds, the database's clock)."""


class RunSettings(BaseModel):
    """A run's live settings, typed (see the module docstring); a setting never set has the
    default written here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    max_lag: MaxLag = DEFAULT_MAX_LAG
    """Turns begin only on versions >= newest - max_lag."""
    paused: bool = False
    """No seats of the run are handed out (those in flight play on)."""
    finished: bool = False
    """The trainer took the last step and published it."""
    evaluated: bool = False
    """A finished run's scheduled evals are all scored."""
    status: RunStatus | None = None
    """`stopped` (`rollout runs stop`, an interrupted `rollout train`) and `failed` (the failure
    threshold) are not resumed by plain `rollout up`; `running` once resumed."""
    error: str | None = None
    """Why the run failed (one line)."""
    max_failure_fraction: float = Field(default=DEFAULT_MAX_FAILURE_FRACTION, ge=0, le=1)
    """The share of ended episodes that may fail before the run pauses itself (1: never)."""
    failures_baseline: FailuresBaseline | None = None
    """The counts at the last resume of a failed run."""
    groups_queued: int = Field(default=0, ge=0)
    """Groups of episodes the trainer has queued so far."""
    keep_checkpoints: KeepCheckpoints = DEFAULT_KEEP_CHECKPOINTS
    """The last N checkpoints keep their files."""
    keep_versions: tuple[Annotated[int, Field(ge=0)], ...] = ()
    """Versions whose files are kept whatever their age."""
    deleted_checkpoints: tuple[int, ...] = ()
    """Versions whose files retention deleted (the default policy's, `DEFAULT_POLICY`)."""
    deleted_policy_checkpoints: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    """Each other policy's versions whose files retention deleted (`rollout.runs.policies`:
    each policy has a version chain of its own)."""
    sampling: dict[str, Any] = Field(default_factory=dict)
    """The run's sampling settings for its episodes (`temperature`, `max_tokens`)."""
    internal_secret: str | None = None
    """Internal endpoints bound beyond loopback require it (a credential: shown hidden)."""
    inference_url: str | None = None
    """Where the run's inference server serves."""
    gateway_url: str | None = None
    """Where the run's gateway serves."""

    @classmethod
    def of(cls, values: Mapping[str, Any], config: RunConfig | None = None) -> RunSettings:
        """The typed settings from the ledger's `settings(run_id)`. A setting the run never set
        takes the value of the run's `config` where it has one (`max_lag`,
        `keep_checkpoints`), else the default here.

        Raises:
            InvalidSetting: a stored value does not fit its setting (naming both).
        """
        defaults = {}
        if config is not None:
            defaults = {MAX_LAG: config.max_lag, KEEP_CHECKPOINTS: config.keep_checkpoints}
        # A stored null is the default (or none, for a setting whose default is none).
        given = {k: v for k, v in values.items() if v is not None}
        try:
            return cls.model_validate({**defaults, **given})
        except ValidationError as error:
            raise _invalid(error) from None

    @property
    def state(self) -> RunState:
        """What a display calls the run: finished, failed or stopped, paused, else active."""
        if self.finished:
            return "finished"
        if self.status in STOPPED_STATUSES:
            return self.status  # type: ignore[return-value]
        return "paused" if self.paused else "active"

    def deleted_of(self, policy: str) -> tuple[int, ...]:
        """The versions of `policy`'s chain whose files retention deleted.

        Example:
            >>> settings = RunSettings.of({"deleted_checkpoints": [0],
            ...                            "deleted_policy_checkpoints": {"scout": [1, 2]}})
            >>> settings.deleted_of("main"), settings.deleted_of("scout"), settings.deleted_of("x")
            ((0,), (1, 2), ())
        """
        if policy == DEFAULT_POLICY:
            return self.deleted_checkpoints
        return self.deleted_policy_checkpoints.get(policy, ())

    @property
    def stopped(self) -> bool:
        """Stopped or failed: plain `rollout up` leaves the run alone."""
        return self.status in STOPPED_STATUSES

    def url_of(self, role: str) -> str | None:
        """Where `role` (`inference` or `gateway`) advertised that it serves the run."""
        if role not in ADVERTISED_URLS:
            raise InvalidSetting(f"role {role!r} advertises no address; inference and gateway do")
        url: str | None = getattr(self, ADVERTISED_URLS[role])
        return url


def _invalid(error: ValidationError) -> InvalidSetting:
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"])
    return InvalidSetting(f"run setting {key} = {describe(first['input'])}: {first['msg']}")


def check_setting(key: str, value: Any) -> Any:
    """`value` checked against setting `key`'s field, as the field holds it (`"2"` for
    `max_lag` is 2; a nested record is a mapping again, a list a tuple).

    Raises:
        InvalidSetting: `key` is not a setting, or `value` does not fit it (naming both).

    Example:
        >>> check_setting("keep_versions", [3, 1])
        (3, 1)
        >>> check_setting("max_lagg", 1)
        Traceback (most recent call last):
        ...
        rollout.runs.errors.InvalidSetting: unknown run setting 'max_lagg'
    """
    if key not in RunSettings.model_fields:
        raise InvalidSetting(f"unknown run setting {key!r}")
    try:
        checked = RunSettings.model_validate({key: value})
    except ValidationError as error:
        raise _invalid(error) from None
    # Python values, not JSON mode: that would turn a NaN into null (the ledger refuses NaN).
    return checked.model_dump(include={key})[key]


def parse_max_lag(value: Any) -> int:
    """`value` (an integer, or its text) as a `max_lag`; an `InvalidSetting` naming the field
    and the value otherwise.

    Example:
        >>> parse_max_lag(2), parse_max_lag("3")
        (2, 3)
        >>> parse_max_lag(-1)
        Traceback (most recent call last):
        ...
        rollout.runs.errors.InvalidSetting: run setting max_lag = -1: Input should be greater ...
    """
    if type(value) is int and 0 <= value <= 1_000_000:  # MaxLag's bounds, without pydantic:
        return value  # the gateway's lag gate parses the run's max_lag for every turn
    return int(check_setting(MAX_LAG, value))

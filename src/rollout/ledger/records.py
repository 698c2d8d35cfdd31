"""The ledger's records: frozen dataclasses, read from and written to Postgres.

Reads map rows to records by column name: a query selects a record's fields under their names
(psycopg's `class_row`), or a small row function converts the columns that need it (arrays to
tuples).

Times (`created_at`, ...) are Unix seconds as floats. Records passed *into* a write (for example a
`CheckpointRecord` given to `Ledger.record_train_step`) have their `created_at` ignored: the
database stamps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollout.contracts import DEFAULT_POLICY, Turn

EPISODE_KINDS = ("train", "eval", "playground")
SEAT_STATUSES = ("completed", "failed")


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    name: str
    environment: str
    config: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: group `group_index`, member `member` of the group."""

    group_index: int
    member: int
    parameters: dict[str, Any]
    seed: int
    agents: int = 1
    kind: str = "train"
    """'train', 'eval' or 'playground': only 'train' episodes are trained on."""


@dataclass(frozen=True)
class SeatClaim:
    """A runner's fenced claim on one agent seat of one episode. `attempt` is the epoch."""

    run_id: str
    episode_id: str
    agent: int
    attempt: int
    runner: str
    parameters: dict[str, Any]
    seed: int
    agents: int
    api_key: str
    kind: str = "train"
    group_index: int = 0
    member: int = 0


@dataclass(frozen=True)
class LagView:
    """What max_lag admission reads (`Ledger.lag_view`) for one policy of a run: its newest
    checkpoint version, the lowest version of it the run's servers acknowledge serving, the
    run's `max_lag` setting (None where absent), and when the read began (`time.time()`)."""

    newest: int | None
    serving: int | None
    max_lag: Any
    read_at: float
    policy: str = DEFAULT_POLICY
    """The policy whose versions `newest` and `serving` are."""


@dataclass(frozen=True)
class KeyInfo:
    """The seat attempt an API key was issued for.

    `lag` is the `LagView` of the key's run's default policy (`DEFAULT_POLICY`), read in the
    same round trip as the key (`Ledger.resolve_key`), so that the gateway admits a new seat's
    first turn without a read of its own; it says nothing of another policy's versions. None
    where it was not read with the key (a cached key). It takes no part in equality.
    """

    run_id: str
    episode_id: str
    agent: int
    attempt: int
    lag: LagView | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    epoch: int
    expires_at: float = 0.0


@dataclass(frozen=True)
class SeatEnd:
    episode_id: str
    agent: int
    attempt: int
    status: str  # 'completed' | 'failed'
    reward: float
    score: dict[str, Any] | None
    metrics: dict[str, float]
    error: str | None
    created_at: float = 0.0
    turn_rewards: Sequence[float | None] | None = None
    """The reward of each turn (None where it has none), the End's added to the last; None: the
    End's reward, `reward`, is the seat's only one."""


@dataclass(frozen=True)
class SeatState:
    """Where one seat stands: its latest attempt (0: never claimed), who holds it, until when."""

    agent: int
    attempt: int
    runner: str | None
    expires_at: float | None
    ended: bool


@dataclass(frozen=True)
class EpisodeRecord:
    episode_id: str
    run_id: str
    group_index: int
    member: int
    parameters: dict[str, Any]
    seed: int
    agents: int
    kind: str
    turns: tuple[Turn, ...]  # turns of the winning attempts (or latest attempts if unfinished)
    ends: tuple[SeatEnd, ...]
    seats: tuple[SeatState, ...] = ()
    created_at: float = 0.0

    @property
    def ended(self) -> bool:
        """True when every seat has ended."""
        return len(self.ends) == self.agents


@dataclass(frozen=True)
class GroupRecord:
    """A complete train group (the `group_status` view): every seat of every episode ended."""

    run_id: str
    group_index: int
    episodes: tuple[EpisodeRecord, ...]
    policy: str = DEFAULT_POLICY
    """The policy the group is complete and not yet trained for."""


@dataclass(frozen=True)
class CheckpointRecord:
    run_id: str
    version: int
    parent_version: int | None
    uri: str
    kind: str  # 'full' | 'lora'
    created_at: float
    metadata: dict[str, Any]
    policy: str = DEFAULT_POLICY
    """The policy whose version chain the checkpoint is on."""


@dataclass(frozen=True)
class TrainStepRecord:
    run_id: str
    step: int
    group_indices: tuple[int, ...]
    metrics: dict[str, float]
    created_at: float
    policy: str = DEFAULT_POLICY


@dataclass(frozen=True)
class ServingRecord:
    """What should be served for a run now: a version and where each backend's files are."""

    run_id: str
    version: int
    uris: dict[str, str]  # backend name -> converted checkpoint location
    created_at: float
    policy: str = DEFAULT_POLICY

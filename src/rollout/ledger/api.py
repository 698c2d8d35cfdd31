"""The ledger's Python API (SKELETON: signatures are the contract; bodies are being built).

All methods are async and safe to call concurrently. Every write is idempotent on a natural key.
Writes made under a lease or a claim check its epoch/attempt in the same transaction and raise
`StaleFence` (changing nothing) when someone took over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollout.contracts import Turn


class LedgerError(Exception):
    """Base class of ledger errors."""


class StaleFence(LedgerError):
    """A write by a lease holder or claimant who has been fenced out (someone took over)."""


class NotFound(LedgerError):
    """A run, episode or key that does not exist (the message names it)."""


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


@dataclass(frozen=True)
class KeyInfo:
    run_id: str
    episode_id: str
    agent: int
    attempt: int


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    epoch: int


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


@dataclass(frozen=True)
class GroupRecord:
    """A complete group: every episode of the group has every seat ended."""

    run_id: str
    group_index: int
    episodes: tuple[EpisodeRecord, ...]


@dataclass(frozen=True)
class CheckpointRecord:
    run_id: str
    version: int
    parent_version: int | None
    uri: str
    kind: str  # 'full' | 'lora'
    created_at: float
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ServingRecord:
    """What should be served for a run now: a version and where each backend's files are."""

    run_id: str
    version: int
    uris: dict[str, str]  # backend name -> converted checkpoint location
    created_at: float


class Ledger:
    @classmethod
    async def connect(cls, url: str | None = None, *, state_dir: str = ".rollout") -> Ledger:
        """Connect (url, or ROLLOUT_DATABASE_URL, or the embedded Postgres under state_dir)."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    # runs and their settings
    async def create_run(self, name: str, environment: str, config: dict[str, Any]) -> RunRecord:
        raise NotImplementedError

    async def get_run(self, run: str) -> RunRecord:
        """By id or name; raises NotFound."""
        raise NotImplementedError

    async def list_runs(self) -> list[RunRecord]:
        raise NotImplementedError

    async def set_setting(self, run_id: str, key: str, value: Any) -> None:
        """Append a setting fact (max_lag, paused, ...); the latest per key wins."""
        raise NotImplementedError

    async def settings(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    # episodes and seats
    async def add_episodes(self, run_id: str, episodes: Sequence[EpisodeSpec]) -> list[str]:
        """Idempotent on (run, group_index, member, kind); returns episode ids."""
        raise NotImplementedError

    async def claim_seat(
        self, runner: str, *, run_id: str | None = None, lease_seconds: float = 60.0
    ) -> SeatClaim | None:
        """Claim an unclaimed seat (or one whose claim expired: attempt + 1). SKIP LOCKED."""
        raise NotImplementedError

    async def heartbeat(self, claim: SeatClaim, lease_seconds: float = 60.0) -> None:
        """Extend the claim; StaleFence if another attempt took over."""
        raise NotImplementedError

    async def resolve_key(self, api_key: str) -> KeyInfo | None:
        raise NotImplementedError

    async def last_turn(self, episode_id: str, agent: int, attempt: int) -> Turn | None:
        raise NotImplementedError

    async def seat_turns(self, episode_id: str, agent: int, attempt: int) -> list[Turn]:
        raise NotImplementedError

    async def record_turn(self, turn: Turn) -> bool:
        """Fenced by attempt; idempotent on (episode, agent, attempt, index). True if new."""
        raise NotImplementedError

    async def end_seat(
        self,
        claim: SeatClaim,
        *,
        reward: float,
        score: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        status: str = "completed",
        error: str | None = None,
    ) -> bool:
        """Fenced by attempt; the first end of a seat wins. True if new."""
        raise NotImplementedError

    async def episode(self, episode_id: str) -> EpisodeRecord:
        raise NotImplementedError

    async def list_episodes(self, run_id: str, limit: int = 100) -> list[EpisodeRecord]:
        raise NotImplementedError

    # training
    async def acquire_lease(self, name: str, holder: str, ttl_seconds: float = 30.0) -> Lease:
        """Take the lease if free or expired (epoch + 1); renew if held by `holder`."""
        raise NotImplementedError

    async def complete_groups(self, run_id: str, limit: int) -> list[GroupRecord]:
        """Complete 'train' groups not yet consumed by a train step, oldest first."""
        raise NotImplementedError

    async def record_train_step(
        self,
        lease: Lease,
        run_id: str,
        step: int,
        group_indices: Sequence[int],
        metrics: dict[str, float],
        checkpoint: CheckpointRecord,
    ) -> None:
        """Fenced; atomically marks the groups consumed and records the step + checkpoint."""
        raise NotImplementedError

    async def latest_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        raise NotImplementedError

    async def record_conversion(self, run_id: str, version: int, backend: str, uri: str) -> None:
        raise NotImplementedError

    async def set_serving(self, lease: Lease, record: ServingRecord) -> None:
        raise NotImplementedError

    async def serving(self, run_id: str) -> ServingRecord | None:
        raise NotImplementedError

    async def ack_serving(self, run_id: str, server: str, version: int) -> None:
        raise NotImplementedError

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait for a NOTIFY on `channel` (or time out: polling fallback). True if notified."""
        raise NotImplementedError

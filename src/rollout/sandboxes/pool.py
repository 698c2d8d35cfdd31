"""Pool types: how to start, health-check, reset and stop one sandbox instance.

A `SandboxPool` describes instances of one kind (a Minecraft server, a gridworld process). It
holds no instances itself: the ledger registers them and `rollout.sandboxes.seats` claims them.
Everything a pool returns about an instance is its **details**, a JSON mapping with the
connection details agents need (host, port, ...) and whatever the pool needs to control it
later (a pid, a pod name). Details travel through the ledger, so a runner in another process
or on another machine can use the instance: its address is one that other machines reach.

`SandboxedEnvironment` is an `Environment` whose episodes claim one instance of its pool; every
agent of the episode then finds the details in `RunContext.sandbox`.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.harness.core import Environment
from rollout.harness.errors import InvalidEnvironment
from rollout.sandboxes.errors import SandboxError

Details = dict[str, Any]


def empty_folder(folder: Path) -> None:
    """Delete `folder` and everything in it (nothing if it does not exist)."""
    shutil.rmtree(folder, ignore_errors=True)


class SandboxPool(ABC):
    """One kind of sandbox instance. Subclass it and implement `start`, `health` and `stop`.

    Attributes:
        name: The pool's name (instances are registered under it).
        seats: How many agents one instance holds (an episode needs at least its agent count).
        max_instances: The most live instances of this pool per host.
        local: Instances can be reset and stopped only on the host that started them
            (processes, which any host reaches at their address); claims then look for
            instances on the claimer's own host, or clean ones a sandbox host serves
            (`rollout.sandboxes.host`). False: any host controls any instance (a service's
            pods).
    """

    name: str = "sandbox"
    seats: int = 1
    max_instances: int = 8
    local: bool = True

    @abstractmethod
    async def start(self, workdir: Path) -> Details:
        """Start one instance (using `workdir` for its files) and return its details once it
        accepts connections. Raises `SandboxError` naming what failed."""

    @abstractmethod
    async def health(self, details: Mapping[str, Any]) -> bool:
        """Whether the instance is alive and answering."""

    @abstractmethod
    async def stop(self, details: Mapping[str, Any]) -> None:
        """Stop the instance (no error if it is gone already)."""

    async def claimed(self, details: Mapping[str, Any]) -> Details:
        """Called by the claimer on every claim, once the instance is started or reset and
        before any agent uses it; returns the details the claim's agents get.

        By default the details are unchanged. A pool whose instances answer only to a secret
        of the claim (`rollout.sandboxes.computer`) replaces it here, so that whoever held an
        earlier claim is refused from then on.
        """
        return dict(details)

    async def reset(self, details: Mapping[str, Any], workdir: Path) -> Details:
        """Bring a used instance back to its initial state; returns its (new) details.

        By default: stop it, empty `workdir`, start it again.
        """
        await self.stop(details)
        empty_folder(workdir)
        return await self.start(workdir)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, seats={self.seats})"


@dataclass(frozen=True)
class SandboxedEnvironment(Environment):
    """An `Environment` whose episodes each claim one instance of `pool`.

    Example:
        >>> from rollout.harness import Task
        >>> class Play(Task):
        ...     async def start(self, run): ...
        >>> class Worlds(SandboxPool):
        ...     name, seats = "worlds", 2
        ...     async def start(self, workdir): return {"port": 1}
        ...     async def health(self, details): return True
        ...     async def stop(self, details): return None
        >>> env = SandboxedEnvironment(name="demo", task=Play, agents=2, pool=Worlds())
        >>> env.pool.name, env.agents
        ('worlds', 2)
    """

    pool: SandboxPool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.pool, SandboxPool):
            raise InvalidEnvironment(self.name, "pool", self.pool, "must be a SandboxPool")
        if self.pool.seats < self.agents:
            raise InvalidEnvironment(
                self.name,
                "agents",
                self.agents,
                f"must be at most the pool's seats ({self.pool.seats})",
            )

    @property
    def sandbox(self) -> SandboxPool:
        """The pool (what `rollout env check` and runners look for)."""
        if self.pool is None:  # pragma: no cover - refused in __post_init__
            raise SandboxError(f"environment {self.name!r} has no pool")
        return self.pool


def sandbox_pool(environment: Environment) -> SandboxPool | None:
    """The pool an environment's episodes claim an instance of, or None."""
    pool = getattr(environment, "pool", None)
    return pool if isinstance(pool, SandboxPool) else None

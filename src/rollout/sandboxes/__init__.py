"""Sandboxes: long-lived shared resources that multi-agent episodes claim (a Minecraft server,
a gridworld, a computer).

- `SandboxPool` (pool.py): a pool type declares how to start, health-check, reset and stop one
  instance, and how many seats (agents) it has. `ProcessPool` (process.py) runs each instance as
  a local process on a TCP port of an address other machines reach, the default; other pool
  types (containers, pods) implement the same four methods and set `local = False` when any
  host can control their instances.
- `SandboxHost` (host.py): a machine that keeps instances of a pool for runners on every host
  (`rollout sandboxes serve`).
- `SandboxedEnvironment` (pool.py): an `Environment` whose episodes each claim one instance.
- `SandboxSeats` (seats.py): the runner's side: claim or join the episode's instance (fenced
  lease in the ledger, `rollout.ledger.sandboxes`), reset it if an earlier episode used it,
  replace it if it crashed, renew the claim while the seat plays, release it when every agent
  has finished. Agents read the instance's details from `RunContext.sandbox`.
- `JsonLines`/`connect` (jsonlines.py): the JSON-lines request channel sandboxes often speak.
- `SandboxError` (errors.py).
"""

from rollout.sandboxes.errors import SandboxError
from rollout.sandboxes.host import SandboxHost
from rollout.sandboxes.jsonlines import JsonLines, connect
from rollout.sandboxes.pool import Details, SandboxedEnvironment, SandboxPool, sandbox_pool
from rollout.sandboxes.process import ProcessPool
from rollout.sandboxes.seats import SandboxSeats

__all__ = [
    "Details",
    "JsonLines",
    "ProcessPool",
    "SandboxError",
    "SandboxHost",
    "SandboxPool",
    "SandboxSeats",
    "SandboxedEnvironment",
    "connect",
    "sandbox_pool",
]

"""The ledger: append-only facts in Postgres, fenced writes, wake-ups, the embedded server.

- `Ledger` (api.py): the one facade every role uses, composed of a mixin per concept:
  runs.py (runs, settings), seats.py (episodes, claims, keys, seat ends), episodes.py (episode
  reads), turns.py (turns), leases.py (leases, the fence), training.py (complete groups, train
  steps, checkpoints), serving.py (conversions, serving, acks), notify.py (wake-ups),
  presets.py (stored presets), evals.py (eval suites, jobs, scores), sandboxes.py (sandbox
  instances and claims), on connection.py (the pool; rows read by column name).
- monitor.py: `MonitorReads`, the web monitor's paged display queries on a read-only pool of
  their own (opened with a `Ledger`, riding out outages with it).
- records.py: the frozen dataclasses it reads and writes; inputs.py: checks of written values.
- errors.py: `LedgerError` and its subclasses (`StaleFence`, `NotFound`, `LeaseHeld`,
  `InvalidInput`).
- embedded.py: the private Postgres under `<state_dir>/postgres` (`database_url`), and
  `ledger_url`, the one rule for which database a process uses.
- migrate.py + migrations/*.sql: the schema, applied on start.
- adapters.py: fast binary array dumpers for turn writes.
"""

from rollout.ledger.api import Ledger
from rollout.ledger.connection import COMMAND_WAIT_S
from rollout.ledger.embedded import database_url, ledger_url, stop_embedded
from rollout.ledger.errors import InvalidInput, LeaseHeld, LedgerError, NotFound, StaleFence
from rollout.ledger.migrate import apply_migrations
from rollout.ledger.notify import CHANNELS
from rollout.ledger.records import (
    CheckpointRecord,
    EpisodeRecord,
    EpisodeSpec,
    GroupRecord,
    KeyInfo,
    LagView,
    Lease,
    RunRecord,
    SeatClaim,
    SeatEnd,
    SeatState,
    ServingRecord,
    TrainStepRecord,
)
from rollout.ledger.seats import episode_id_for

__all__ = [
    "CHANNELS",
    "COMMAND_WAIT_S",
    "CheckpointRecord",
    "EpisodeRecord",
    "EpisodeSpec",
    "GroupRecord",
    "InvalidInput",
    "KeyInfo",
    "LagView",
    "Lease",
    "LeaseHeld",
    "Ledger",
    "LedgerError",
    "NotFound",
    "RunRecord",
    "SeatClaim",
    "SeatEnd",
    "SeatState",
    "ServingRecord",
    "StaleFence",
    "TrainStepRecord",
    "apply_migrations",
    "database_url",
    "episode_id_for",
    "ledger_url",
    "stop_embedded",
]

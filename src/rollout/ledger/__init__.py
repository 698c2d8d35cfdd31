"""The ledger: append-only facts in Postgres, fenced writes, wake-ups, the embedded server.

- `Ledger` (api.py): the async API every role uses.
- records.py: the frozen dataclasses it reads and writes.
- errors.py: `LedgerError` and its subclasses (`StaleFence`, `NotFound`, `LeaseHeld`,
  `InvalidInput`).
- embedded.py: the private Postgres under `<state_dir>/postgres` (`database_url`), and
  `ledger_url`, the one rule for which database a process uses.
- migrate.py + migrations/*.sql: the schema, applied on start.
- notify.py: the LISTEN connection behind `Ledger.wait`.
- turns.py: batched, per-row fenced turn writes; adapters.py: fast binary array dumpers.
"""

from rollout.ledger.api import Ledger, episode_id_for
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
    Lease,
    RunRecord,
    RunSummary,
    SeatClaim,
    SeatEnd,
    SeatState,
    ServingAck,
    ServingRecord,
    TrainStepRecord,
)

__all__ = [
    "CHANNELS",
    "CheckpointRecord",
    "EpisodeRecord",
    "EpisodeSpec",
    "GroupRecord",
    "InvalidInput",
    "KeyInfo",
    "Lease",
    "LeaseHeld",
    "Ledger",
    "LedgerError",
    "NotFound",
    "RunRecord",
    "RunSummary",
    "SeatClaim",
    "SeatEnd",
    "SeatState",
    "ServingAck",
    "ServingRecord",
    "StaleFence",
    "TrainStepRecord",
    "apply_migrations",
    "database_url",
    "episode_id_for",
    "ledger_url",
    "stop_embedded",
]

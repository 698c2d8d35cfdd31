"""The `Ledger` facade: one class, every concept's methods, one connection pool.

Each concept lives in its own module as a mixin of `LedgerConnection` (connection.py), with its
SQL named once at the top of the module:

- runs.py: runs and settings (`create_run`, `get_run`, `list_runs`, `set_setting`,
  `settings`, `pause_run`/`resume_run`);
- seats.py: episodes and seats (`add_episodes`, `claim_seat`/`claim_seats`,
  `heartbeat`/`heartbeats`, `resolve_key`, `end_seat`);
- episodes.py: episode reads (`episode`, `list_episodes`, `episode_counts`);
- turns.py: turns, fenced per seat attempt and batched (`record_turn`, `record_turns`,
  `seat_turns`, `last_turn`, `turns_for_run`);
- leases.py: leases and the fence every lease holder's write checks (`acquire_lease`);
- training.py: complete groups, train steps, checkpoints (`complete_groups`,
  `record_train_step`, `record_checkpoint`, `latest_checkpoint`, `checkpoints`, `train_steps`),
  and the planner's statistics of a growing run's tables (`analyze_run_tables`);
- serving.py: conversions, serving records, acknowledgements and the max_lag view
  (`record_conversion`, `conversions`, `set_serving`, `serving`, `ack_serving`,
  `serving_acks`, `lag_view`);
- notify.py: wake-ups (`listen`, `wait` on channels from `CHANNELS`; polling is the fallback);
- presets.py: presets stored by `rollout preset load` (`store_preset`, `presets`, `find_preset`);
- evals.py: eval suites, requests, jobs, the claims of their seats and their scores;
- sandboxes.py: sandbox instances and their fenced claims;
- processes.py: heartbeats of role processes (`start_heartbeat`, `set_process_status`,
  `processes`, read by `rollout ps`).

Why mixins and not delegation: every concept needs the same pool and nothing else, and callers
keep one flat namespace (`ledger.claim_seat`, not `ledger.seats.claim`). Delegating would
restate every signature and docstring in the facade; a mixin states each once. The mixins never
call each other: a step shared inside one transaction is a module function that takes the
connection (`leases.check_fence`, `episodes.load_episodes`), so each module can be read alone.
A concept that holds a resource (the LISTEN connection, the turn batcher) opens it in its
`__init__` and closes it in `close`, both chaining to `super()`.

All methods are async and safe to call concurrently. Every write is idempotent on a natural
key: writing the same fact twice stores it once and the second call returns False. Writes made
under a lease or a seat claim check its epoch/attempt in the same transaction, holding a row
lock on the lease (or seat) row, and raise `StaleFence`, changing nothing, when someone took
over.
"""

from __future__ import annotations

from rollout.ledger.episodes import EpisodesMixin
from rollout.ledger.evals import EvalsMixin
from rollout.ledger.leases import LeasesMixin
from rollout.ledger.notify import WakeupsMixin
from rollout.ledger.presets import PresetsMixin
from rollout.ledger.processes import ProcessesMixin
from rollout.ledger.runs import RunsMixin
from rollout.ledger.sandboxes import SandboxesMixin
from rollout.ledger.seats import SeatsMixin
from rollout.ledger.serving import ServingMixin
from rollout.ledger.training import TrainingMixin
from rollout.ledger.turns import TurnsMixin

__all__ = ["Ledger"]


class Ledger(
    RunsMixin,
    SeatsMixin,
    EpisodesMixin,
    TurnsMixin,
    LeasesMixin,
    TrainingMixin,
    ServingMixin,
    WakeupsMixin,
    EvalsMixin,
    PresetsMixin,
    SandboxesMixin,
    ProcessesMixin,
):
    """A connection pool to the ledger database, a turn batcher and a listener for wake-ups.

    Example:
        One episode played by one runner. It needs a database, so it is skipped as a doctest;
        tests/ledger/test_ledger_facade.py runs it against a real Postgres.

        >>> import asyncio
        >>> from rollout.ledger import EpisodeSpec, Ledger
        >>> async def demo() -> float:
        ...     async with await Ledger.connect() as ledger:  # ROLLOUT_DATABASE_URL, or embedded
        ...         run = await ledger.create_run("demo", "arithmetic.environment:environment", {})
        ...         await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=1)])
        ...         claim = await ledger.claim_seat("runner-1", run_id=run.run_id)
        ...         assert claim is not None
        ...         await ledger.end_seat(claim, reward=1.0)
        ...         return (await ledger.episode(claim.episode_id)).ends[0].reward
        >>> asyncio.run(demo())  # doctest: +SKIP
        1.0
    """

"""Chaos: kill -9 of random roles at random moments, Postgres included, and nothing is lost.

`rollout train` runs the parity example on the embedded Postgres (a private state folder, no
`ROLLOUT_DATABASE_URL`), and again the two-role gridworld with a policy per role (half the
kills: the invariants are then checked per policy, and every turn must have been sampled by its
agent's policy). Once a train step is recorded the test SIGKILLs, KILLS times, a random
child of the run's supervisor (`rollout up`: runner, gateway, inference server, trainer,
bridge, ...) or, a few times, the embedded Postgres. After each kill it waits until that kind is
back (a new process of the kind; for Postgres, a query answered), recording the recovery time,
plus a random pause. Near the run's end, a trainer that takes the trainer lease over is also
killed at once (LeaseGuard), so that the run outlasts the kills: a dead holder's lease lasts
30 s, and on a fast machine its successor trains the last steps within a second of taking it.
The run must then finish its steps, and the ledger must show: checkpoint versions 0..N once
each on one parent chain, trainer lease epochs that never go back, every consumed group trained
once and complete, every seat's end written by its final attempt, every turn belonging to
exactly one attempt, and nothing left running.

Replay a failure with `ROLLOUT_CHAOS_SEED=<the printed seed>` (the same choices of kind and
pauses; the moments still depend on the machine). `pytest -s` prints the schedule as it goes
and a recovery table (count, median, max seconds per kind).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from rollout.ledger import apply_migrations
from rollout.ledger.embedded import database_url, embedded_pid
from rollout.ledger.leases import trainer_lease
from rollout.ledger.runs import SECRET_SETTINGS
from rollout.procs import process_alive
from tests.launch.run_invariants import check_ledger, held_seats

KILLS = 50
POSTGRES_KILLS = (3, 5)
STEPS = 4
GROUPS = 2
RECOVERY_TIMEOUT = 60.0
BUDGET_S = 360.0
"""A hard cap on the whole test (it takes ~2-3.5 minutes on 2 busy cores): it cannot hang."""
LAST_STEP = "SELECT coalesce(max(step), 0) FROM train_steps WHERE run_id = %s"
T = TypeVar("T")


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _children(parent: int) -> dict[str, list[int]]:
    """The supervisor's live role processes by kind (`rollout.cli <kind> ...`)."""
    found: dict[str, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) != parent or stat[0] == "Z":
            continue
        args = _argv(int(entry.name))
        if "rollout.cli" in args and len(args) > args.index("rollout.cli") + 1:
            found[args[args.index("rollout.cli") + 1]].append(int(entry.name))
    return found


def _with_run_id(run_id: str) -> list[int]:
    return [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and run_id in _argv(int(e.name)) and process_alive(int(e.name))
    ]


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.Error:
        return False


class LeaseGuard:
    """Near the run's end (step STEPS - 2 recorded), kill -9 the supervisor's trainer as soon as
    it holds the run's trainer lease, so that the run cannot finish before the kills do.

    Called while the test waits (every 50 ms); reads the ledger on a connection of its own,
    opened again after a Postgres kill. `killed`: the trainers it killed.
    """

    def __init__(self, url: str, run_id: str, up: int) -> None:
        self.url = url
        self.run_id = run_id
        self.up = up
        self.killed: set[int] = set()
        self._conn: psycopg.Connection | None = None

    def _holder(self) -> str | None:
        """The lease's holder once the run is near its end, else None."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, connect_timeout=1, autocommit=True)
            step = self._conn.execute(LAST_STEP, (self.run_id,)).fetchone()
            holder = self._conn.execute(
                "SELECT holder FROM leases WHERE name = %s", (trainer_lease(self.run_id),)
            ).fetchone()
        except psycopg.Error:
            self.close()
            return None
        if step is None or step[0] < STEPS - 2 or holder is None:
            return None
        return str(holder[0])

    def __call__(self) -> None:
        holder = self._holder()
        if holder is None:
            return
        pid = int(holder.rsplit("-", 1)[1])  # trainer-HOST-PID (TrainerLoop.holder)
        if pid in self.killed or not process_alive(pid):
            return
        if pid in _children(self.up).get("trainer", []):
            os.kill(pid, signal.SIGKILL)
            self.killed.add(pid)
            print(f"  the lease holder killed (trainer {pid}), near the run's end")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _no_guard() -> None:
    pass


def _wait(
    what: str,
    ready: Callable[[], T | None],
    timeout: float = RECOVERY_TIMEOUT,
    guard: Callable[[], None] = _no_guard,
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value  # truthy, so not None
        assert time.monotonic() < deadline, f"{what} not back within {timeout} s"
        guard()
        time.sleep(0.05)


def _pause(seconds: float, guard: Callable[[], None]) -> None:
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        guard()
        time.sleep(min(0.05, left))


def _first_step(url: str, train: subprocess.Popen[str]) -> str:
    def step() -> str | None:
        assert train.poll() is None, train.communicate()[1][-3000:]
        if not _answers(url):
            return None
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT run_id FROM train_steps GROUP BY run_id HAVING max(step) >= 1"
            ).fetchone()
        return None if row is None else str(row[0])

    return _wait("train step 1", step, timeout=180)


def _supervisor(run_id: str) -> int:
    """The `rollout up --run RUN` process that `rollout train` started."""

    def find() -> int | None:
        for pid in _with_run_id(run_id):
            args = _argv(pid)
            if "rollout.cli" in args and args[args.index("rollout.cli") + 1] == "up":
                return pid
        return None

    return _wait("the supervisor", find, timeout=10)


def _kill_one(
    rng: random.Random,
    up: int,
    url: str,
    state: Path,
    postgres_left: int,
    kills_left: int,
    guard: LeaseGuard,
) -> tuple[str, float]:
    """Kill -9 one random role (or Postgres); wait until its kind is back (`guard` runs while
    it waits). Returns the kind and the recovery time in seconds."""
    roles = _wait("a role", lambda: _children(up) or None, guard=guard)
    # Postgres kills are spread over the schedule: the chance is what is left over what is left.
    if postgres_left and rng.random() < postgres_left / kills_left:
        pid = _wait("the embedded Postgres", lambda: embedded_pid(state), guard=guard)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _wait(
            "Postgres",
            lambda: embedded_pid(state) not in (None, pid) and _answers(url),
            guard=guard,
        )
        return "postgres", time.monotonic() - killed
    kind = rng.choice(sorted(roles))
    old = set(roles[kind])
    for pid in old:
        with contextlib.suppress(ProcessLookupError):  # LeaseGuard's kill, already reaped
            os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    _wait(kind, lambda: set(_children(up).get(kind, [])) - old, guard=guard)
    return kind, time.monotonic() - killed


def _last_step(url: str, run_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(LAST_STEP, (run_id,)).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Variant:
    """What `rollout train` runs under the kills, and how many kills."""

    environment: str
    overrides: tuple[str, ...]
    kills: int
    policies: dict[int, str] | None = None
    """Agent index -> policy, for a run with several policies (checked per policy)."""


ONE_POLICY = Variant("parity.environment:environment", (), KILLS)
TWO_POLICIES = Variant(
    # Two roles, a policy each: the trainer steps both in turn under the one lease, the
    # inference server serves both weight sets, the gateway routes each seat to its policy.
    "gridworld.environment:pair",
    (
        "model.init.alphabet=null",
        "model.init.vocab_size=160",
        "policies={walker: {agents: [walker]}, avoider: {agents: [avoider]}}",
    ),
    KILLS // 2,
    policies={0: "walker", 1: "avoider"},
)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [ONE_POLICY, TWO_POLICIES], ids=["one-policy", "two-policies"])
def test_a_run_survives_random_kill_9s(embedded_state_dir: Path, variant: Variant) -> None:
    seed = int(os.environ.get("ROLLOUT_CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed {seed} (replay: ROLLOUT_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    postgres_kills = rng.randint(*POSTGRES_KILLS)
    kills = variant.kills
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(embedded_state_dir))
    env.pop("ROLLOUT_DATABASE_URL", None)
    url = database_url(embedded_state_dir)  # started here, so the test can read it too
    asyncio.run(apply_migrations(url))
    began = time.monotonic()
    sets = ["stop_at_reward=2", "warmup_steps=2", f"groups_per_step={GROUPS}", *variant.overrides]
    train = subprocess.Popen(
        [
            sys.executable, "-m", "rollout.cli", "train", variant.environment,
            "--preset", "cpu-tiny", "--steps", str(STEPS), "--json",
            *(arg for each in sets for arg in ("--set", each)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    recoveries: dict[str, list[float]] = defaultdict(list)
    held: set[tuple[str, int, int]] = set()
    guard: LeaseGuard | None = None
    try:
        run_id = _first_step(url, train)
        up = _supervisor(run_id)
        guard = LeaseGuard(url, run_id, up)
        print(f"train step 1 after {time.monotonic() - began:.1f} s; run {run_id}")
        for index in range(kills):
            assert train.poll() is None, f"the run ended at kill {index}: {train.communicate()}"
            assert time.monotonic() < began + BUDGET_S, f"over {BUDGET_S} s at kill {index}"
            left = postgres_kills - len(recoveries["postgres"])
            before = time.time()
            kind, seconds = _kill_one(rng, up, url, embedded_state_dir, left, kills - index, guard)
            recoveries[kind].append(seconds)
            if kind == "runner":  # its seats are played again once their claims expire
                _pause(0.5 - seconds, guard)  # a commit already on its way lands first
                held |= held_seats(url, run_id, before)
            pause = rng.random()
            print(f"kill {index + 1:2d} at {time.monotonic() - began:6.1f} s: {kind} back in"
                  f" {seconds:.2f} s, pause {pause:.2f} s")  # fmt: skip
            _pause(pause, guard)
        killed_until = time.monotonic()
        print(f"at step {_last_step(url, run_id)} of {STEPS} after the kills")
        out, err = train.communicate(timeout=max(1.0, began + BUDGET_S - time.monotonic()))
    except BaseException:
        _explain(url, embedded_state_dir, train)
        raise
    finally:
        if guard is not None:
            guard.close()
        if train.poll() is None:
            train.kill()
            train.wait()
    print(f"finished {time.monotonic() - killed_until:.1f} s after the last kill,"
          f" {time.monotonic() - began:.1f} s in all")  # fmt: skip
    print(f"{'kind':<10} {'count':>5} {'median s':>9} {'max s':>7}")
    for kind, times in sorted(recoveries.items()):
        print(f"{kind:<10} {len(times):>5} {statistics.median(times):>9.2f} {max(times):>7.2f}")
    print(f"and {len(guard.killed) if guard else 0} lease holders killed near the end")
    assert sum(map(len, recoveries.values())) == kills
    assert len(recoveries["postgres"]) == postgres_kills
    assert train.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["steps"] == STEPS, summary
    if variant.policies:  # every policy took every step
        names = set(variant.policies.values())
        assert {n: p["steps"] for n, p in summary["policies"].items()} == dict.fromkeys(
            names, STEPS
        ), summary
    left = _with_run_id(run_id)  # the supervisor and its roles have stopped
    assert not left, [_argv(pid) for pid in left]
    check_ledger(
        url,
        run_id,
        steps=STEPS,
        groups=GROUPS,
        trainer_killed=bool(recoveries["trainer"]),
        held=held,
        policies=variant.policies,
    )


def _explain(url: str, state: Path, train: subprocess.Popen[str]) -> None:
    """Print what a failed chaos run left: the runs' settings, `rollout train`'s output and the
    end of each role's log (the state folder is deleted after the test)."""
    if train.poll() is None:
        train.kill()
    out, err = train.communicate()
    print(f"rollout train exit code {train.returncode}; stdout: {out[-2000:]}")
    print(f"rollout train stderr (end): {err[-3000:]}")
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            for row in conn.execute(
                "SELECT run_id, key, value FROM current_settings WHERE NOT key = ANY(%s)",
                (sorted(SECRET_SETTINGS),),
            ).fetchall():
                print("setting", *row)
    except psycopg.Error as error:
        print(f"the ledger cannot be read: {error}")
    for log_file in sorted((state / "logs").glob("*.log")):
        lines = log_file.read_text(errors="replace").splitlines()
        print(f"--- {log_file.name} (last 40 of {len(lines)} lines)")
        print("\n".join(lines[-40:]))

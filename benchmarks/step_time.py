"""Step time: where a platform step's wall time goes, against the trainer's own compute.

Run: `uv run python benchmarks/step_time.py --steps 40` (`--json` for machine-readable output).
Compare two versions of the code: `... step_time.py --steps 100 --against ../other-checkout` runs
the same benchmark on the other checkout's code (in this environment) at the same time as this
one's and prints each role's CPU per step side by side, so that both see the same load.

Runs the README's parity command (`rollout train parity.environment:environment --preset
cpu-tiny`, every role its own process, `stop_at_reward` off so it trains exactly `--steps`
steps), then reads, per train step, from the ledger's own timestamps and the trainer's recorded
metrics:

- wall: seconds between this step's record and the previous one's;
- compute: the trainer's forward + backward + optimizer seconds (`step_seconds`);
- wait: the trainer's seconds from the previous record to this step's compute (`wait_seconds`:
  waiting for complete groups, queueing new ones, publishing serving);
- groups late: how long after the previous record the step's last group completed (its last
  seat end); 0 when the groups were complete before the trainer asked;
- save: saving + uploading the checkpoint before it is recorded (`save_seconds`);
- record: the rest (lease renewal, the fenced step + checkpoint record, retention);
- publish: checkpoint recorded -> converted -> served -> first server acknowledgement;
- sampling: the step's episodes' first turn start to last turn end, and the mean turn;
- CPU by role: CPU seconds per step of each role process (and of Postgres), read from /proc
  every half second over the steps after the first quarter (start-up and warm-up left out),
  against the machine's cores: when their sum per step approaches cores x wall, the step is
  bound by CPU, not by waiting.

Postgres's CPU is also split by the role each backend serves (every role names its connections
`rollout ROLE`, which `pg_stat_activity` shows), so a statement's cost is traced to its caller.

The figures: median wall / median compute (goal <= 2), and CPU milliseconds per episode across
every role and Postgres (goal <= 3). Each role's CPU is split into user and kernel time (the
system calls its sockets cost), and the machine's irq + softirq time is given beside them: the
kernel's packet processing for loopback TCP, which no process's own time includes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from procs import Proc, machine_cpu, processes, role_of, stop_group
from psycopg import sql
from statements import log_every_statement, stop_logging
from statements import summary as summary_of_statements

GOAL = 2.0
"""The goal: median step wall time within this many times the trainer's compute."""
MACHINE = "(machine)"
"""`CpuByRole`'s entry for the machine as a whole: (irq + softirq, idle) seconds."""
SPEC = "parity.environment:environment"
PRESET = "cpu-tiny"

STEPS_SQL = """
SELECT step, extract(epoch FROM created_at), metrics, group_indices
FROM train_steps WHERE run_id = %s ORDER BY step
"""
# (label, table): the first row per checkpoint version.
PUBLISH = [
    ("checkpoint", "checkpoints"),
    ("converted", "conversions"),
    ("served", "serving"),
    ("acked", "serving_acks"),
]
GROUPS_SQL = """
SELECT e.group_index,
       max(extract(epoch FROM s.created_at)) AS ended,
       min(t.started_at) AS first_turn,
       max(t.ended_at) AS last_turn,
       avg(t.ended_at - t.started_at) AS turn_s,
       count(DISTINCT e.episode_id) AS episodes
FROM episodes e
JOIN seat_ends s ON s.episode_id = e.episode_id
LEFT JOIN turns t ON t.episode_id = e.episode_id
WHERE e.run_id = %s AND e.kind = 'train'
GROUP BY e.group_index
"""


class CpuByRole:
    """Samples the CPU time of `root`'s process tree (by role) and its Postgres every `every` s.

    Postgres's backends are also counted by the role each serves (`postgres:ROLE`, beside the
    whole server's `postgres`): every role names its connections `rollout ROLE`
    (`rollout.cli.name_connections`), which `pg_stat_activity` shows for each backend's pid;
    `postgres:other` is the rest (the server's own processes, this benchmark's reads).
    """

    def __init__(self, root: int, postgres_dir: Path, url: str, every: float = 0.5) -> None:
        self.root, self.postgres_dir, self.url, self.every = root, postgres_dir, url, every
        self.samples: list[tuple[float, dict[str, tuple[float, float]]]] = []
        self._serves: dict[int, str] = {}  # backend pid -> the role it serves
        self._conn: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _postmaster(self) -> int | None:
        try:
            return int((self.postgres_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _sample(self) -> dict[str, tuple[float, float]]:
        """(user, system) CPU seconds so far of each role, Postgres and the machine (`machine`:
        every process's and the kernel's own work, /proc/stat)."""
        postmaster = self._postmaster()
        found = processes()
        ours, grew = {self.root}, True
        while grew:  # the run's process tree (roles may start sessions of their own)
            more = {pid for pid, proc in found.items() if proc.parent in ours} - ours
            ours |= more
            grew = bool(more)
        cpu: dict[str, tuple[float, float]] = {}

        def add(key: str, proc: Proc) -> None:
            user, system = cpu.get(key, (0.0, 0.0))
            cpu[key] = (user + proc.user_s, system + proc.system_s)

        for pid, proc in found.items():
            role = role_of(proc) if pid in ours else None
            if role is None and postmaster is not None and postmaster in (pid, proc.parent):
                role = "postgres"
                add(f"postgres:{self._served_by(pid)}", proc)
            if role is not None:
                add(role, proc)
        machine = machine_cpu()
        cpu[MACHINE] = (machine["softirq"] + machine["irq"], machine["idle"] + machine["iowait"])
        return cpu

    def _served_by(self, pid: int) -> str:
        """The role whose connection backend `pid` serves ("other": none, or not known yet)."""
        if pid not in self._serves:
            try:
                if self._conn is None:
                    self._conn = psycopg.connect(
                        self.url, autocommit=True, application_name="step_time", connect_timeout=2
                    )
                rows = self._conn.execute("SELECT pid, application_name FROM pg_stat_activity")
                for backend, name in rows.fetchall():
                    named = bool(name) and name.startswith("rollout ")
                    self._serves[backend] = name.removeprefix("rollout ") if named else "other"
            except psycopg.Error:  # the server is starting or gone: ask again next time
                self._conn = None
        return self._serves.get(pid, "other")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append((time.time(), self._sample()))
        if self._conn is not None:
            self._conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, tuple[float, float]]:
        """(user, system) CPU seconds each role used from `start` to `end` (epoch seconds;
        nearest samples); `MACHINE`'s are (irq + softirq, idle) seconds of all cores.

        A process that exits inside the window loses its CPU since the last sample before its
        exit; roles run for the whole run, so that is at most `every` seconds of one process.
        """
        inside = [(at, cpu) for at, cpu in self.samples if start <= at <= end]
        if len(inside) < 2:
            return {}
        (_, first), (_, last) = inside[0], inside[-1]
        return {
            role: (user - first.get(role, (0.0, 0.0))[0], system - first.get(role, (0.0, 0.0))[1])
            for role, (user, system) in last.items()
        }


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def train(
    steps: int,
    state: Path,
    url: str,
    log: Path,
    timeout_s: float,
    overrides: list[str] | None = None,
) -> tuple[str, CpuByRole]:
    """Run `rollout train` for `steps` steps in state folder `state` (more `--set KEY=VALUE`
    `overrides` after the benchmark's own); return the run's name and its CPU samples."""
    name = f"steptime-{uuid.uuid4().hex[:8]}"
    argv = [
        sys.executable, "-m", "rollout.cli", "train", SPEC, "--preset", PRESET, "--name", name,
        "--set", f"steps={steps}", "--set", "stop_at_reward=null",
    ]  # fmt: skip
    for override in overrides or []:
        argv += ["--set", override]
    env = dict(os.environ, ROLLOUT_STATE_DIR=str(state))
    env.pop("ROLLOUT_DATABASE_URL", None)
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    cpu = CpuByRole(process.pid, state / "postgres", url)
    try:
        code = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(process)
        raise SystemExit(f"rollout train did not finish in {timeout_s:.0f} s; see {log}") from None
    finally:
        cpu.stop()
    if code != 0:
        raise SystemExit(f"rollout train exited {code}; see {log}")
    return name, cpu


def _since(publish: dict[str, dict[int, float]], label: str, version: int) -> float | None:
    """Seconds from checkpoint `version`'s record to its first `label` row (None: none)."""
    at, checkpoint = publish[label].get(version), publish["checkpoint"].get(version)
    return None if at is None or checkpoint is None else at - checkpoint


def profile(url: str, name: str) -> list[dict[str, Any]]:
    """Per train step (1..N): the figures the module docstring lists, in seconds."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT run_id FROM runs WHERE name = %s", (name,)).fetchone()
        if row is None:
            raise SystemExit(f"no run named {name!r}")
        run_id = row[0]
        steps = conn.execute(STEPS_SQL, (run_id,)).fetchall()
        publish: dict[str, dict[int, float]] = {}
        for label, table in PUBLISH:
            query = sql.SQL(
                "SELECT version, min(extract(epoch FROM created_at)) FROM {} "
                "WHERE run_id = %s GROUP BY version"
            ).format(sql.Identifier(table))
            found = conn.execute(query, (run_id,)).fetchall()
            publish[label] = {int(v): float(at) for v, at in found}
        groups = {int(r[0]): r[1:] for r in conn.execute(GROUPS_SQL, (run_id,)).fetchall()}
    rows: list[dict[str, Any]] = []
    for (_, previous_at, _, _), (step, at, metrics, indices) in itertools.pairwise(steps):
        previous_at, at = float(previous_at), float(at)
        mine = [groups[g] for g in indices if g in groups]
        ended = max((float(g[0]) for g in mine), default=previous_at)
        turns = [g for g in mine if g[1] is not None]
        wall = at - previous_at
        compute = float(metrics.get("step_seconds", float("nan")))
        wait = float(metrics.get("wait_seconds", float("nan")))
        save = float(metrics.get("save_seconds", float("nan")))
        since = {label: _since(publish, label, int(step)) for label, _ in PUBLISH[1:]}

        rows.append(
            {
                "step": int(step),
                "at": at,
                "wall_s": wall,
                "compute_s": compute,
                "wait_s": wait,
                "groups_late_s": max(0.0, ended - previous_at),
                "save_s": save,
                "record_s": wall - wait - compute - save,
                "converted_s": since["converted"],
                "served_s": since["served"],
                "acked_s": since["acked"],
                "sampling_span_s": (
                    max(float(g[2]) for g in turns) - min(float(g[1]) for g in turns)
                    if turns
                    else None
                ),
                "turn_s": statistics.fmean(float(g[3]) for g in turns) if turns else None,
                "episodes": sum(int(g[4]) for g in mine),
            }
        )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The median of each figure over the steps (None where no step has it)."""
    out: dict[str, float | None] = {}
    for key in rows[0]:
        if key == "at":
            continue
        values = [r[key] for r in rows if isinstance(r[key], int | float) and r[key] == r[key]]
        out[key] = statistics.median(values) if values else None
    return out


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


COLUMNS = [
    ("wall_s", "wall"),
    ("compute_s", "compute"),
    ("wait_s", "wait"),
    ("groups_late_s", "grp late"),
    ("save_s", "save"),
    ("record_s", "record"),
    ("converted_s", "convert"),
    ("served_s", "served"),
    ("acked_s", "acked"),
    ("sampling_span_s", "sampling"),
    ("turn_s", "turn"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="train steps (default 40)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the run")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another preset override for the run (repeatable), e.g. runner_concurrency=128",
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="also count Postgres's statements per episode, and the CPU each cost, from its log",
    )
    parser.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also run the same benchmark on another checkout's code (its src/ and "
        "environments/, in this environment) at the same time, and compare the two",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.against:
        return against(args.against, sys.argv[1:] if argv is None else argv, as_json=args.json)

    from rollout.ledger import ledger_url
    from rollout.ledger.embedded import stop_embedded

    work = Path(tempfile.mkdtemp(prefix="rollout-steptime-"))
    statements: list[str] = []
    state = work / "state"
    os.environ["ROLLOUT_STATE_DIR"] = str(state)
    load_start = _load()
    began = time.time()
    try:
        url = ledger_url()  # the embedded Postgres the run's roles share
        if args.statements:
            log_every_statement(url)
        name, cpu = train(args.steps, state, url, work / "train.log", args.timeout, args.overrides)
        rows = profile(url, name)
        if args.statements and rows:
            stop_logging(url)
            window = rows[len(rows) // 4 :]
            statements = summary_of_statements(
                state / "postgres" / "log",
                window[0]["at"] - window[0]["wall_s"],
                window[-1]["at"],
                sum(r["episodes"] for r in window),
            )
    finally:
        stop_embedded(state)
    if not rows:
        raise SystemExit(f"no train steps recorded; see {work / 'train.log'}")
    shutil.rmtree(work, ignore_errors=True)
    med = summary(rows)
    ratio = (med["wall_s"] or 0.0) / (med["compute_s"] or float("nan"))
    window = rows[len(rows) // 4 :]
    used = cpu.between(window[0]["at"] - window[0]["wall_s"], window[-1]["at"])
    kernel_irq, idle = used.pop(MACHINE, (0.0, 0.0))
    n = len(window)
    served = {r: used.pop(r) for r in [r for r in used if r.startswith("postgres:")]}
    postgres_by_role = {
        r.removeprefix("postgres:"): round((u + k) / n, 3)
        for r, (u, k) in sorted(served.items(), key=lambda item: -sum(item[1]))
    }
    cpu_per_step = {role: round((u + k) / n, 3) for role, (u, k) in sorted(used.items())}
    system_per_step = {role: round(k / n, 3) for role, (_, k) in sorted(used.items())}
    all_roles = sum(cpu_per_step.values())
    episodes = statistics.fmean(r["episodes"] for r in window) or float("nan")
    window_s = window[-1]["at"] - window[0]["at"] + window[0]["wall_s"]
    cores = os.cpu_count() or 1
    result = {
        "steps": len(rows),
        "overrides": args.overrides,
        "seconds": round(time.time() - began, 1),
        "load_average_at_start": load_start,
        "load_average_at_end": _load(),
        "median": med,
        "wall_over_compute": ratio,
        "cpu_s_per_step": cpu_per_step,
        "postgres_s_per_step_by_role": postgres_by_role,
        "system_s_per_step": system_per_step,
        "irq_softirq_s_per_step": round(kernel_irq / n, 3),
        "idle_s_per_step": round(idle / n, 3),
        "episodes_per_step": episodes,
        "cpu_ms_per_episode": round(1000 * all_roles / episodes, 2),
        "cores_busy": round(all_roles * n / window_s, 2) if used else None,
        "cores": cores,
        "statements": statements,
        "per_step": rows,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    extra = "".join(f" --set {o}" for o in args.overrides)
    print(f"`rollout train {SPEC} --preset {PRESET}{extra}`, {len(rows)} steps, seconds per step")
    print(f"load average {load_start} at start, {result['load_average_at_end']} at end")
    print(f"{'step':>5}" + "".join(f"{label:>10}" for _, label in COLUMNS))
    for row in rows:
        print(f"{row['step']:>5}" + "".join(f"{_fmt(row[key]):>10}" for key, _ in COLUMNS))
    print(f"{'med':>5}" + "".join(f"{_fmt(med[key]):>10}" for key, _ in COLUMNS))
    if used:
        roles = ", ".join(
            f"{role} {sec:.3f} ({system_per_step[role]:.3f})" for role, sec in cpu_per_step.items()
        )
        print(
            f"CPU seconds per step (steps {window[0]['step']}-{window[-1]['step']}; "
            f"in brackets the kernel's part on the process's behalf): {roles}"
        )
        print(
            f"all roles: {all_roles:.3f} CPU s per step, {result['cores_busy']} of {cores} cores "
            f"busy; {result['cpu_ms_per_episode']:.2f} ms per episode ({episodes:.0f} a step; "
            f"goal <= 3); the machine's irq + softirq {result['irq_softirq_s_per_step']:.3f} s "
            f"and idle {result['idle_s_per_step']:.3f} s per step, outside every process's time"
        )
        if postgres_by_role:
            print(
                "Postgres's CPU s per step by the role each backend serves: "
                + ", ".join(f"{role} {sec:.3f}" for role, sec in postgres_by_role.items())
            )
    if statements:
        print("\n".join(statements))
    goal = "met" if ratio <= GOAL else "NOT met"
    print(f"median wall / median compute: {ratio:.2f}x (goal <= {GOAL:g}: {goal})")
    return 0


def _code_path(checkout: Path) -> str:
    return os.pathsep.join(str(checkout / part) for part in ("src", "environments"))


def against(other: str, argv: list[str], *, as_json: bool) -> int:
    """Run this benchmark on `other`'s code and on this checkout's at the same time (so that both
    see the same load: on a shared machine the figures of two runs one after the other are not
    comparable), then print each role's CPU per step and the goals' figures side by side."""
    here = Path(__file__).resolve().parents[1]
    there = Path(other).expanduser().resolve()
    if not (there / "src" / "rollout").is_dir():
        raise SystemExit(f"--against: {other!r} is not a checkout of rollout (no src/rollout)")
    rest: list[str] = []
    skip = False
    for arg in argv:  # the same options, without --against and --json
        if skip:
            skip = False
        elif arg == "--against":
            skip = True
        elif not arg.startswith("--against=") and arg != "--json":
            rest.append(arg)
    processes = {
        label: subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *rest, "--json"],
            env=dict(os.environ, PYTHONPATH=_code_path(checkout)),
            stdout=subprocess.PIPE,
            cwd=checkout,
        )
        for label, checkout in (("against", there), ("this", here))
    }
    results: dict[str, Any] = {}
    for label, process in processes.items():
        out, _ = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"the run on {label} code failed (exit {process.returncode})")
        results[label] = json.loads(out)
    if as_json:
        print(json.dumps(results, indent=2))
        return 0
    a, b = results["against"], results["this"]
    print(f"{there} (against) vs {here} (this), at the same time, {a['steps']} steps each")
    print(f"load average {a['load_average_at_start']} at start, {b['load_average_at_end']} at end")
    print(f"{'CPU s per step':<26}{'against':>10}{'this':>10}{'this/against':>14}")
    roles = sorted(set(a["cpu_s_per_step"]) | set(b["cpu_s_per_step"]))
    rows = [(role, a["cpu_s_per_step"].get(role, 0.0), b["cpu_s_per_step"].get(role, 0.0))
            for role in roles]  # fmt: skip
    rows.append(("all roles", sum(a["cpu_s_per_step"].values()), sum(b["cpu_s_per_step"].values())))
    rows.append(("ms per episode (goal <= 3)", a["cpu_ms_per_episode"], b["cpu_ms_per_episode"]))
    rows.append(("wall / compute (goal <= 2)", a["wall_over_compute"], b["wall_over_compute"]))
    for label, x, y in rows:
        ratio = f"{y / x:.2f}" if x else "-"
        print(f"{label:<26}{x:>10.3f}{y:>10.3f}{ratio:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

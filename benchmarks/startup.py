"""Start-up: seconds from `rollout train` to the first sampled turn, per role.

Run: `uv run python benchmarks/startup.py` (`--json` for machine-readable output).

Two measurements, each with bytecode (the .pyc files `uv sync --compile-bytecode` writes) and
without it (`PYTHONPYCACHEPREFIX` pointed at an empty folder and `PYTHONDONTWRITEBYTECODE=1`: every
process compiles everything it imports, as on a venv installed without bytecode on a machine that
sets PYTHONDONTWRITEBYTECODE), side by side in one run:

1. Imports per role: a fresh interpreter imports what each role's process imports (the gateway
   also builds its renderer), best of `--repeats`. Shows which roles load torch/transformers.
2. `rollout train parity.environment:environment --preset cpu-tiny` end to end, with a warm
   cache (the model folder built and the embedded Postgres running, by a first run that is not
   counted): the time from the command to the run being created, to each role being ready (the
   inference server and the gateway advertise their URL, the trainer publishes checkpoint v0,
   the inference server acknowledges serving it, a runner claims a seat) and to the first
   sampled turn, read from the ledger's own timestamps. The command is stopped after that turn.

Goal: under 5 s to the first turn with bytecode. The ratio is no-bytecode / bytecode.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from procs import stop_group
from psycopg import sql

SPEC = "parity.environment:environment"
PRESET = "cpu-tiny"
TIMEOUT_S = 300.0

ROLE_IMPORTS: dict[str, str] = {
    "cli": "import rollout.cli",
    "gateway": (
        "import sys, rollout.launch.roles\n"
        "from rollout.gateway.app import create_app\n"
        "from rollout.inference.remote import RemoteBackend\n"
        "from rollout.net.server import AppServer\n"
        "from rollout.rendering import HFRenderer\n"
        "HFRenderer(sys.argv[1])"
    ),
    "runner": "import rollout.launch.roles, rollout.runners.runner, parity.environment",
    "inference": "import rollout.launch.roles, rollout.inference.server, rollout.inference.local",
    "trainer": "import rollout.launch.roles, rollout.training.loop",
}
HEAVY = (
    "import sys; print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))"
)

# (milestone, table, epoch column, extra condition): the first such row of the run. Settings,
# checkpoints, acks and claims carry the ledger's clock; turns.started_at the gateway's (the
# same machine).
MILESTONES: list[tuple[str, str, str, str]] = [
    ("inference ready (URL advertised)", "settings", "created_at", "key = 'inference_url'"),
    ("gateway ready (URL advertised)", "settings", "created_at", "key = 'gateway_url'"),
    ("trainer: checkpoint v0", "checkpoints", "created_at", "true"),
    ("inference serves v0 (ack)", "serving_acks", "created_at", "true"),
    ("runner claims a seat", "seat_claims", "claimed_at", "true"),
    ("first sampled turn", "turns", "started_at", "true"),
]


def _milestone_sql(table: str, column: str, condition: str) -> sql.Composed:
    at = sql.SQL("{}") if column == "started_at" else sql.SQL("extract(epoch FROM {})")
    return sql.SQL("SELECT min({at}) FROM {table} WHERE run_id = %s AND {condition}").format(
        at=at.format(sql.Identifier(column)),
        table=sql.Identifier(table),
        condition=sql.SQL(condition),  # type: ignore[arg-type]  # constants of this file
    )


def _env(bytecode: bool, pycache: Path, state: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if not bytecode:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)  # empty: no .pyc is found, none is written
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if state is not None:
        env["ROLLOUT_STATE_DIR"] = str(state)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def role_imports(repeats: int, pycache: Path, tokenizer_dir: Path) -> list[dict[str, Any]]:
    """Best-of-`repeats` wall and CPU seconds of a fresh interpreter importing each role's
    modules (CPU time, user + system, is what other load on the machine disturbs least)."""
    rows = []
    for role, code in ROLE_IMPORTS.items():
        row: dict[str, Any] = {"role": role}
        for bytecode in (True, False):
            best, best_cpu = float("inf"), float("inf")
            heavy: list[str] = []
            for _ in range(repeats):
                started, cpu = time.perf_counter(), _children_cpu()
                out = subprocess.run(
                    [sys.executable, "-c", f"{code}\n{HEAVY}", str(tokenizer_dir)],
                    env=_env(bytecode, pycache),
                    capture_output=True,
                    text=True,
                    check=True,
                )
                best = min(best, time.perf_counter() - started)
                best_cpu = min(best_cpu, _children_cpu() - cpu)
                heavy = json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))
            key = "bytecode" if bytecode else "no_bytecode"
            row[f"{key}_s"] = round(best, 2)
            row[f"{key}_cpu_s"] = round(best_cpu, 2)
            row["imports_torch_or_transformers"] = heavy
        rows.append(row)
    return rows


def _query(conn: psycopg.Connection[Any], query: sql.Composed, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    return row[0] if row else None


def train_to_first_turn(url: str, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Start `rollout train`, time each milestone from the ledger, stop after the first turn."""
    name = f"startup-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "rollout.cli", "train", SPEC, "--preset", PRESET, "--name", name]
    with log.open("ab") as out:
        began = time.time()
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    times: dict[str, float] = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            run_id = None
            while time.time() - began < TIMEOUT_S:
                if process.poll() is not None:
                    raise RuntimeError(f"rollout train exited {process.returncode}; see {log}")
                if run_id is None:
                    try:
                        row = conn.execute(
                            "SELECT run_id, extract(epoch FROM created_at) FROM runs "
                            "WHERE name = %s",
                            (name,),
                        ).fetchone()
                    except psycopg.errors.UndefinedTable:  # a fresh database: not migrated yet
                        row = None
                    if row is not None:
                        run_id, times["run created"] = row[0], float(row[1])
                if run_id is not None:
                    for label, table, column, condition in MILESTONES:
                        if label in times:
                            continue
                        query = _milestone_sql(table, column, condition)
                        if (value := _query(conn, query, run_id)) is not None:
                            times[label] = float(value)
                    if "first sampled turn" in times:
                        break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"no turn within {TIMEOUT_S:.0f} s; see {log}")
    finally:
        if process.poll() is None:
            stop_group(process)
    return {label: round(at - began, 2) for label, at in sorted(times.items(), key=lambda i: i[1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="import timings: best of N")
    parser.add_argument("--skip-train", action="store_true", help="only the import timings")
    parser.add_argument("--skip-imports", action="store_true", help="only the train timings")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    from rollout.ledger import ledger_url
    from rollout.ledger.embedded import stop_embedded
    from rollout.models.default_tokenizer import default_tokenizer_dir

    tokenizer_dir = default_tokenizer_dir()  # the user's cached one
    work = Path(tempfile.mkdtemp(prefix="rollout-startup-"))
    pycache = work / "empty-pycache"
    state = work / "state"
    os.environ["ROLLOUT_STATE_DIR"] = str(state)  # this process and its children share it
    results: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "role_imports": (
            [] if args.skip_imports else role_imports(args.repeats, pycache, tokenizer_dir)
        ),
    }
    if not args.skip_train:
        try:
            url = ledger_url()  # starts the embedded Postgres; every run below reuses it
            log = work / "train.log"
            train_to_first_turn(url, _env(True, pycache, state), log)  # warm: model folder built
            results["train_to_first_turn"] = {
                "bytecode": train_to_first_turn(url, _env(True, pycache, state), log),
                "no_bytecode": train_to_first_turn(url, _env(False, pycache, state), log),
            }
        finally:
            stop_embedded(state)
    shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    m = results["machine"]
    print(
        f"machine: {m['platform']}, {m['cpu_count']} CPUs, load average "
        f"{m['load_average_at_start']} at start, {m['load_average_at_end']} at end"
    )
    if results["role_imports"]:
        print(f"\nimports per role (fresh interpreter, best of {args.repeats}; seconds)")
        print(
            f"{'role':<12}{'wall':>8}{'CPU':>8}{'wall, no bytecode':>19}{'CPU':>8}{'CPU ratio':>11}"
            "  torch/transformers"
        )
        for row in results["role_imports"]:
            ratio = row["no_bytecode_cpu_s"] / row["bytecode_cpu_s"]
            heavy = ", ".join(row["imports_torch_or_transformers"]) or "none"
            print(
                f"{row['role']:<12}{row['bytecode_s']:>7.2f}s{row['bytecode_cpu_s']:>7.2f}s"
                f"{row['no_bytecode_s']:>18.2f}s{row['no_bytecode_cpu_s']:>7.2f}s{ratio:>10.1f}x"
                f"  {heavy}"
            )
    if "train_to_first_turn" in results:
        runs = results["train_to_first_turn"]
        print(f"\n`rollout train {SPEC} --preset {PRESET}`, warm cache: seconds from the command")
        print(f"{'milestone':<36}{'bytecode':>10}{'no bytecode':>13}")
        for label in runs["bytecode"]:
            other = runs["no_bytecode"].get(label, float("nan"))
            print(f"{label:<36}{runs['bytecode'][label]:>9.2f}s{other:>12.2f}s")
        first = "first sampled turn"
        ratio = runs["no_bytecode"][first] / runs["bytecode"][first]
        goal = "met" if runs["bytecode"][first] < 5.0 else "NOT met"
        print(f"first turn: {ratio:.1f}x faster with bytecode; goal < 5 s with bytecode: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

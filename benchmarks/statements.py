"""Postgres statements of a benchmark run, counted from the server's own log.

`log_every_statement(url)` makes the server log each statement with its duration
(`log_min_duration_statement = 0`) and the CPU its backend spent on it (`log_statement_stats`:
user and system seconds from `getrusage`), a reload: no restart; `read_log(path, start, end)`
reads what it logged between two times and sums, per statement (its text with constants and
whitespace folded), how many were executed, the server's milliseconds spent parsing, binding
and executing them, and the CPU milliseconds of those messages. psycopg sends each statement
by the extended protocol, which the server logs as three timed lines (parse, bind, execute),
each with its usage; a simple-protocol statement is one line. Durations are the server's wall
time for each message, so on a busy machine they include waiting for the CPU (they rank the
trainer's read of trainable groups first at three times its CPU share); the CPU is what the
statement cost. Logging costs the server CPU too: a run with it on is slower, so take its
shares, not its totals; counts are exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

PREFIX = "%m [%p] "
ENTRY = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (?P<tz>\S+) \[(?P<pid>\d+)\] "
    r"(?P<level>[A-Z]+):  (?P<text>.*)$"
)
DURATION = re.compile(
    r"^duration: (?P<ms>[\d.]+) ms  (?P<kind>parse|bind|execute|statement)(?: [^:]*)?: "
    r"(?P<text>.*)$"
)
STATISTICS = re.compile(r"^(?:PARSE MESSAGE|BIND MESSAGE|EXECUTE MESSAGE|QUERY) STATISTICS$")
USAGE = re.compile(r"!\s+(?P<user>[\d.]+) s user, (?P<system>[\d.]+) s system")


def log_every_statement(url: str) -> None:
    """Make the server at `url` log every statement with its duration, from now on."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        conn.execute("ALTER SYSTEM SET log_statement_stats = on")
        conn.execute(f"ALTER SYSTEM SET log_line_prefix = '{PREFIX}'")
        conn.execute("SELECT pg_reload_conf()")


def stop_logging(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET log_min_duration_statement")
        conn.execute("ALTER SYSTEM RESET log_statement_stats")
        conn.execute("ALTER SYSTEM RESET log_line_prefix")
        conn.execute("SELECT pg_reload_conf()")


def shape(text: str) -> str:
    """A statement's text with its constants and whitespace folded (one key per statement).

    >>> shape("SELECT  a FROM t WHERE id = 'x1' AND n > 42 LIMIT $1")
    'SELECT a FROM t WHERE id = ? AND n > ? LIMIT ?'
    """
    text = re.sub(r"'(?:[^']|'')*'", "?", text)
    text = re.sub(r"\$\d+|\b\d+(?:\.\d+)?\b", "?", text)
    return re.sub(r"\s+", " ", text).strip()


@dataclass
class Statement:
    text: str
    executed: int = 0
    server_ms: float = 0.0
    cpu_ms: float = 0.0
    """The backend's user + system CPU for the statement's messages (`log_statement_stats`)."""
    kinds: dict[str, float] = field(default_factory=dict)


def read_log(lines: Iterable[str], start: float, end: float) -> dict[str, Statement]:
    """Statements logged from `start` to `end` (epoch seconds), by `shape`.

    An entry is a line that begins with the log's prefix and the lines after it that do not (a
    statement's text, a usage report). A duration entry carries its statement's text; a
    statistics entry's usage (its DETAIL) belongs to the STATEMENT entry that follows it.

    >>> log = [
    ...     "2026-12-07 13:05:01.178 UTC [20408] LOG:  duration: 0.407 ms  statement: SELECT 1",
    ...     "2026-12-07 13:05:01.178 UTC [20408] LOG:  QUERY STATISTICS",
    ...     "2026-12-07 13:05:01.178 UTC [20408] DETAIL:  ! system usage stats:",
    ...     "\t!\t0.000200 s user, 0.000100 s system, 0.000350 s elapsed",
    ...     "\t!\t[0.001000 s user, 0.002761 s system total]",
    ...     "2026-12-07 13:05:01.178 UTC [20408] STATEMENT:  SELECT 1",
    ... ]
    >>> found = read_log(log, 0.0, 2e9)
    >>> [(s.text, s.executed, s.server_ms, round(s.cpu_ms, 3)) for s in found.values()]
    [('SELECT ?', 1, 0.407, 0.3)]
    """
    found: dict[str, Statement] = {}

    def entries() -> Iterable[tuple[re.Match[str], list[str]]]:
        head: re.Match[str] | None = None
        rest: list[str] = []
        for line in lines:
            match = ENTRY.match(line.rstrip("\n"))
            if match is not None or re.match(r"^\d{4}-\d\d-\d\d ", line):
                if head is not None:
                    yield head, rest
                head, rest = match, []
            elif head is not None:
                rest.append(line.strip())
        if head is not None:
            yield head, rest

    def at(head: re.Match[str]) -> float:
        naive = datetime.strptime(head["at"], "%Y-%m-%d %H:%M:%S.%f")
        local = naive.replace(tzinfo=UTC) if head["tz"] == "UTC" else naive.astimezone()
        return local.timestamp()

    usage: dict[str, float] = {}  # per backend, the CPU of its last statistics entry
    statistics: set[str] = set()  # backends whose next DETAIL is a usage report
    for head, rest in entries():
        pid, level, text = head["pid"], head["level"], head["text"]
        if level == "LOG" and STATISTICS.match(text):
            statistics.add(pid)
            continue
        if level == "DETAIL" and pid in statistics:
            statistics.discard(pid)
            for line in rest:
                match = USAGE.search(line)
                if match is not None:
                    usage[pid] = (float(match["user"]) + float(match["system"])) * 1000
                    break
            continue
        if level == "STATEMENT" and pid in usage:
            cpu = usage.pop(pid)
            if start <= at(head) <= end:
                key = shape(" ".join([text, *rest]))
                found.setdefault(key, Statement(key)).cpu_ms += cpu
            continue
        duration = DURATION.match(text) if level == "LOG" else None
        if duration is None or not start <= at(head) <= end:
            continue
        key = shape(" ".join([duration["text"], *rest]))
        entry = found.setdefault(key, Statement(key))
        ms = float(duration["ms"])
        entry.server_ms += ms
        entry.kinds[duration["kind"]] = entry.kinds.get(duration["kind"], 0.0) + ms
        if duration["kind"] in ("execute", "statement"):
            entry.executed += 1
    return found


def summary(path: Path, start: float, end: float, episodes: int, top: int = 15) -> list[str]:
    """Lines for a report: statements, server ms and CPU ms per episode, the `top` costliest
    in CPU first."""
    with path.open(errors="replace") as log:
        found = read_log(log, start, end)
    rows = sorted(found.values(), key=lambda s: (-s.cpu_ms, -s.server_ms))
    total_n = sum(s.executed for s in rows)
    total_ms = sum(s.server_ms for s in rows)
    total_cpu = sum(s.cpu_ms for s in rows)
    out = [
        f"Postgres statements: {total_n / episodes:.2f} per episode, "
        f"{total_ms / episodes:.3f} server ms and {total_cpu / episodes:.3f} CPU ms per episode "
        f"({total_n} in all; the CPU of a run that logs each statement, more than without)",
        f"{'per episode':>12}{'ms/episode':>12}{'CPU ms/ep':>11}{'CPU share':>10}  statement",
    ]
    for s in rows[:top]:
        text = s.text if len(s.text) <= 100 else s.text[:97] + "..."
        share = f"{100 * s.cpu_ms / total_cpu:.1f}%" if total_cpu else "-"
        out.append(
            f"{s.executed / episodes:>12.3f}{s.server_ms / episodes:>12.4f}"
            f"{s.cpu_ms / episodes:>11.4f}{share:>10}  {text}"
        )
    return out

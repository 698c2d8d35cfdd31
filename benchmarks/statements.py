"""Postgres statements of a benchmark run, counted from the server's own log.

`log_every_statement(url)` makes the server log each statement with its duration
(`log_min_duration_statement = 0`, a reload: no restart); `read_log(path, start, end)` reads
what it logged between two times and sums, per statement (its text with constants and
whitespace folded), how many were executed and the server's milliseconds spent parsing,
binding and executing them. psycopg sends each statement by the extended protocol, which
the server logs as three timed lines (parse, bind, execute); a simple-protocol statement is
one line. Durations are the server's wall time for each message, so on a busy machine they
include waiting for the CPU; counts are exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg

PREFIX = "%m [%p] "
LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (?P<tz>\S+) \[(?P<pid>\d+)\] LOG:  duration: "
    r"(?P<ms>[\d.]+) ms  (?P<kind>parse|bind|execute|statement)(?: [^:]*)?: (?P<text>.*)$"
)


def log_every_statement(url: str) -> None:
    """Make the server at `url` log every statement with its duration, from now on."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        conn.execute(f"ALTER SYSTEM SET log_line_prefix = '{PREFIX}'")
        conn.execute("SELECT pg_reload_conf()")


def stop_logging(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET log_min_duration_statement")
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
    kinds: dict[str, float] = field(default_factory=dict)


def read_log(lines: Iterable[str], start: float, end: float) -> dict[str, Statement]:
    """Statements logged from `start` to `end` (epoch seconds), by `shape`.

    A statement's text is on its first line; the lines after it that do not begin a new log
    entry continue it.
    """
    found: dict[str, Statement] = {}
    current: list[str] = []
    head: re.Match[str] | None = None

    def close() -> None:
        if head is None:
            return
        naive = datetime.strptime(head["at"], "%Y-%m-%d %H:%M:%S.%f")
        at = (naive.replace(tzinfo=UTC) if head["tz"] == "UTC" else naive.astimezone()).timestamp()
        if not start <= at <= end:
            return
        key = shape(" ".join([head["text"], *current]))
        entry = found.setdefault(key, Statement(key))
        ms = float(head["ms"])
        entry.server_ms += ms
        entry.kinds[head["kind"]] = entry.kinds.get(head["kind"], 0.0) + ms
        if head["kind"] in ("execute", "statement"):
            entry.executed += 1

    for line in lines:
        match = LINE.match(line)
        if match is not None or re.match(r"^\d{4}-\d\d-\d\d ", line):
            close()
            head, current = match, []
        elif head is not None:
            current.append(line.strip())
    close()
    return found


def summary(path: Path, start: float, end: float, episodes: int, top: int = 15) -> list[str]:
    """Lines for a report: statements and server ms per episode, the `top` costliest first."""
    with path.open(errors="replace") as log:
        found = read_log(log, start, end)
    rows = sorted(found.values(), key=lambda s: -s.server_ms)
    total_n = sum(s.executed for s in rows)
    total_ms = sum(s.server_ms for s in rows)
    out = [
        f"Postgres statements: {total_n / episodes:.2f} per episode, "
        f"{total_ms / episodes:.3f} server ms per episode ({total_n} in all)",
        f"{'per episode':>12}{'ms/episode':>12}  statement",
    ]
    for s in rows[:top]:
        text = s.text if len(s.text) <= 110 else s.text[:107] + "..."
        out.append(f"{s.executed / episodes:>12.3f}{s.server_ms / episodes:>12.4f}  {text}")
    return out

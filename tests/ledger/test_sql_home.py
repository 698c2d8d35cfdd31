"""The ledger is the one home for SQL (CONTRIBUTING.md, "Ledger queries").

Read from the source with `ast`, every failure naming file and line:

- no module of `src/rollout` outside `ledger/` holds an SQL statement (a string constant, or a
  `+` of constants, that reads as `SELECT ... FROM`, `INSERT INTO`, `UPDATE ... SET`,
  `DELETE FROM` or a `CREATE`/`ALTER`/`DROP` of a schema object; docstrings are prose) or
  imports a database driver (`psycopg`, `psycopg_pool`);
- the monitor reads no row by position: no `row[0]` (an item taken by a constant index and not
  then read by name, as `rows[0]["version"]` is) and no tuple unpacked from an awaited read
  (`for a, b in await ...`).

The detectors are tested on small sources first, so that a check that passes has looked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "rollout"
LEDGER = SOURCE / "ledger"
MONITOR = SOURCE / "monitor"

SQL = re.compile(
    r"\bSELECT\b.*?\bFROM\b"
    r"|\bINSERT\s+INTO\b"
    r"|\bUPDATE\s+\w+(\s+(AS\s+)?\w+)?\s+SET\b"
    r"|\bDELETE\s+FROM\b"
    r"|\b(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?(UNIQUE\s+)?(TABLE|INDEX|VIEW|FUNCTION"
    r"|TRIGGER|EXTENSION|SCHEMA|DATABASE|SEQUENCE|TYPE|ROLE|MATERIALIZED\s+VIEW)\b",
    re.IGNORECASE | re.DOTALL,
)
DRIVERS = ("psycopg", "psycopg_pool")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _text(node: ast.AST) -> str | None:
    """The text of a string constant, an f-string's literal parts, or a `+` of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(_text(part) or " " for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None or right is not None:
            return (left or " ") + (right or " ")
    return None


def sql_statements(source: str) -> Iterator[tuple[int, str]]:
    """(line, the statement's start) of each SQL statement in `source`."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    inner: set[int] = set()  # parts of a larger `+` or f-string, reported once, at its start
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in skip or id(node) in inner:
            continue
        text = _text(node)
        if text is None:
            continue
        inner.update(id(child) for child in ast.walk(node) if child is not node)
        match = SQL.search(text)
        if match:
            yield node.lineno, " ".join(match.group(0).split())[:60]


def driver_imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) of each import of a database driver in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in DRIVERS:
                yield node.lineno, name


def positional_reads(source: str) -> list[tuple[int, str]]:
    """(line, code) of each row read by position in `source`, in line order."""
    return sorted(_positional_reads(source))


def _positional_reads(source: str) -> Iterator[tuple[int, str]]:
    tree = ast.parse(source)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        # An item of a call's result (`text.splitlines()[0]`) is not a row.
        if (
            isinstance(node, ast.Subscript)
            and _constant_int(node.slice)
            and not isinstance(node.value, ast.Call)
        ):
            parent = parents.get(id(node))
            by_name = isinstance(parent, ast.Attribute) or (
                isinstance(parent, ast.Subscript)
                and parent.value is node
                and isinstance(parent.slice, ast.Constant)
                and isinstance(parent.slice.value, str)
            )
            if not by_name:
                yield node.lineno, ast.unparse(node)
        targets: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            targets = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            targets = [(node.target, node.iter)]
        for target, value in targets:
            if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Await):
                yield value.lineno, ast.unparse(target)


def _constant_int(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _sources(folder: Path, *, outside: Path | None = None) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*.py")):
        if outside is not None and path.is_relative_to(outside):
            continue
        yield str(path.relative_to(ROOT)), path.read_text()


# ----------------------------------------------------------------------------------------------
# the detectors, on small sources


def test_the_sql_detector_finds_statements_and_passes_prose() -> None:
    source = '''
"""Module docstring: we SELECT runs FROM the ledger, in prose."""
QUERY = "SELECT run_id, name FROM runs WHERE run_id = %s"
lower = "select x\\n from t"
joined = ("INSERT INTO runs (run_id)" " VALUES (%s)")
added = "UPDATE leases" + " SET expires_at = now()"
aliased = f"UPDATE seats AS s SET done = true WHERE s.agent = {1}"
gone = "delete from runs"
schema = "CREATE OR REPLACE VIEW winning AS SELECT 1"
message = "create a run first, then select one of its episodes"
words = "insert the key into the table; update settings from the CLI"


def f():
    """Deletes nothing: DELETE FROM is only mentioned here."""
    return "ALTER TABLE turns ADD COLUMN x int"
'''
    found = list(sql_statements(source))
    assert [line for line, _ in found] == [3, 4, 5, 6, 7, 8, 9, 16], found
    assert found[0][1] == "SELECT run_id, name FROM"
    assert found[3][1] == "UPDATE leases SET"


def test_the_driver_detector_finds_every_form_of_import() -> None:
    source = """
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
import psycopg.sql as sql
from rollout.ledger import Ledger
from .psycopg import nothing
"""
    assert list(driver_imports(source)) == [
        (2, "psycopg"),
        (3, "psycopg.rows"),
        (4, "psycopg_pool"),
        (5, "psycopg.sql"),
    ]


def test_the_position_detector_finds_rows_read_by_position() -> None:
    source = """
async def f(store):
    row = (await store.one())[0]
    a = row[3]
    b = row[-1]
    (one,) = await store.fetch()
    for name, value in await store.fetch():
        pass
    pairs = [x for x, y in await store.fetch()]
    first = rows[0]["version"]
    last = rows[-1].error
    items = {k: v for k, v in row.items()}
    x, y = divmod(7, 2)
    head = text.splitlines()[0]
"""
    found = list(positional_reads(source))
    assert [line for line, _ in found] == [3, 4, 5, 6, 7, 9], found
    assert found[1][1] == "row[3]"


# ----------------------------------------------------------------------------------------------
# the rules, on the source


def _found(detector: Callable[[str], Iterable[tuple[int, str]]], folder: Path, **kw: Any) -> str:
    """Each finding of `detector` in the sources under `folder`, as `path:line: what`."""
    return "\n".join(
        f"{path}:{line}: {what}"
        for path, source in _sources(folder, **kw)
        for line, what in detector(source)
    )


def test_no_sql_outside_the_ledger() -> None:
    found = _found(sql_statements, SOURCE, outside=LEDGER)
    assert not found, "SQL belongs in src/rollout/ledger/ (a named query):\n" + found


def test_only_the_ledger_imports_a_database_driver() -> None:
    found = _found(driver_imports, SOURCE, outside=LEDGER)
    assert not found, "only src/rollout/ledger/ talks to Postgres:\n" + found


def test_the_ledger_does_hold_sql() -> None:
    # The scan above reads what it should: the ledger's own files are full of statements.
    assert _found(sql_statements, LEDGER).count("\n") > 50


def test_the_monitor_reads_rows_by_name() -> None:
    found = _found(positional_reads, MONITOR)
    assert not found, "read rows by column name (dict_row), not by position:\n" + found

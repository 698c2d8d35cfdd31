"""The platform's packages form layers (docs/architecture.md): imports go down, never up, and no
package imports another that imports it back.

Every `import` and `from ... import` in `src/rollout` counts, at module level or inside a
function (a lazy import is still a dependency). A failure names the importing file and line.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "rollout"

LAYERS: dict[str, int] = {
    # 1: the shared vocabulary, the error root, the settings, local processes, the collector
    "contracts": 1,
    "errors": 1,
    "settings": 1,
    "tasks": 1,
    "procs": 1,
    "heap": 1,
    "shipped": 1,
    # 2: a run's configuration and live settings, as typed records
    "runs": 2,
    # 3: storage, rendering, models, HTTP
    "ledger": 3,
    "blobs": 3,
    "rendering": 3,
    "models": 3,
    "net": 3,
    # 4: how environments are written and played
    "harness": 4,
    # 5: the parts of a run
    "gateway": 5,
    "runners": 5,
    "training": 5,
    "inference": 5,
    "bridges": 5,
    "sandboxes": 5,
    # suites and scoring (they import harness and ledger only: no role package imports them)
    "evals": 5,
    # 6: processes and people
    "launch": 6,
    "cli": 6,
    "monitor": 6,
}


def top_level(module: str) -> str | None:
    """`rollout.ledger.seats` -> `ledger`; None for imports of other packages."""
    parts = module.split(".")
    if parts[0] != "rollout":
        return None
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            found.append((name, node.lineno))
    return found


def package_edges() -> dict[str, dict[str, str]]:
    """importing package -> imported package -> where (the first file:line seen)."""
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(ROOT.rglob("*.py")):
        source = top_level(module_name(path))
        assert source is not None
        for imported, line in imports(path):
            target = top_level(imported)
            if target is None or target == source or target == "":
                continue
            edges[source].setdefault(target, f"{path.relative_to(ROOT.parent)}:{line}")
    return edges


def test_every_package_has_a_layer() -> None:
    names = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()}
    names = {n for n in names if not n.startswith("__") and n != "py"}
    missing = sorted(names - set(LAYERS))
    assert not missing, f"give these a layer in tests/test_layers.py: {missing}"


def test_imports_never_go_up_a_layer() -> None:
    upward = [
        f"{where}: {source} (layer {LAYERS[source]}) imports {target} (layer {LAYERS[target]})"
        for source, targets in package_edges().items()
        for target, where in targets.items()
        if LAYERS[target] > LAYERS[source]
    ]
    assert not upward, "\n".join(upward)


def find_cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """A cycle of packages as a path (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_packages_import_each_other_in_no_cycle() -> None:
    edges = package_edges()
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{a} ({edges[a][b]})" for a, b in itertools.pairwise(cycle)
    )


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b": "x"}, "b": {"c": "y"}}, None),
        ({"a": {"b": "x"}, "b": {"a": "y"}}, ["a", "b", "a"]),
        ({"a": {"b": "x"}, "b": {"c": "y"}, "c": {"b": "z"}}, ["b", "c", "b"]),
    ],
)
def test_the_cycle_finder_finds_cycles(
    edges: dict[str, dict[str, str]], expected: list[str] | None
) -> None:
    assert find_cycle(edges) == expected


def test_relative_and_lazy_imports_are_seen(tmp_path: Path) -> None:
    """The parser sees what the checks rely on: lazy imports inside functions."""
    found = {name for name, _ in imports(ROOT / "cli" / "env.py")}
    assert "rollout.harness.check" in found  # imported inside a command function

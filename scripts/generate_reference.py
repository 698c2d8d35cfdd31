"""Generate the API reference (docs/reference/) from the docstrings of rollout and rolloutlib.

Run it after changing a public docstring or signature; `tests/docs/test_site.py` fails while the
committed pages differ from what this script writes:

    uv run python scripts/generate_reference.py            # writes docs/reference/
    uv run python scripts/generate_reference.py OUT_DIR    # writes somewhere else

The source is read with `ast`, never imported, so the reference needs no optional dependency
(vLLM, Ray, Tinker) and the same tree always gives the same bytes. One page per top-level
package (`rollout.ledger`, `rolloutlib.envs`, ...), listing each public module with its
docstring, then its public classes (with their public methods) and functions, each with its
signature and docstring.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "rollout": ROOT / "src" / "rollout",
    "rolloutlib": ROOT / "packages" / "rolloutlib" / "rolloutlib",
}
DEFAULT_OUT = ROOT / "docs" / "reference"


@dataclass(frozen=True)
class Module:
    """One source file: its dotted name and parsed tree."""

    name: str
    tree: ast.Module


def _public(name: str) -> bool:
    return not name.startswith("_")


def modules(package: str, folder: Path) -> list[Module]:
    """Every public module under `folder`, packages first, in name order."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not all(_public(part) for part in parts):
            continue
        name = ".".join((package, *parts))
        found.append(Module(name, ast.parse(path.read_text(), str(path))))
    return found


def _docstring(node: ast.AST) -> str:
    assert isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    return ast.get_docstring(node) or ""


def _fenced(text: str) -> list[str]:
    # Docstrings are shown verbatim: their `>>>` examples and Args sections keep their layout.
    return ["```text", text, "```", ""] if text else []


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"


def _class_signature(node: ast.ClassDef) -> str:
    bases = [ast.unparse(base) for base in node.bases]
    bases += [ast.unparse(keyword) for keyword in node.keywords]
    return f"class {node.name}({', '.join(bases)})" if bases else f"class {node.name}"


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, level: str) -> list[str]:
    return [
        f"{level} `{node.name}`",
        "",
        "```python",
        _signature(node),
        "```",
        "",
        *_fenced(_docstring(node)),
    ]


def _class(node: ast.ClassDef) -> list[str]:
    lines = [f"### `{node.name}`", "", "```python", _class_signature(node), "```", ""]
    lines += _fenced(_docstring(node))
    for item in node.body:
        is_method = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
        if is_method and (_public(item.name) or item.name == "__init__"):
            lines += _function(item, "####")
    return lines


def module_page_section(module: Module) -> list[str]:
    """The markdown for one module: its docstring, classes and functions."""
    lines = [f"## `{module.name}`", "", *_fenced(_docstring(module.tree))]
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef) and _public(node.name):
            lines += _class(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            lines += _function(node, "###")
    return lines


def pages() -> dict[str, str]:
    """File name -> markdown for every reference page, the index included."""
    groups: dict[str, list[Module]] = {}
    for package, folder in PACKAGES.items():
        for module in modules(package, folder):
            top = ".".join(module.name.split(".")[:2])
            groups.setdefault(top, []).append(module)
    result = {}
    index = [
        "# API reference",
        "",
        "Generated from the docstrings by `scripts/generate_reference.py` "
        "(`uv run python scripts/generate_reference.py`); a test fails when it is out of date.",
        "",
    ]
    for package in PACKAGES:
        index += [f"## {package}", ""]
        for top, members in groups.items():
            if top.split(".")[0] != package:
                continue
            summary = _docstring(members[0].tree).split("\n", 1)[0]
            index.append(f"- [`{top}`]({top}.md): {summary}".rstrip(": "))
            body = [f"# `{top}`", ""]
            for module in members:
                body += module_page_section(module)
            result[f"{top}.md"] = "\n".join(body).rstrip() + "\n"
        index.append("")
    result["index.md"] = "\n".join(index).rstrip() + "\n"
    return result


def write(out: Path) -> list[Path]:
    """Write every page into `out` (removing stale pages there) and return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    wanted = pages()
    for stale in out.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    print(f"wrote {len(write(target))} pages to {target}")

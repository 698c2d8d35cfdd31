"""The documentation site: the API reference is current, the pages follow the docs rules, and
rolloutlib's documented development command works as written.

`uv run --group docs mkdocs build --strict` itself runs in `.ci/run` (the docs group is not part
of the default sync).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.docs.blocks import FENCE, PAGES, Block, page_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDE = DOCS / "getting-started.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "generate_reference", ROOT / "scripts" / "generate_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_current(tmp_path: Path) -> None:
    written = _generator().write(tmp_path)
    fresh = {path.name: path.read_text() for path in written}
    committed = {path.name: path.read_text() for path in (DOCS / "reference").glob("*.md")}
    stale = sorted(
        name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name)
    )
    assert not stale, (
        f"docs/reference is out of date ({', '.join(stale)}): "
        "run `uv run python scripts/generate_reference.py`"
    )


def test_the_reference_shows_signatures_and_docstrings(tmp_path: Path) -> None:
    pages = _generator().pages()
    ledger = pages["rollout.ledger.md"]
    assert "## `rollout.ledger`" in ledger
    assert "### `Ledger`" in ledger
    errors = pages["rollout.errors.md"]
    assert "class RolloutError(Exception)" in errors
    assert "[`rolloutlib.spaces`](rolloutlib.spaces.md)" in pages["index.md"]
    assert not any("._" in name for name in pages), "private modules are left out"


def _nav_files(entries: list) -> list[str]:
    files = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files += _nav_files(value) if isinstance(value, list) else [value]
    return files


def test_every_page_in_the_nav_exists_and_every_new_page_is_in_it() -> None:
    config = yaml.safe_load(re.sub(r"!!python/name:\S+", "null", (ROOT / "mkdocs.yml").read_text()))
    files = _nav_files(config["nav"])
    assert [name for name in files if not (DOCS / name).is_file()] == []
    assert [page for page in SITE_PAGES if page not in files] == []


SITE_PAGES = [
    "index.md",
    "start-here.md",
    "first-episode.md",
    "laptop.md",
    "agents.md",
    "write-an-environment.md",
    "guarantees.md",
    "presets.md",
    "getting-started.md",
]
PICTURES = {"mermaid"}
"""Languages the site draws (not code)."""


def test_every_block_is_run_validated_or_says_why_not() -> None:
    """Python and `uv run rollout` console blocks run (tests/docs/test_examples.py; gateway.md's
    Python in tests/gateway, rolloutlib.md's in rolloutlib's tests), YAML and TOML blocks are
    validated below, mermaid blocks are pictures; any other block is marked
    `<!-- no-test: REASON -->` with its reason."""
    unchecked = []
    for page in PAGES:
        for block in page_blocks(page):
            if block.skipped is not None:
                if len(block.skipped.split()) < 3:
                    unchecked.append(f"{block.where}: `<!-- no-test -->` without its reason")
            elif not block.language:
                unchecked.append(f"{block.where}: a fence that names no language")
            elif block.language == "console":
                lines = [line for line in block.body.splitlines() if line.strip()]
                others = [line for line in lines if not line.startswith("uv run rollout ")]
                if others:
                    unchecked.append(f"{block.where}: console lines nothing runs: {others}")
            elif block.language not in {"python", "yaml", "toml", *PICTURES}:
                unchecked.append(
                    f"{block.where}: a {block.language} block is neither run nor marked"
                )
    assert not unchecked, "\n".join(unchecked)


def _unmarked(language: str) -> list[Block]:
    return [b for p in PAGES for b in page_blocks(p) if b.language == language and not b.skipped]


def test_yaml_blocks_are_valid_presets_or_eval_suites() -> None:
    """A YAML block is read by the model that reads such a file: an eval suite (it lists
    `environments`) by `rollout.evals.suite.parse_suite`, anything else as a preset by
    `rollout.runs.presets.parse_config` (every field has a default, so a fragment is a preset)."""
    from rollout.evals.suite import parse_suite
    from rollout.runs.presets import parse_config

    found = _unmarked("yaml")
    assert len(found) >= 3
    for block in found:
        data = yaml.safe_load(block.body)
        if isinstance(data, dict) and "environments" in data:
            parse_suite(data, source=block.where)
        else:
            parse_config(data, source=block.where)


def test_toml_blocks_are_the_codex_config_the_tests_give_codex() -> None:
    """The TOML blocks are Codex's `~/.codex/config.toml`: every setting they show is one that
    `codex.environment.CONFIG` (what tests/gateway/test_agent_clis.py runs the pinned Codex
    with) sets, to the same value where the value is not the user's choice."""
    from codex.environment import CONFIG

    tested = tomllib.loads(CONFIG.format(base_url="http://127.0.0.1:8000/v1"))
    found = _unmarked("toml")
    assert len(found) >= 2
    for block in found:
        shown = tomllib.loads(block.body)
        assert set(shown) <= set(tested), block.where
        provider = shown["model_providers"]["rollout"]
        assert set(provider) <= set(tested["model_providers"]["rollout"]), block.where
        for key in ("env_key", "wire_api"):
            assert provider[key] == tested["model_providers"]["rollout"][key], (block.where, key)
        assert shown["model_provider"] == "rollout", block.where


def test_rolloutlibs_documented_lint_command_works_as_written() -> None:
    development = GUIDE.read_text().split("## Development", 1)[1]
    lines = [
        line
        for match in FENCE.finditer(development)
        for line in match["body"].splitlines()
        if line.startswith("uv run ruff check")
    ]
    assert lines == ["uv run ruff check rolloutlib tests"]
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH"
    result = subprocess.run(
        [uv, *shlex.split(lines[0])[1:]],
        cwd=ROOT / "packages" / "rolloutlib",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_links_the_beginners_path_first() -> None:
    links = re.findall(r"\]\((docs/[\w-]+\.md)", (ROOT / "README.md").read_text())
    assert links[:4] == [
        "docs/deploy.md",  # the overview's pointer, then the path a newcomer follows
        "docs/start-here.md",
        "docs/first-episode.md",
        "docs/laptop.md",
    ], links[:4]


def _preset_needs(name: str) -> str:
    """What a built-in preset needs beyond `uv sync`, from its fields (`gpus_needed` counts the
    CUDA GPUs as the preflight does)."""
    from rollout.runs.presets import load_preset

    config = load_preset(name)
    needs = []
    if config.gpus_needed:
        needs.append(f"{config.gpus_needed} CUDA GPU{'s' if config.gpus_needed > 1 else ''}")
    if config.backend == "vllm" and config.vllm.url is None:
        needs.append("`uv run rollout setup vllm` once")
    if "tinker" in (config.backend, config.provider):
        needs.append("`uv sync --extra tinker`, `TINKER_API_KEY`")
    return ", ".join(needs) or "nothing"


def test_the_presets_table_is_the_presets() -> None:
    """docs/presets.md's table restates the preset files: one row per built-in preset, its
    `description`, and what it needs as computed from its fields."""
    from rollout.runs.presets import load_preset, presets_dir

    names = sorted(path.stem for path in presets_dir().glob("*.yaml"))
    expected = [
        f"| `{name}` | {load_preset(name).description} | {_preset_needs(name)} |" for name in names
    ]
    shown = [
        line for line in (DOCS / "presets.md").read_text().splitlines() if line.startswith("| `")
    ]
    assert shown == expected, "docs/presets.md's table should read:\n" + "\n".join(expected)


def _cell_values(cell: str) -> list[object]:
    """A table cell's values: `none`/`null` -> None, `empty` -> '', else YAML scalars."""
    values: list[object] = []
    for item in cell.split(", "):
        item = item.strip().strip("`")
        values.append(
            None if item in ("none", "null") else "" if item == "empty" else yaml.safe_load(item)
        )
    return values


TRAINING_UNSHOWN = {"dtype", "vllm", "tinker", "gpus", "evals"}
"""RunConfig fields training.md's table leaves to other pages (presets.md, models.md, evals.md)."""


def test_trainings_field_table_shows_the_defaults_and_cpu_tiny() -> None:
    """Each row of docs/training.md's preset table names fields of `RunConfig`, with the
    model's defaults and cpu-tiny's values (a restated source of truth, checked here)."""
    from rollout.runs.config import RunConfig
    from rollout.runs.presets import load_preset

    def value(config: object, dotted: str) -> object:
        for part in dotted.split("."):
            config = None if config is None else getattr(config, part)
        return config

    default = RunConfig.model_validate({"model": {"init": {}}})
    tiny = load_preset("cpu-tiny")
    section = (DOCS / "training.md").read_text().split("\n## Presets\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (`[^|]+) \| ([^|]+) \| ([^|]+) \| [^|]+ \|$", section, re.M)
    assert len(rows) > 30
    shown: set[str] = set()
    wrong = []
    for names, defaults, tinys in rows:
        fields = [name.strip("` ") for name in names.split(", ")]
        prefix = fields[0].rsplit(".", 1)[0] + "." if "." in fields[0] else ""
        fields = [prefix + f[1:] if f.startswith(".") else f for f in fields]
        shown |= {field.split(".")[0] for field in fields}
        if fields[0] in ("name", "model.path", "model.init.vocab_size"):
            continue  # labels; a default that is a description ("built-in size")
        for column, config in ((defaults, default), (tinys, tiny)):
            expected = [value(config, field) for field in fields]
            if _cell_values(column) != expected:
                wrong.append(f"{names}: shows {column.strip()}, the source says {expected}")
    assert not wrong, "\n".join(wrong)
    missing = set(RunConfig.model_fields) - shown - TRAINING_UNSHOWN
    assert not missing, f"docs/training.md's table lacks {sorted(missing)}"

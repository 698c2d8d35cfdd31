"""`rollout preset load|list|show`: presets stored in the ledger.

`--cluster` uses the ledger of the rollout release in the cluster of the current kube context
(through `kubectl port-forward`; see `rollout.launch.cluster`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.table import Table

from rollout.cli.common import JsonFlag, console, print_json, run_async
from rollout.errors import RolloutError

if TYPE_CHECKING:
    from rollout.ledger import Ledger

T = TypeVar("T")

preset_app = typer.Typer(help="Presets stored in the ledger.", no_args_is_help=True)

ClusterFlag = Annotated[
    bool,
    typer.Option(help="The ledger of the cluster of the current kube context (via kubectl)."),
]


@contextlib.contextmanager
def _database(cluster: bool) -> Iterator[str | None]:
    if not cluster:
        yield None
        return
    from rollout.launch.cluster import cluster_ledger

    with cluster_ledger() as url:
        yield url


def _with_ledger(cluster: bool, work: Callable[[Ledger], Awaitable[T]]) -> T:
    async def go(url: str | None) -> T:
        from rollout.ledger import COMMAND_WAIT_S, Ledger

        ledger = await Ledger.connect(url, wait_s=COMMAND_WAIT_S)
        try:
            return await work(ledger)
        finally:
            await ledger.close()

    with _database(cluster) as url:
        return run_async(go(url))


@preset_app.command("load")
def load(
    folder: Annotated[Path, typer.Argument(help="A folder of preset files (NAME.yaml).")],
    cluster: ClusterFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Validate every preset file in FOLDER, then store them all (idempotent)."""
    from rollout.launch.presets import read_presets, store_presets

    presets = read_presets(folder)  # all valid before anything is stored
    stored = _with_ledger(cluster, lambda ledger: store_presets(ledger, presets))
    if as_json:
        print_json([{"name": name, "stored": new} for name, new in stored])
        return
    for name, new in stored:
        console.print(f"{'stored' if new else 'unchanged'} {name}", highlight=False)


@preset_app.command("list")
def list_presets(cluster: ClusterFlag = False, as_json: JsonFlag = False) -> None:
    """The presets stored in the ledger."""
    records = _with_ledger(cluster, lambda ledger: ledger.presets())
    if as_json:
        print_json(
            [
                {
                    "name": r.name,
                    "content_hash": r.content_hash,
                    "source": r.source,
                    "created_at": r.created_at,
                }
                for r in records
            ]
        )
        return
    table = Table("name", "hash", "source", "stored")
    for r in records:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
        table.add_row(r.name, r.content_hash[:12], r.source, stamp)
    console.print(table)


@preset_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="Preset name.")],
    cluster: ClusterFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """A stored preset's body (YAML)."""
    record = _with_ledger(cluster, lambda ledger: ledger.find_preset(name))
    if record is None:
        raise RolloutError(f"no preset {name!r} is stored in the ledger (rollout preset load DIR)")
    if as_json:
        print_json(
            {
                "name": record.name,
                "content_hash": record.content_hash,
                "source": record.source,
                "created_at": record.created_at,
                "body": record.body,
            }
        )
        return
    sys.stdout.write(record.body)  # as stored: no wrapping, no markup

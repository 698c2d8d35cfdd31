"""`rollout down` and `rollout gc`: the state folder's running Postgres and its files.

Commands start the embedded Postgres under the state folder on first use and leave it running so
that the next command starts fast; `rollout down` stops it (it starts again on the next command).
`rollout gc` deletes what nothing needs any more (`rollout.launch.gc`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from rollout.cli.common import JsonFlag, console, print_json, query


def down() -> None:
    """Stop the embedded Postgres of the state folder (the next command starts it again)."""
    from rollout.ledger import stop_embedded
    from rollout.settings import get_settings

    folder = get_settings().state_dir
    if stop_embedded(folder):
        console.print(f"stopped the embedded Postgres in {folder}", highlight=False, soft_wrap=True)
    else:
        console.print(f"no embedded Postgres running in {folder}", highlight=False, soft_wrap=True)


def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be deleted.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete checkpoints past retention, blobs no run references and caches of deleted runs;
    print the bytes freed."""
    from rollout.blobs import BlobStore
    from rollout.launch.gc import collect
    from rollout.settings import get_settings

    blobs = BlobStore.from_url()
    cache = get_settings().cache_dir
    done = query(lambda ledger: collect(ledger, blobs, cache, dry_run=dry_run))
    if as_json:
        print_json(done.as_json())
        return
    for name, versions in done.checkpoints.items():
        listed = " ".join(f"v{v}" for v in versions)
        console.print(f"run {name}: checkpoints past retention: {listed}", highlight=False)
    for folder in done.blobs:
        console.print(f"unreferenced: {folder}", highlight=False, soft_wrap=True)
    for folder in done.caches:
        console.print(f"cache: {folder}", highlight=False, soft_wrap=True)
    verb = "would free" if dry_run else "freed"
    console.print(f"{verb} {done.bytes_freed / 1e6:.1f} MB ({done.bytes_freed} bytes)")

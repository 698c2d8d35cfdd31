"""`rollout down`: stop what the state folder keeps running (the embedded Postgres).

Commands start the embedded Postgres under the state folder on first use and leave it running so
that the next command starts fast; `rollout down` stops it (it starts again on the next command).
"""

from __future__ import annotations

from rollout.cli.common import console


def down() -> None:
    """Stop the embedded Postgres of the state folder (the next command starts it again)."""
    from rollout.ledger import stop_embedded
    from rollout.settings import get_settings

    folder = get_settings().state_dir
    if stop_embedded(folder):
        console.print(f"stopped the embedded Postgres in {folder}", highlight=False, soft_wrap=True)
    else:
        console.print(f"no embedded Postgres running in {folder}", highlight=False, soft_wrap=True)

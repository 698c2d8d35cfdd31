"""What every command module shares: the consoles, options, and running async work once.

User errors are `rollout.errors.RolloutError`s: `main` (in `rollout.cli`) prints them as one
red line and exits 2.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from rollout.ledger import Ledger

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
ModelOption = Annotated[
    str, typer.Option("--model", help="'scripted' or a local Hugging Face model folder.")
]
RunArgument = Annotated[str, typer.Argument(help="Run id or name.")]


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion in a fresh event loop."""
    return asyncio.run(coroutine)


def print_json(value: object) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def query(read: Callable[[Ledger], Awaitable[T]]) -> T:
    """Run one read against the ledger (ROLLOUT_DATABASE_URL or the embedded one)."""

    async def go() -> T:
        from rollout.ledger import COMMAND_WAIT_S, Ledger

        ledger = await Ledger.connect(wait_s=COMMAND_WAIT_S)
        try:
            return await read(ledger)
        finally:
            await ledger.close()

    return run_async(go())

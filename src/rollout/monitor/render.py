"""Rich rendering of transcripts, runs and episodes for the terminal."""

from __future__ import annotations

import itertools
import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}


def print_transcript(console: Console, outcome: dict[str, Any]) -> None:
    console.print(
        f"run [bold]{outcome['run_name']}[/] ({outcome['run_id']}), episode "
        f"[bold]{outcome['episode_id']}[/]"
    )
    for seat in outcome["seats"]:
        console.print(f"[bold]agent {seat['agent']}[/]")
        for message in seat["messages"]:
            role = message["role"]
            text = message.get("text", "")
            calls = message.get("tool_calls") or []
            console.print(f"  [{ROLE_STYLE.get(role, 'white')}]{role:>9}[/] ", end="")
            console.print(text or "", markup=False, highlight=False)
            for call in calls:
                console.print(f"            -> {call['name']}({call['arguments']})", markup=False)
        status = seat["status"]
        reward = seat["reward"]
        console.print(f"  reward {reward:g} ({status}, {seat['turns']} turn(s))")
        if seat.get("error"):
            console.print(f"  {seat['error']}", style="red", markup=False, highlight=False)
    console.print(
        f"next: uv run rollout episodes show {outcome['episode_id']}  (turns and tokens)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _tokens(values: list[Any], limit: int = 24) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}] ({len(values)})"


def print_episode(console: Console, episode: dict[str, Any]) -> None:
    console.print(
        f"episode [bold]{episode['episode_id']}[/] of run {episode['run_id']}: group "
        f"{episode['group_index']}, member {episode['member']}, seed {episode['seed']}, "
        f"{episode['agents']} agent(s), parameters {episode['parameters']}"
    )
    for end in episode["ends"]:
        console.print(
            f"  agent {end['agent']} (attempt {end['attempt']}): {end['status']}, reward "
            f"{end['reward']:g}, metrics {end['metrics']}"
        )
        if end.get("error"):  # one line per failed seat: the error's first line
            first, *rest = end["error"].strip().splitlines() or [""]
            more = "  (traceback: --json)" if rest else ""
            console.print(f"    {first}{more}", style="red", markup=False, highlight=False)
    for turn in episode["turns"]:
        console.print(
            f"[bold]turn {turn['index']}[/] agent {turn['agent']} attempt {turn['attempt']}: "
            f"version {turn['version']}, stop {turn['stop_reason']}, extends previous "
            f"{turn['extends_previous']}, {1000 * (turn['ended_at'] - turn['started_at']):.1f} ms"
        )
        console.print(f"  prompt tokens     {_tokens(turn['prompt_tokens'])}", highlight=False)
        console.print(f"  completion tokens {_tokens(turn['completion_tokens'])}", highlight=False)
        console.print(
            f"  logprobs          {_tokens([round(x, 4) for x in turn['logprobs']])}",
            highlight=False,
        )


def _key_values(title: str, values: dict[str, Any]) -> Table:
    """A two-column table of a mapping (settings, episode counts): one row per key."""
    table = Table(title=title, title_justify="left", show_header=False)
    for key, value in values.items():
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        table.add_row(str(key), escape(shown))
    return table


def print_run(console: Console, run: dict[str, Any], steps: int | None = None) -> None:
    """A run: its settings and episode counts as tables, then its last `steps` train steps (all
    when None) with the wall time each took (since the step before)."""
    console.print(
        f"run [bold]{run['name']}[/] ({run['run_id']}): {run['environment']}, {run['state']}"
    )
    console.print(_key_values("settings", run["settings"]))
    console.print(_key_values("episodes", run["episodes"]))
    if run["serving"]:
        console.print(f"serving v{run['serving']['version']}; servers: {run['serving_acks']}")
    table = Table("step", "reward", "loss", "lag", "episodes", "wall s", "trainer s")
    rows = run["steps"]
    previous = {row["step"]: before for before, row in itertools.pairwise(rows)}
    for step in rows if steps is None else rows[-steps:] if steps else []:
        m = step["metrics"]
        before = previous.get(step["step"])
        wall = "-" if before is None else f"{step['created_at'] - before['created_at']:.2f}"
        table.add_row(
            str(step["step"]),
            f"{m.get('reward', 0):.3f}",
            f"{m.get('loss', 0):+.4f}",
            f"{m.get('lag_mean', 0):.2f}",
            f"{m.get('episodes', 0):.0f}",
            wall,
            f"{m.get('step_seconds', 0):.2f}",
        )
    console.print(table)
    console.print(f"checkpoints: {len(run['checkpoints'])}")
    for name, policy in run.get("policies", {}).items():
        rewards = policy["rewards"]
        first, last = rewards[:3], rewards[-3:]
        trend = (
            f"reward {sum(first) / len(first):.3f} -> {sum(last) / len(last):.3f} "
            "(first vs last 3 steps)"
            if rewards
            else "no steps yet"
        )
        chain = policy["checkpoints"]
        console.print(
            f"policy {name} (agents {policy['agents']}): {policy['steps']} steps, {trend}; "
            f"checkpoints v0..v{chain[-1]['version'] if chain else '-'}; "
            f"serving v{policy['serving']}; servers: {policy['serving_acks']}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )

"""`rollout train`'s live progress: a follower of one run's train steps.

`TrainingProgress` holds what has been read so far; each `poll` reads only the steps recorded
since the last one (and whether the run finished), over the one ledger connection the command
keeps for the whole run. `watch_training` shows it as a progress bar with the latest reward,
loss, lag and episodes per second, waking on the ledger's `train_steps` and `settings`
notifications (polling is the fallback), until the trainer marks the run finished.

Lag is what `LAG_MEANS` says, printed once above the bar when the first step arrives: how many
optimizer steps older than the checkpoint being trained the one that sampled each trained turn
was. `max_lag` holds back when a turn may *begin*, not when it is trained: a long episode's
early turns, or a group that waited in the queue, are trained a step or two later, so the mean
can pass `max_lag` for a while.

Example:
    >>> from rollout.ledger import TrainStepRecord
    >>> steps = [
    ...     TrainStepRecord("r", 1, (0,), {"reward": 0.25, "loss": -0.5, "episodes": 8}, 10.0),
    ...     TrainStepRecord("r", 2, (1,), {"reward": 0.5, "loss": 0.25, "episodes": 8}, 12.0),
    ... ]
    >>> status_line(steps)
    'reward 0.500  loss +0.2500  lag 0.00  4 episodes/s'
    >>> status_line(steps, failed=3)
    'reward 0.500  loss +0.2500  lag 0.00  4 episodes/s  3 failed'
    >>> status_line(steps, max_lag=2)
    'reward 0.500  loss +0.2500  lag 0.00 (max_lag 2)  4 episodes/s'

A run whose groups all scored alike for `UNIFORM_STEPS` steps in a row trains nothing (every
advantage is 0: a collapsed policy, or a task too hard or too easy for it); the line says so:

    >>> flat = [TrainStepRecord("r", i, (i - 1,), {"reward": -1.0, "loss": 0.0, "episodes": 8,
    ...         "segments": 0.0}, 10.0 + i) for i in range(1, 6)]
    >>> status_line(flat).split("  ")[-1]
    'nothing trained for 5 steps: every group scored alike'
    >>> status_line(flat[:4]).split("  ")[-1]
    '8 episodes/s'
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from rollout.contracts import DEFAULT_POLICY
from rollout.errors import RolloutError
from rollout.ledger import Ledger, TrainStepRecord

RATE_WINDOW = 5
"""Steps over which episodes per second are measured."""
LAG_MEANS = (
    "lag: how many steps older than the checkpoint being trained was the one that sampled each "
    "trained turn (mean of the step). max_lag limits when a turn may begin; a long episode or a "
    "queued group is trained a step or two later, so lag can pass max_lag for a while."
)
"""What the lag shown means, printed once above the progress bar."""
UNIFORM_STEPS = 5
"""Steps in a row with nothing trained (every group's rewards equal) before the line says so."""


def rl_steps(steps: Sequence[TrainStepRecord]) -> list[TrainStepRecord]:
    """The RL steps (step 0 is the format warm-up's checkpoint)."""
    return [step for step in steps if step.step > 0]


def status_line(
    steps: Sequence[TrainStepRecord], failed: int = 0, max_lag: int | None = None
) -> str | None:
    """The latest RL step's reward, loss and lag (beside the run's `max_lag` when given),
    episodes per second over the last few, and how many episodes failed (when any did)."""
    rl = rl_steps(steps)
    if not rl:
        return None
    last = rl[-1].metrics
    recent = rl[-RATE_WINDOW:]
    window = recent[-1].created_at - recent[0].created_at
    # The first step of the window ended when the window began: its episodes came before.
    episodes = sum(float(step.metrics.get("episodes", 0.0)) for step in recent[1:])
    rate = episodes / window if window > 0 else 0.0
    uniform = 0  # the latest steps in a row that trained no segment
    for step in reversed(rl):
        if step.metrics.get("segments", 1.0) != 0.0:
            break
        uniform += 1
    return (
        f"reward {last.get('reward', 0):.3f}  loss {last.get('loss', 0):+.4f}  "
        f"lag {last.get('lag_mean', 0):.2f}"
        + (f" (max_lag {max_lag})" if max_lag is not None else "")
        + f"  {rate:.0f} episodes/s"
        + (f"  {failed} failed" if failed else "")
        + (
            f"  nothing trained for {uniform} steps: every group scored alike"
            if uniform >= UNIFORM_STEPS
            else ""
        )
    )


PLAIN_EVERY_S = 5.0
"""With output that is not a terminal: a progress line at least this often (and at each change)."""
MIN_POLL_S = 0.25
"""`watch_training` reads the run at most this often, however often it is notified."""


T = TypeVar("T")


async def say_while(console: Console, what: str, work: Awaitable[T]) -> T:
    """Await `work`, printing `what...` first and, on output that is not a terminal, again with
    the seconds so far every `PLAIN_EVERY_S`, so that piped output never goes quiet for long
    (stopping a run's roles takes many seconds)."""
    console.print(f"{what}...", highlight=False, markup=False, soft_wrap=True)
    task = asyncio.ensure_future(work)
    began = time.monotonic()
    while True:
        done, _ = await asyncio.wait({task}, timeout=PLAIN_EVERY_S)
        if done:
            return task.result()
        if not console.is_terminal:
            seconds = time.monotonic() - began
            console.print(f"{what}... {seconds:.0f} s", highlight=False, markup=False)


class _PlainLines:
    """`rollout train`'s progress as whole lines, for output that is not a terminal."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.began = time.monotonic()
        self.shown: tuple[int, str] | None = None
        self.at = 0.0

    def show(self, completed: int, status: str) -> None:
        """Print a line when the step or status changed, or `PLAIN_EVERY_S` after the last."""
        now = time.monotonic()
        if (completed, status) == self.shown and now - self.at < PLAIN_EVERY_S:
            return
        self.shown, self.at = (completed, status), now
        self.console.print(
            f"training step {completed}/{self.total}  {status}  {now - self.began:.0f} s",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@dataclass
class TrainingProgress:
    """The train steps of one run read so far, whether the run has finished or failed (and
    why), and its episode counts (`Ledger.episode_counts`)."""

    run_id: str
    steps: list[TrainStepRecord] = field(default_factory=list)
    finished: bool = False
    error: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    policy: str = DEFAULT_POLICY
    """Whose steps are read (a run with several policies: the one the bar follows)."""

    @property
    def last_step(self) -> int:
        """The newest step read (-1 before any)."""
        return self.steps[-1].step if self.steps else -1

    async def poll(self, ledger: Ledger) -> list[TrainStepRecord]:
        """Read the steps recorded since the last poll; return them."""
        # Whether it finished is read first: the trainer records its last step before it marks
        # the run finished, so a finished run's steps are all read by this same poll.
        settings = await ledger.run_settings(self.run_id)
        self.finished = settings.finished
        self.paused = settings.paused
        if settings.status == "failed":
            self.error = settings.error or "the run failed"
        self.counts = await ledger.episode_counts(self.run_id)
        new = await ledger.train_steps(self.run_id, after=self.last_step, policy=self.policy)
        self.steps.extend(new)
        return new


async def watch_training(
    ledger: Ledger,
    progress: TrainingProgress,
    total_steps: int,
    console: Console,
    *,
    stopped: Callable[[], str | None] = lambda: None,
    interval: float = 0.5,
    max_lag: int | None = None,
) -> TrainingProgress:
    """Show `progress` live until the run finishes.

    Args:
        ledger: The command's one ledger connection.
        progress: Filled in as steps arrive (the caller keeps it if this is cancelled).
        total_steps: The run's RL steps (the bar's length).
        console: Where the bar is drawn.
        stopped: Why the processes that train the run stopped, or None while they run.
        interval: Seconds between polls when no notification arrives.
        max_lag: The run's max_lag, shown beside the lag.

    Raises:
        RolloutError: the run failed (too many failed episodes: the first error), or `stopped`
            reported a problem before the run finished.
    """
    # A terminal gets a live bar; piped or logged output gets whole plain lines instead (a
    # rich bar there is drawn once, at the end, cut to the width).
    live = console.is_terminal
    view = Progress(
        TextColumn("[bold]training"),
        BarColumn(),
        TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=not live,
    )
    status = "starting roles: loading the model, then the format warm-up..."
    bar = view.add_task("train", total=total_steps, status=status)
    lines = _PlainLines(console, total_steps)
    explained = False
    with view:
        while True:
            new = await progress.poll(ledger)
            failed = progress.counts.get("failed", 0)
            line = status_line(progress.steps, failed, max_lag)
            if line is not None and not explained:
                console.print(LAG_MEANS, style="dim", highlight=False)
                explained = True
            if progress.paused:  # the rate shown would be stale
                status = "paused: `uv run rollout runs resume RUN` hands out episodes" + (
                    f"  {failed} failed" if failed else ""
                )
            elif line is not None:
                status = line
            elif new or failed:
                status = "warm-up done; playing the first episodes..." + (
                    f"  {failed} failed" if failed else ""
                )
            completed = max(progress.last_step, 0)
            if live:
                view.update(bar, completed=completed, status=status)
            else:
                lines.show(completed, status)
            if progress.finished:
                return progress
            if progress.error is not None:
                raise RolloutError(f"run failed: {progress.error}")
            problem = stopped()
            if problem is not None:
                await progress.poll(ledger)  # the roles may have stopped because the run failed
                if progress.error is not None:
                    raise RolloutError(f"run failed: {progress.error}")
                raise RolloutError(problem)
            polled = time.monotonic()
            await ledger.wait(("train_steps", "settings"), interval, run_id=progress.run_id)
            # Steps and settings change several times a second on a fast run: one poll (three
            # reads) per notification cost Postgres and this process 2-3% of a parity run's CPU.
            await asyncio.sleep(max(0.0, polled + MIN_POLL_S - time.monotonic()))

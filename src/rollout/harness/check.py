"""`rollout env check`: play one episode of an environment and report contract problems by name.

Every seat of one episode is played against a model (the scripted one by default); a sandboxed
environment's instance is started first, reset and stopped after, and a failing sandbox step is
reported by name. Problems are collected, not raised: a missing `start`, wrong return types,
exceptions (with the task's own traceback), rewards that are not finite, parameters that cannot
be drawn.

With `demonstration=True` the model plays the environment's `demonstration` (the caller's
scripted model answers with it): every seat must then end with a reward above 0, else the seat
reports that the demonstration earned nothing (`CheckReport.demonstration_failed`).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import traceback
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.harness.core import Environment, RunContext
from rollout.harness.errors import InvalidEnvironment, TaskError
from rollout.harness.play import Complete, SeatResult, make_task, play_seat


@dataclass
class SeatReport:
    agent: int
    result: SeatResult | None = None
    problem: str | None = None
    traceback: str | None = None
    demonstration_problem: str | None = None
    """The demonstration earned this seat nothing (a played demonstration only)."""

    def summary(self) -> str:
        """`ended after N turn(s), reward R` and the `End`'s metrics, or its problem."""
        if self.result is None:
            return f"no result: {self.problem}"
        metrics = ", ".join(f"{k} {v:g}" for k, v in sorted(self.result.end.metrics.items()))
        return (
            f"ended after {self.result.turns} turn(s), reward {self.result.reward:g}"
            + (" (truncated)" if self.result.truncated else "")
            + (f" ({metrics})" if metrics else "")
        )


@dataclass
class CheckReport:
    environment: str
    parameters: dict[str, object] = field(default_factory=dict)
    seats: list[SeatReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    episode_id: str | None = None
    """The ledger episode whose turns the gateway recorded (gateway-served checks only)."""
    recorded_turns: int | None = None
    """How many model calls the gateway recorded in that episode."""
    demonstration: bool = False
    """Whether the model played the environment's `demonstration`."""

    @property
    def ok(self) -> bool:
        return (
            not self.problems
            and all(seat.problem is None for seat in self.seats)
            and not self.demonstration_failed
        )

    @property
    def demonstration_failed(self) -> bool:
        """The demonstration was played and some seat earned nothing from it."""
        return any(seat.demonstration_problem for seat in self.seats)

    def all_problems(self) -> list[str]:
        seat_problems = [
            f"agent {s.agent}: {problem}"
            for s in self.seats
            for problem in (s.problem, s.demonstration_problem)
            if problem
        ]
        return [*self.problems, *seat_problems]

    def as_json(self) -> dict[str, object]:
        return {
            "environment": self.environment,
            "ok": self.ok,
            "parameters": self.parameters,
            "episode_id": self.episode_id,
            "recorded_turns": self.recorded_turns,
            "demonstration": self.demonstration,
            "problems": self.all_problems(),
            "seats": [
                {
                    "agent": seat.agent,
                    "reward": None if seat.result is None else seat.result.reward,
                    "turns": None if seat.result is None else seat.result.turns,
                    "metrics": None if seat.result is None else seat.result.end.metrics,
                    "problem": seat.problem,
                    "traceback": seat.traceback,
                }
                for seat in self.seats
            ],
        }


async def check_environment(
    environment: Environment,
    complete: Complete,
    seed: int = 0,
    seats: Mapping[int, Mapping[str, Any]] | None = None,
    *,
    demonstration: bool = False,
) -> CheckReport:
    """Play one episode (every seat concurrently) and collect contract problems.

    Args:
        environment: The environment to check.
        complete: The model, for Tasks whose replies the harness asks for.
        seed: The episode's seed.
        seats: Per agent, `RunContext` fields of a seat served by a gateway (`run_id`,
            `episode_id`, `attempt`, `gateway_url`, `api_key`), for environments with
            `needs_gateway`; without them such an environment is reported, not played.
        demonstration: `complete` plays `environment.demonstration`: each seat's reward must be
            above 0.
    """
    report = CheckReport(environment=environment.name, demonstration=demonstration)
    if environment.needs_gateway and seats is None:
        report.problems.append(
            f"{environment.name} needs a gateway (its Task calls the model itself): "
            "check it with `rollout env check`, which serves one"
        )
        return report
    try:
        parameters = environment.draw_parameters(0, seed)
    except InvalidEnvironment as error:  # our own check: its message says it all
        report.problems.append(f"drawing parameters: {error}")
        return report
    except Exception as error:
        report.problems.append(
            f"drawing parameters raised {type(error).__name__}: {error}\n{traceback.format_exc()}"
        )
        return report
    report.parameters = parameters
    if seats:
        report.episode_id = next(iter(seats.values())).get("episode_id")
    if not hasattr(environment.task, "start") or getattr(
        environment.task.start, "__isabstractmethod__", False
    ):
        report.problems.append(f"{environment.task.__name__} does not define start()")
        return report

    # A sandboxed environment's pool (rollout.sandboxes, a higher layer: used by its methods).
    pool = getattr(environment, "sandbox", None)
    sandbox: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="rollout-check-sandbox-"))
    if pool is not None:
        sandbox = await _sandbox_step(report, pool, "start", pool.start(workdir)) or {}
        if not sandbox or not await _sandbox_step(report, pool, "health", pool.health(sandbox)):
            await _sandbox_step(report, pool, "stop", pool.stop(sandbox))
            shutil.rmtree(workdir, ignore_errors=True)
            return report
        sandbox = {**sandbox, "instance": "env-check", "epoch": 1}

    async def play(agent: int) -> SeatReport:
        seat = SeatReport(agent=agent)
        served = {
            "run_id": "env-check",
            "episode_id": "env-check-episode",
            **(seats or {}).get(agent, {}),
        }
        run = RunContext(
            agent=agent, seed=seed, agents=environment.agents, sandbox=sandbox, **served
        )
        try:
            task = make_task(environment, parameters)
            seat.result = await play_seat(environment, task, run, complete)
        except TaskError as error:
            seat.problem = str(error)
            seat.traceback = error.traceback
        if demonstration and seat.result is not None and not seat.result.reward > 0:
            seat.demonstration_problem = (
                f"the demonstration earned nothing: {seat.summary()}; the environment did not "
                "act on it (or its reward does not see what it did)"
            )
        return seat

    try:
        report.seats = list(await asyncio.gather(*(play(a) for a in range(environment.agents))))
        if pool is not None:  # the next episode's world: reset, then it must answer again
            reset = await _sandbox_step(report, pool, "reset", pool.reset(sandbox, workdir))
            if reset:
                sandbox = reset
                if not await _sandbox_step(report, pool, "health", pool.health(reset)):
                    report.problems.append(f"sandbox {pool.name}: not healthy after reset")
    finally:
        if pool is not None:
            await _sandbox_step(report, pool, "stop", pool.stop(sandbox))
        shutil.rmtree(workdir, ignore_errors=True)
    return report


async def _sandbox_step(report: CheckReport, pool: Any, step: str, call: Awaitable[Any]) -> Any:
    """Await one sandbox step; a failure becomes a problem naming the pool and the step."""
    try:
        result = await call
    except Exception as error:
        report.problems.append(
            f"sandbox {pool.name}: {step} raised {type(error).__name__}: {error}"
        )
        return None
    if step == "health" and not result:
        report.problems.append(f"sandbox {pool.name}: failed its health check")
    return result

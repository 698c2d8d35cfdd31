"""Every seed of a run follows from its one seed by the formulas of `rollout.harness.seeds`."""

from __future__ import annotations

import random
from typing import Any

from rollout.harness import Environment, Observation, RunContext, Task
from rollout.harness.seeds import agent_seed, episode_seed, parameters_seed


class _Noop(Task):
    async def start(self, run: RunContext) -> Observation:
        return Observation("hi")


def _draw(rng: random.Random) -> dict[str, Any]:
    return {"x": rng.random()}


def test_the_agent_generator_and_drawn_parameters_follow_the_seed_formulas() -> None:
    run = RunContext(run_id="r", episode_id="e", agent=2, seed=episode_seed(5, 3, 1))
    assert run.random.random() == random.Random(agent_seed(run.seed, 2)).random()
    environment = Environment("seeds", _Noop, parameters=_draw)
    drawn = environment.draw_parameters(3, seed=5)
    assert drawn == _draw(random.Random(parameters_seed(5, 3)))
    assert drawn == environment.draw_parameters(3, seed=5) != environment.draw_parameters(4, 5)


def test_the_formulas_keep_the_values_existing_runs_were_played_with() -> None:
    # Changing a formula changes every recorded run's episodes: these values are pinned.
    assert parameters_seed(7, 11) == 7 * 7919 + 11
    assert episode_seed(7, 11, 2) == 7 * 1_000_003 + 11 * 1_009 + 2
    assert agent_seed(123, 1) == 123 * 1_000_003 + 1
    members = {episode_seed(0, g, m) for g in range(50) for m in range(16)}
    assert len(members) == 50 * 16  # no two episodes of a run share a seed

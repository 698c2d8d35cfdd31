"""GSM8K-style math word problems, graded by rolloutlib's GSM8K benchmark.

Each episode is one problem of a small bundled set (`problems.jsonl`, in GSM8K's format: a
question and a solution ending in `#### answer`). The task is rolloutlib's own `GSM8KEnv`, made
by its `gsm8k` benchmark and played through the platform's adapter, so training and
`run_benchmark` evaluation grade answers the same way (the last number of the reply, or a
`\\boxed{}` one, equal to the gold answer; decimals allowed).

The folder is `math_problems`, not `math`: a package named `math` would be shadowed by the
standard library's module.

    uv run rollout env check math_problems.environment:environment
    uv run rollout train math_problems.environment:environment --preset cpu-tiny \\
        --set model.init.alphabet=null
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from rolloutlib.evals.benchmarks import GSM8KEnv, gsm8k

from rollout.contracts import Message
from rollout.harness.adapter import rolloutlib_environment

PROBLEMS_FILE = Path(__file__).resolve().parent / "problems.jsonl"
TEMPLATE = "{question}\nAnswer with the number."


def load_problems(path: Path = PROBLEMS_FILE) -> list[dict[str, Any]]:
    """The bundled problems (`{"id", "question", "answer"}` per line)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


benchmark = gsm8k(load_problems(), name="math_problems", template=TEMPLATE)
"""The bundled set as a rolloutlib benchmark (`rolloutlib.evals.run_benchmark(benchmark, ...)`)."""


def problem(index: int) -> GSM8KEnv:
    """The rolloutlib environment of problem `index` of the benchmark."""
    env = benchmark.make_env(index)
    assert isinstance(env, GSM8KEnv)
    return env


def format_example(rng: random.Random) -> tuple[list[Message], str]:
    """A problem and a reply of the right shape with a random number (no task information)."""
    env = problem(rng.randrange(len(benchmark)))
    return [Message.user(env.prompt)], str(rng.randint(0, 120))


environment = replace(
    rolloutlib_environment(
        problem,
        name="math_problems",
        parameters=[{"index": index} for index in range(len(benchmark))],
        group_size=8,
        max_turns=1,
    ),
    sampling={"max_tokens": 8, "temperature": 1.0},
    warmup=format_example,
)

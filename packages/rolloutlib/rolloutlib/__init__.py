"""Gymnasium-style environments and rollout primitives for agentic RL post-training.

Rolloutlib keeps small contracts: environments expose `reset`/`step` and spaces (sync `Env`
or async `AsyncEnv`); rollout code records interactions (`Step`, `Trajectory`,
`TrajectoryGroup`); graders turn rubrics into `Score`s; evaluation runs benchmarks. It owns no
model sampling: policies are user code.

Modules:
    core: `Env`, `AsyncEnv`, `as_async`, `as_sync`, `SingleTurnEnv`, `AsyncSingleTurnEnv`.
    spaces: text, token, chat-message and tool-call spaces.
    rollouts: `PolicyOutput`, `Policy`, `AsyncPolicy`, records, `rollout` and friends.
    datasets: `Dataset`, `RLDataset`.
    graders: `Score`, `Criterion`, `Rubric`, `CompositeGrader`, `LLMGrader`, aggregations.
    wrappers: `GradingWrapper`, `AsyncGradingWrapper`.
    evals: `Evaluation`, `Benchmark`, `run_benchmark`; `evals.benchmarks`: GSM8K and AIME.
    errors: the exception hierarchy (`RolloutlibError` and subclasses).
"""

from rolloutlib import spaces
from rolloutlib.core import (
    AsyncEnv,
    AsyncSingleTurnEnv,
    Env,
    SingleTurnEnv,
    as_async,
    as_sync,
)
from rolloutlib.datasets import Dataset, RLDataset
from rolloutlib.errors import (
    ArgumentError,
    ContractError,
    EnvStateError,
    GradingError,
    MissingDependencyError,
    RolloutlibError,
    SerializationError,
    SpaceValueError,
)
from rolloutlib.graders import CompositeGrader, Criterion, LLMGrader, Rubric, Score
from rolloutlib.rollouts import (
    AsyncPolicy,
    Policy,
    PolicyOutput,
    Step,
    Trajectory,
    TrajectoryGroup,
    arollout,
    arollout_group,
    rollout,
    rollout_group,
)
from rolloutlib.wrappers import AsyncGradingWrapper, GradingWrapper

__version__ = "0.2.0"

__all__ = [
    "ArgumentError",
    "AsyncEnv",
    "AsyncGradingWrapper",
    "AsyncPolicy",
    "AsyncSingleTurnEnv",
    "CompositeGrader",
    "ContractError",
    "Criterion",
    "Dataset",
    "Env",
    "EnvStateError",
    "GradingError",
    "GradingWrapper",
    "LLMGrader",
    "MissingDependencyError",
    "Policy",
    "PolicyOutput",
    "RLDataset",
    "RolloutlibError",
    "Rubric",
    "Score",
    "SerializationError",
    "SingleTurnEnv",
    "SpaceValueError",
    "Step",
    "Trajectory",
    "TrajectoryGroup",
    "__version__",
    "arollout",
    "arollout_group",
    "as_async",
    "as_sync",
    "rollout",
    "rollout_group",
    "spaces",
]

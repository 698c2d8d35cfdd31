"""A new training run: its configuration (a preset, `--set` overrides, `--steps`, `--max-lag`)
and its first facts in the ledger (the run with its spec, and the settings `max_lag` and
`sampling` that the gateway and runners follow).

Example:
    >>> from rollout.runs.config import RunConfig
    >>> config = apply_overrides(RunConfig(), ["max_lag=3", "importance.mode=icepop"])
    >>> config.max_lag, config.importance.mode
    (3, 'icepop')
    >>> apply_overrides(config, ["max_lag"])
    Traceback (most recent call last):
    ...
    rollout.errors.RolloutError: --set expects KEY=VALUE, got 'max_lag'
"""

from __future__ import annotations

import secrets
import time
import uuid
from pathlib import Path
from typing import Any

from rollout.errors import RolloutError
from rollout.harness.core import Environment
from rollout.launch.available import require_available
from rollout.ledger import Ledger, RunRecord
from rollout.runs import live
from rollout.runs.config import RunConfig
from rollout.runs.policies import PolicyMap
from rollout.runs.presets import load_preset, parse_config
from rollout.runs.spec import RunSpec


def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `KEY=VALUE` overrides in order (dotted keys for nested fields, YAML values), then
    validate the whole configuration again.

    Raises:
        RolloutError: an override is not `KEY=VALUE`, a value is not YAML, or the result is
            invalid (naming the field and the value).
    """
    import yaml

    data = config.model_dump(mode="json")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise RolloutError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise RolloutError(f"--set {key}: {raw!r} is not a YAML value: {error}") from None
        target = data
        *parents, leaf = key.split(".")
        for parent in parents:
            child = target.get(parent)
            if not isinstance(child, dict):
                child = {}
                target[parent] = child
            target = child
        target[leaf] = value
    return parse_config(data, source="--set")


def training_config(
    preset: str | RunConfig,
    overrides: list[str] | None = None,
    *,
    steps: int | None = None,
    max_lag: int | None = None,
) -> RunConfig:
    """The run's configuration: the preset, each override, then `steps` and `max_lag`
    (validated as the preset's fields are).

    Raises:
        RolloutError: as `apply_overrides`, or the backend or provider is not available yet.
    """
    base = preset if isinstance(preset, RunConfig) else load_preset(preset)
    config = apply_overrides(base, overrides or [])
    updates: dict[str, Any] = {}
    if steps is not None:
        updates["steps"] = steps
    if max_lag is not None:
        updates["max_lag"] = max_lag
    if updates:
        options = " and ".join(f"--{key.replace('_', '-')}" for key in updates)
        config = parse_config({**config.model_dump(mode="json"), **updates}, source=options)
    require_available(config)
    return config


def resolve_policies(config: RunConfig, environment: Environment) -> RunConfig:
    """`config` with its `policies:` resolved against the environment's agents and roles and
    recorded as agent indices (`PolicyMap.entries`), so no role needs the environment to read
    them; unchanged when it names none.

    Raises:
        InvalidPolicies: an agent has no policy or two, or an entry names an agent or role the
            environment does not have (one line naming it).
    """
    if not config.policies:
        return config
    mapping = PolicyMap.resolve(config.policies, agents=environment.agents, roles=environment.roles)
    return config.model_copy(update={"policies": mapping.entries(config.policies)})


def run_name(environment: str) -> str:
    """A default run name: `<environment>-<date>-<time>-<4 hex>`."""
    return f"{environment}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


async def create_run(
    ledger: Ledger,
    spec: str,
    config: RunConfig,
    model_path: Path,
    name: str,
) -> RunRecord:
    """Record the run (environment `spec`, its `RunSpec`) and the settings roles follow."""
    run_spec = RunSpec(kind="train", model=str(model_path), training=config)
    record = await ledger.create_run(name, spec, run_spec.model_dump(mode="json"))
    await ledger.set_setting(record.run_id, live.MAX_LAG, config.max_lag)
    # Internal endpoints bound beyond loopback require it (launch.roles.internal_secret).
    await ledger.set_setting(record.run_id, live.INTERNAL_SECRET, secrets.token_urlsafe(32))
    await ledger.set_setting(record.run_id, live.KEEP_CHECKPOINTS, config.keep_checkpoints)
    sampling: dict[str, Any] = {"temperature": config.temperature}
    if config.max_tokens is not None:
        sampling["max_tokens"] = config.max_tokens
    await ledger.set_setting(record.run_id, live.SAMPLING, sampling)
    return record

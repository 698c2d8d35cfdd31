"""Ledger queries shaped for display: plain dicts, JSON-ready."""

from __future__ import annotations

from typing import Any

from rollout.contracts import Turn
from rollout.ledger import EpisodeRecord, Ledger, RunRecord
from rollout.ledger.runs import shown_settings
from rollout.runs.errors import InvalidPolicies, InvalidRunSpec
from rollout.runs.live import RunSettings
from rollout.runs.policies import PolicyMap
from rollout.runs.spec import RunSpec


def turn_json(turn: Turn) -> dict[str, Any]:
    return {
        "agent": turn.agent,
        "attempt": turn.attempt,
        "index": turn.index,
        "version": turn.version,
        "stop_reason": turn.stop_reason,
        "extends_previous": turn.extends_previous,
        "temperature": turn.temperature,
        "started_at": turn.started_at,
        "ended_at": turn.ended_at,
        "prompt_tokens": list(turn.prompt_tokens),
        "completion_tokens": list(turn.completion_tokens),
        "logprobs": list(turn.logprobs),
        "request": turn.request,
    }


def episode_json(episode: EpisodeRecord) -> dict[str, Any]:
    return {
        "episode_id": episode.episode_id,
        "run_id": episode.run_id,
        "group_index": episode.group_index,
        "member": episode.member,
        "kind": episode.kind,
        "seed": episode.seed,
        "agents": episode.agents,
        "parameters": episode.parameters,
        "ends": [
            {
                "agent": end.agent,
                "attempt": end.attempt,
                "status": end.status,
                "reward": end.reward,
                "score": end.score,
                "metrics": end.metrics,
                "error": end.error,
            }
            for end in sorted(episode.ends, key=lambda e: e.agent)
        ],
        "turns": [turn_json(t) for t in episode.turns],
    }


async def episode_detail(ledger: Ledger, episode_id: str) -> dict[str, Any]:
    return episode_json(await ledger.episode(episode_id))


async def episode_rows(ledger: Ledger, run: str, limit: int) -> list[dict[str, Any]]:
    """The run's latest episodes, the most recently ended first (then those still playing or
    never played), each with its state: 'failed' (a seat failed), 'ended', 'playing' or
    'pending'."""
    record = await ledger.get_run(run)
    # Recently added episodes are often not played yet: read more, order by when they ended.
    episodes = await ledger.list_episodes(record.run_id, limit=limit * 4)

    def ended_at(episode: Any) -> float:
        return max((end.created_at for end in episode.ends), default=0.0)

    episodes.sort(key=ended_at, reverse=True)
    rows = []
    for episode in episodes[:limit]:
        completed = [e.reward for e in episode.ends if e.status == "completed"]
        failed = [e for e in episode.ends if e.status == "failed"]
        if failed:
            state = "failed"
        elif len(episode.ends) == episode.agents:
            state = "ended"
        elif episode.ends or any(seat.attempt > 0 for seat in episode.seats):
            state = "playing"
        else:
            state = "pending"
        rows.append(
            {
                "episode_id": episode.episode_id,
                "group_index": episode.group_index,
                "member": episode.member,
                "agents": episode.agents,
                "seats_ended": len(episode.ends),
                "state": state,
                "error": failed[0].error.strip().splitlines()[0]
                if failed and failed[0].error
                else None,
                "reward": sum(completed) / len(completed) if completed else None,
                "turns": len(episode.turns),
            }
        )
    return rows


def run_state(settings: dict[str, Any]) -> str:
    """The run's state from its raw settings (`RunSettings.state`)."""
    return RunSettings.of(settings).state


def trains(record: RunRecord) -> bool:
    """Whether the run trains (a `train` run): only those have steps to plot, episodes to pause
    and a max_lag to set. A run whose spec cannot be read counts as one (its controls stay)."""
    try:
        return RunSpec.of(record).kind == "train"
    except InvalidRunSpec:
        return True


async def run_summaries(ledger: Ledger) -> list[dict[str, Any]]:
    out = []
    for run in sorted(await ledger.list_runs(), key=lambda r: r.created_at, reverse=True):
        settings = await ledger.settings(run.run_id)
        steps = await ledger.train_steps(run.run_id)
        rl = [s for s in steps if s.step > 0]
        counts = await ledger.episode_counts(run.run_id)
        out.append(
            {
                "run_id": run.run_id,
                "name": run.name,
                "environment": run.environment,
                "created_at": run.created_at,
                "steps": len(rl),
                "episodes_ended": counts.get("ended", 0),
                "last_reward": rl[-1].metrics.get("reward") if rl else None,
                "state": run_state(settings),
            }
        )
    return out


async def run_detail(ledger: Ledger, run: str) -> dict[str, Any]:
    record = await ledger.get_run(run)
    settings = await ledger.settings(record.run_id)
    steps = await ledger.train_steps(record.run_id)
    checkpoints = await ledger.checkpoints(record.run_id)
    serving = await ledger.serving(record.run_id)
    acks = await ledger.serving_acks(record.run_id)
    counts = await ledger.episode_counts(record.run_id)
    return {
        "run_id": record.run_id,
        "name": record.name,
        "environment": record.environment,
        "created_at": record.created_at,
        "state": run_state(settings),
        "config": record.config,
        "settings": shown_settings(settings),
        "episodes": counts,
        "steps": [
            {"step": s.step, "metrics": s.metrics, "created_at": s.created_at} for s in steps
        ],
        "checkpoints": [
            {
                "version": c.version,
                "parent_version": c.parent_version,
                "uri": c.uri,
                "kind": c.kind,
                "created_at": c.created_at,
            }
            for c in checkpoints
        ],
        "serving": None if serving is None else {"version": serving.version, "uris": serving.uris},
        "serving_acks": acks,
        "policies": await policy_details(ledger, record),
    }


def policy_map(record: RunRecord) -> PolicyMap:
    """Which policies the run trains and the agents each plays (`PolicyMap.recorded`); one
    policy, `DEFAULT_POLICY`, for a run whose spec cannot be read or names none."""
    try:
        training = RunSpec.of(record).training
        return PolicyMap.recorded(training.policies if training is not None else {})
    except (InvalidRunSpec, InvalidPolicies):
        return PolicyMap.recorded({})


async def policy_details(ledger: Ledger, record: RunRecord) -> dict[str, Any]:
    """A run with several policies: each one's agents, steps, rewards, checkpoint chain and
    what it serves (empty for a run with one policy, whose figures are the run's)."""
    mapping = policy_map(record)
    if not mapping.several:
        return {}
    details: dict[str, Any] = {}
    for name in mapping.names:
        steps = [s for s in await ledger.train_steps(record.run_id, policy=name) if s.step > 0]
        chain = await ledger.checkpoints(record.run_id, policy=name)
        serving = await ledger.serving(record.run_id, policy=name)
        rewards = [s.metrics.get("reward", 0.0) for s in steps]
        details[name] = {
            "agents": list(mapping.agents_of(name)),
            "steps": len(steps),
            "rewards": rewards,
            "checkpoints": [
                {"version": c.version, "parent_version": c.parent_version, "uri": c.uri}
                for c in chain
            ],
            "serving": None if serving is None else serving.version,
            "serving_acks": await ledger.serving_acks(record.run_id, policy=name),
        }
    return details

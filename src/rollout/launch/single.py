"""`rollout run`: one episode, end to end, in one process.

It starts (or reuses) the embedded ledger, serves the model behind an in-process gateway on
loopback, and plays every seat of one episode through it exactly as a runner would, so the
episode's turns are recorded like any other.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from rollout.errors import RolloutError
from rollout.harness.loading import load_environment
from rollout.inference.factory import load_model
from rollout.inference.scripted import environment_backend
from rollout.launch.serve import serve_gateway
from rollout.ledger import COMMAND_WAIT_S, EpisodeSpec, Ledger
from rollout.runners.runner import Runner
from rollout.runs import live


async def play_one_episode(spec: str, *, model: str = "scripted", seed: int = 0) -> dict[str, Any]:
    """Play one episode of `spec` against `model`; return its transcript and outcome."""
    environment = load_environment(spec)
    renderer, backend = load_model(model)
    backend = environment_backend(backend, environment)  # the environment's scripted replies
    ledger = await Ledger.connect(wait_s=COMMAND_WAIT_S)
    try:
        run = await ledger.create_run(
            f"{environment.name}-run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            spec,
            {"kind": "single", "model": model},
        )
        parameters = environment.draw_parameters(0, seed)
        (episode_id,) = await ledger.add_episodes(
            run.run_id,
            [
                EpisodeSpec(
                    group_index=0,
                    member=0,
                    parameters=parameters,
                    seed=seed,
                    agents=environment.agents,
                    kind="playground",
                )
            ],
        )
        try:
            claims, results = await _play(ledger, run.run_id, episode_id, environment.agents,
                                          renderer, backend, model)  # fmt: skip
            record = await ledger.episode(episode_id)
        except Exception as error:
            await _end_run(ledger, run.run_id, f"{type(error).__name__}: {error}")
            raise
        except BaseException:  # Ctrl-C, a cancel: stopped, not failed
            await ledger.set_setting(run.run_id, live.STATUS, "stopped")
            raise
        failed = [end for end in record.ends if end.status != "completed"]
        await _end_run(
            ledger, run.run_id, f"agent {failed[0].agent}: {failed[0].error}" if failed else None
        )
    finally:
        await ledger.close()
        await backend.close()
    ends = {end.agent: end for end in record.ends}
    seats = []
    for claim, result in zip(claims, results, strict=True):
        end = ends.get(claim.agent)
        seats.append(
            {
                "agent": claim.agent,
                "status": end.status if end else "unknown",
                "reward": end.reward if end else 0.0,
                "error": end.error if end else None,
                # The recorded model calls: an agent program calls the gateway itself.
                "turns": sum(1 for turn in record.turns if turn.agent == claim.agent),
                "messages": []
                if result is None
                else [
                    {
                        "role": m.role,
                        "text": m.text,
                        "tool_calls": [c.model_dump() for c in m.tool_calls],
                    }
                    for m in result.messages
                ],
            }
        )
    return {
        "run_id": run.run_id,
        "run_name": run.name,
        "episode_id": episode_id,
        "parameters": parameters,
        "seats": seats,
    }


async def _play(
    ledger: Ledger, run_id: str, episode_id: str, agents: int, renderer: Any, backend: Any,
    model: str,
) -> tuple[list[Any], list[Any]]:  # fmt: skip
    """Claim every seat of the episode and play them through an in-process gateway."""
    server = await serve_gateway(ledger, renderer, backend, model_name=model)
    runner = Runner(ledger, f"{server.url}/v1", run_id=run_id, runner_id="rollout-run")
    try:
        claims = []
        for _ in range(agents):
            claim = await ledger.claim_seat(runner.runner_id, run_id=run_id)
            if claim is None:
                raise RolloutError(f"could not claim a seat of episode {episode_id}")
            claims.append(claim)
        return claims, list(await asyncio.gather(*(runner.play(c) for c in claims)))
    finally:
        await runner.close()
        await server.stop()


async def _end_run(ledger: Ledger, run_id: str, error: str | None) -> None:
    """The one-episode run is over: finished, or failed with `error` (one line)."""
    if error is None:
        await ledger.set_setting(run_id, live.FINISHED, True)
        return
    await ledger.set_setting(run_id, live.ERROR, error.splitlines()[0] if error else error)
    await ledger.set_setting(run_id, live.STATUS, "failed")

"""`rollout runs show` of a run with several policies: each policy's agents, steps, rewards,
checkpoint chain and serving (`rollout.monitor.queries.policy_details`)."""

from __future__ import annotations

import io

from rich.console import Console

from rollout.ledger import CheckpointRecord, Ledger
from rollout.ledger.leases import trainer_lease
from rollout.monitor.queries import run_detail
from rollout.monitor.render import print_run
from rollout.runs.config import RunConfig
from rollout.runs.spec import RunSpec


def checkpoint(run_id: str, policy: str, version: int) -> CheckpointRecord:
    return CheckpointRecord(
        run_id, version, version - 1 if version else None, f"{policy}/v{version}", "full", 0.0,
        {}, policy,
    )  # fmt: skip


async def test_runs_show_has_a_line_per_policy(ledger: Ledger) -> None:
    config = RunConfig.model_validate(
        {"policies": {"walker": {"agents": [0]}, "avoider": {"agents": [1]}}}
    )
    spec = RunSpec(kind="train", model="m", training=config)
    run = await ledger.create_run("two", "gridworld.environment:pair", spec.model_dump(mode="json"))
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "t")
    for policy, rewards in (("walker", [0.1, 0.2]), ("avoider", [0.7, 0.9])):
        await ledger.record_checkpoint(lease, checkpoint(run.run_id, policy, 0))
        for step, reward in enumerate(rewards, 1):
            await ledger.record_train_step(
                lease,
                run.run_id,
                step,
                [],
                {"reward": reward},
                checkpoint(run.run_id, policy, step),
            )
    await ledger.ack_serving(run.run_id, "s1", 1, policy="avoider")
    detail = await run_detail(ledger, run.run_id)
    assert detail["policies"]["walker"]["rewards"] == [0.1, 0.2]
    assert [c["version"] for c in detail["policies"]["avoider"]["checkpoints"]] == [0, 1, 2]
    out = io.StringIO()
    print_run(Console(file=out, width=200), detail)
    text = out.getvalue()
    assert "policy walker (agents [0]): 2 steps, reward 0.150 -> 0.150" in text
    assert "policy avoider (agents [1]): 2 steps, reward 0.800 -> 0.800" in text
    assert "servers: {'s1': 1}" in text

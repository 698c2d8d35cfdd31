"""The monitor of a run with several policies: `rollout runs show` has a line per policy (its
agents, steps, rewards, checkpoint chain and serving), and the web run page and checkpoint tree,
over real HTTP, have a reward curve and a checkpoint chain per policy, each labelled by its
policy, while a run with one policy reads as it always did."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from rich.console import Console

from rollout.ledger import CheckpointRecord, Ledger, ServingRecord
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


async def train(ledger: Ledger, name: str, rewards: dict[str, list[float]]) -> str:
    """A train run whose policies (`main` alone: a run naming none) took a step per reward, each
    checkpoint converted for `local`; each policy serves its newest version, acknowledged by a
    server of its own."""
    policies = (
        {} if list(rewards) == ["main"] else {p: {"agents": [i]} for i, p in enumerate(rewards)}
    )
    spec = RunSpec(
        kind="train", model="m", training=RunConfig.model_validate({"policies": policies})
    )
    run = await ledger.create_run(name, "gridworld.environment:pair", spec.model_dump(mode="json"))
    lease = await ledger.acquire_lease(trainer_lease(run.run_id), "t")
    for policy, values in rewards.items():
        await ledger.record_checkpoint(lease, checkpoint(run.run_id, policy, 0))
        for step, reward in enumerate(values, 1):
            await ledger.record_train_step(
                lease,
                run.run_id,
                step,
                [],
                {"reward": reward},
                checkpoint(run.run_id, policy, step),
            )
        for version in range(len(values) + 1):
            uri = f"{policy}/v{version}-local"
            await ledger.record_conversion(run.run_id, version, "local", uri, policy=policy)
        newest = len(values)
        uris = {"local": f"{policy}/v{newest}-local"}
        await ledger.set_serving(lease, ServingRecord(run.run_id, newest, uris, 0.0, policy))
        await ledger.ack_serving(run.run_id, f"server-{policy}", newest, policy=policy)
    return run.run_id


async def test_runs_show_has_a_line_per_policy(ledger: Ledger) -> None:
    run_id = await train(ledger, "two", {"walker": [0.1, 0.2], "avoider": [0.7, 0.9]})
    detail = await run_detail(ledger, run_id)
    assert detail["policies"]["walker"]["rewards"] == [0.1, 0.2]
    assert [c["version"] for c in detail["policies"]["avoider"]["checkpoints"]] == [0, 1, 2]
    out = io.StringIO()
    print_run(Console(file=out, width=200), detail)
    text = out.getvalue()
    assert "policy walker (agents [0]): 2 steps, reward 0.150 -> 0.150" in text
    assert "policy avoider (agents [1]): 2 steps, reward 0.800 -> 0.800" in text
    assert "servers: {'server-avoider': 2}" in text


@pytest.fixture
async def api(
    ledger: Ledger, database_url: str, serve_monitor: Callable[..., Awaitable[str]]
) -> AsyncIterator[httpx.AsyncClient]:
    base = await serve_monitor(database_url)
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client


async def test_a_curve_and_a_chain_per_policy(ledger: Ledger, api: httpx.AsyncClient) -> None:
    await train(ledger, "two", {"walker": [0.1, 0.2, 0.3], "avoider": [0.7, 0.9]})
    policies = (await api.get("/api/runs/two")).json()["policies"]
    assert all(p["serving"].pop("at") is not None for p in policies.values())
    assert policies == {
        "walker": {
            "agents": [0],
            "latest_version": 3,
            "serving": {"version": 3, "uris": {"local": "walker/v3-local"}},
            "servers": [{"server": "server-walker", "version": 3}],
        },
        "avoider": {
            "agents": [1],
            "latest_version": 2,
            "serving": {"version": 2, "uris": {"local": "avoider/v2-local"}},
            "servers": [{"server": "server-avoider", "version": 2}],
        },
    }

    # Each policy's steps: its own rewards, paged by its own step numbers.
    async def rewards(policy: str, after: int = -1) -> list[tuple[int, float]]:
        params = {"policy": policy, "after": after}
        page = (await api.get("/api/runs/two/steps", params=params)).json()
        return [(s["step"], s["metrics"]["reward"]) for s in page["items"] if s["step"] > 0]

    assert await rewards("walker") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert await rewards("avoider") == [(1, 0.7), (2, 0.9)]
    assert await rewards("walker", after=2) == [(3, 0.3)]
    unnamed = await api.get("/api/runs/two/steps")
    assert unnamed.status_code == 400
    assert "several policies (walker, avoider): pass policy=NAME" in unnamed.json()["error"]
    unknown = await api.get("/api/runs/two/checkpoints", params={"policy": "main"})
    assert unknown.status_code == 400 and "'main'" in unknown.json()["error"]

    # Each policy's chain: its versions, parents, conversions, publication and servers.
    for policy, newest in (("walker", 3), ("avoider", 2)):
        params = {"policy": policy}
        chain = (await api.get("/api/runs/two/checkpoints", params=params)).json()["items"]
        assert [(c["version"], c["parent_version"]) for c in chain] == [
            (v, v - 1 if v else None) for v in range(newest + 1)
        ]
        assert [c["uri"] for c in chain] == [f"{policy}/v{v}" for v in range(newest + 1)]
        assert chain[1]["conversions"] == {"local": f"{policy}/v1-local"}
        assert [c["served_by"] for c in chain] == [[]] * newest + [[f"server-{policy}"]]
        assert chain[-1]["published_at"] is not None and chain[0]["published_at"] is None

    # The run page plots a series per policy and shows each one's versions.
    page = (await api.get("/runs/two")).text
    assert 'data-steps="/api/runs/' in page and 'data-policies="walker avoider"' in page
    assert "policy walker (agents 0)" in page and "policy avoider (agents 1)" in page
    assert "newest 3 · serving 3" in page and "newest 2 · serving 2" in page
    assert "server-walker → v3" in page

    # The checkpoint tree: a chain per policy, labelled.
    tree = (await api.get("/runs/two/checkpoints")).text
    assert 'id="checkpoints"' not in tree
    for policy, newest in (("walker", 3), ("avoider", 2)):
        assert f'<h2 id="policy-{policy}">Policy {policy}' in tree
        table = tree.split(f'id="checkpoints-{policy}"')[1].split("</table>")[0]
        rows = re.findall(r'<tr class="checkpoint-row" id="([^"]+)"', table)
        assert rows == [f"{policy}-v{v}" for v in range(newest + 1)]
        assert f'<a href="#{policy}-v1">v1</a>' in table
        assert f"<code>{policy}/v{newest}</code>" in table
        assert f"<code>server-{policy}</code> serves v{newest}" in tree
    one = (await api.get("/runs/two/checkpoints", params={"policy": "avoider"})).text
    assert 'id="checkpoints-avoider"' in one and 'id="checkpoints-walker"' not in one


async def test_a_run_with_one_policy_reads_as_before(
    ledger: Ledger, api: httpx.AsyncClient
) -> None:
    run_id = await train(ledger, "one", {"main": [0.25, 0.5]})
    detail = (await api.get("/api/runs/one")).json()
    assert detail["policies"] == {}
    assert detail["latest_version"] == 2 and detail["serving"]["version"] == 2
    steps = (await api.get("/api/runs/one/steps")).json()
    assert steps["next"] is None
    assert [{k: v for k, v in s.items() if k != "created_at"} for s in steps["items"]] == [
        {"step": 1, "metrics": {"reward": 0.25}, "episodes_per_s": None, "tokens_per_s": None},
        {"step": 2, "metrics": {"reward": 0.5}, "episodes_per_s": None, "tokens_per_s": None},
    ]
    named = (await api.get("/api/runs/one/steps", params={"policy": "main"})).json()
    assert named == steps
    chain = (await api.get("/api/runs/one/checkpoints")).json()
    assert chain["next"] is None
    assert [
        {k: v for k, v in c.items() if k not in ("created_at", "published_at")}
        for c in chain["items"]
    ] == [
        {
            "version": v,
            "parent_version": v - 1 if v else None,
            "kind": "full",
            "uri": f"main/v{v}",
            "metadata": {},
            "conversions": {"local": f"main/v{v}-local"},
            "served_by": ["server-main"] if v == 2 else [],
        }
        for v in range(3)
    ]
    page = (await api.get("/runs/one")).text
    assert f'data-steps="/api/runs/{run_id}/steps"></div>' in page
    assert "data-policies" not in page and "policy main" not in page
    assert "newest 2 · serving 2" in page and "server-main → v2" in page
    tree = (await api.get("/runs/one/checkpoints")).text
    assert 'id="checkpoints"' in tree and "Policy" not in tree
    rows = re.findall(r'<tr class="checkpoint-row" id="([^"]+)"', tree)
    assert rows == ["v0", "v1", "v2"] and '<a href="#v1">v1</a>' in tree
    assert "<code>server-main</code> serves v2 (" in tree

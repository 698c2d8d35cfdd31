"""The monitor's JSON API on its own, over real HTTP, on a synthetic run of 100,000 turns.

The run is built once per module (about 20 s: `tests.monitor.synthetic`), hence slow.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from tests.monitor.conftest import BigRun

pytestmark = pytest.mark.slow


@pytest.fixture
async def api(
    big_run: BigRun, serve_monitor: Callable[..., Awaitable[str]]
) -> AsyncIterator[httpx.AsyncClient]:
    base = await serve_monitor(big_run.url)
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client


async def test_runs_and_run_detail(api: httpx.AsyncClient, big_run: BigRun) -> None:
    runs = (await api.get("/api/runs")).json()
    assert [r["name"] for r in runs["items"]] == ["big"] and runs["next"] is None
    assert runs["items"][0]["steps"] == big_run.run.steps
    detail = (await api.get("/api/runs/big")).json()
    assert detail["run_id"] == big_run.run.run_id
    assert detail["counts"]["turns"] == 100_000
    assert detail["episodes"]["total"] == detail["episodes"]["ended"] == 5000
    assert detail["episodes"]["failed"] == 1000
    assert detail["latest_version"] == big_run.run.steps
    assert detail["state"] == "active" and detail["max_lag"] == 1
    assert detail["trainer"]["holder"] == "trainer-synthetic-42" and detail["trainer"]["alive"]
    assert {s["server"] for s in detail["servers"]} == {
        "http://127.0.0.1:9001",
        "http://10.1.2.3:9001",
    }
    assert detail["has_evals"] is False
    missing = await api.get("/api/runs/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


async def test_steps_page_through_with_rates(api: httpx.AsyncClient, big_run: BigRun) -> None:
    seen, after = [], -1
    while True:
        page = (await api.get("/api/runs/big/steps", params={"after": after, "limit": 64})).json()
        assert len(page["items"]) <= 64
        seen.extend(page["items"])
        if page["next"] is None:
            break
        after = page["next"]
    assert [s["step"] for s in seen] == list(range(big_run.run.steps + 1))
    # Steps are one second apart and each trained 16 episodes and 320 tokens.
    assert seen[0]["episodes_per_s"] is None
    assert seen[10]["episodes_per_s"] == pytest.approx(16, rel=0.05)
    assert seen[10]["tokens_per_s"] == pytest.approx(320, rel=0.05)
    assert seen[-1]["metrics"]["reward"] == pytest.approx(1.0)
    too_many = await api.get("/api/runs/big/steps", params={"limit": 100_000})
    assert too_many.status_code == 400 and "limit" in too_many.json()["error"]


async def test_episodes_are_paged_newest_first_without_overlap(api: httpx.AsyncClient) -> None:
    ids: list[str] = []
    cursor = None
    for _ in range(3):
        params = {"run": "big", "limit": 100, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/api/episodes", params=params)).json()
        assert len(page["items"]) == 100 and page["next"] is not None
        ids.extend(e["episode_id"] for e in page["items"])
        cursor = page["next"]
    assert len(set(ids)) == 300
    assert ids[0] == "big00000-train-g624-m7"  # the newest of 5,000
    first = (await api.get("/api/episodes", params={"run": "big", "limit": 1})).json()["items"][0]
    assert first["turns"] == 20 and first["status"] in ("completed", "failed")
    assert first["versions"] == [199, 199] and first["agents"] == 1
    bad = await api.get("/api/episodes", params={"limit": 501})
    assert bad.status_code == 400 and "limit" in bad.json()["error"]
    bad = await api.get("/api/episodes", params={"status": "weird"})
    assert bad.status_code == 400 and "weird" in bad.json()["error"]
    bad = await api.get("/api/episodes", params={"reward_min": "high"})
    assert bad.status_code == 400 and "reward_min" in bad.json()["error"]


async def test_episode_filters(api: httpx.AsyncClient) -> None:
    async def items(**params: str | int | float) -> list[dict]:
        return (await api.get("/api/episodes", params={"run": "big", **params})).json()["items"]

    failed = await items(status="failed", limit=50)
    assert len(failed) == 50 and all(e["status"] == "failed" for e in failed)
    winners = await items(reward_min=0.5, limit=50)
    assert len(winners) == 50 and all(e["reward"] == 1.0 for e in winners)
    losers = await items(reward_max=0.5, status="completed", limit=20)
    assert all(e["reward"] == 0.0 for e in losers)
    assert all(e["versions"] == [0, 0] for e in await items(version=0, limit=10))
    (needle,) = await items(q="needle-1234 turn")
    assert needle["episode_id"] == "big00000-train-g154-m2"
    assert await items(environment="other.environment:env") == []
    assert len(await items(environment="parity.environment:environment", limit=3)) == 3
    assert len(await items(kind="eval")) == 0


async def test_conversation_and_tokens(api: httpx.AsyncClient) -> None:
    episode_id = "big00000-train-g0-m3"
    head = (await api.get(f"/api/episodes/{episode_id}")).json()
    assert head["parameters"] == {"n": 3} and head["seats"][0]["turns"] == 20
    assert head["seats"][0]["status"] == "completed" and head["seats"][0]["reward"] == 1.0
    url = f"/api/episodes/{episode_id}/agents/0/turns"
    first = (await api.get(url, params={"limit": 5})).json()
    assert [t["index"] for t in first["items"]] == [0, 1, 2, 3, 4] and first["next"] == 5
    turn = first["items"][1]
    assert turn["messages"][0]["text"] == "needle-3 turn 1" and turn["reply"]["text"] == "E"
    assert turn["continued"] is False  # each synthetic request is a fresh context
    assert turn["extends_previous"] is True and turn["completion_tokens"] == 20
    last = (await api.get(url, params={"offset": 15, "limit": 10})).json()
    assert [t["index"] for t in last["items"]] == list(range(15, 20)) and last["next"] is None
    tokens = (await api.get(f"{url}/7")).json()
    assert tokens["version"] == 0 and len(tokens["prompt_tokens"]) == 207
    assert [t["id"] for t in tokens["completion"]] == [7] * 20
    assert tokens["completion"][0]["logprob"] == -0.25
    assert (await api.get(f"{url}/99")).status_code == 404
    assert (await api.get("/api/episodes/none")).status_code == 404


async def test_checkpoint_tree(api: httpx.AsyncClient, big_run: BigRun) -> None:
    page = (await api.get("/api/runs/big/checkpoints", params={"limit": 50})).json()
    assert [c["version"] for c in page["items"]] == list(range(50)) and page["next"] == 49
    assert page["items"][0]["parent_version"] is None and page["items"][7]["parent_version"] == 6
    assert page["items"][3]["conversions"] == {"local": "converted/big00000/v3"}
    assert page["items"][3]["published_at"] is not None
    tail = (await api.get("/api/runs/big/checkpoints", params={"after": 190})).json()
    versions = {c["version"]: c for c in tail["items"]}
    assert versions[200]["served_by"] == ["http://127.0.0.1:9001"]
    assert versions[197]["served_by"] == ["http://10.1.2.3:9001"]
    assert tail["next"] is None
    assert (await api.get("/api/runs/big/evals")).json() == {"items": []}


async def test_machines(api: httpx.AsyncClient) -> None:
    machines = (await api.get("/api/machines")).json()["items"]
    by_id = {m["id"]: m for m in machines}
    assert len(by_id) == 7  # every process that beat in the last ten minutes
    trainer = by_id["synthetic:42:a"]
    assert trainer["role"] == "trainer" and trainer["host"] == "synthetic"
    assert trainer["state"] == "alive" and trainer["detail"]["epoch"] == 1  # its lease
    runner = by_id["synthetic:7:b"]
    assert runner["state"] == "alive" and runner["detail"]["claims"] == 5000
    server = by_id["gpu-1:9:c"]
    assert server["host"] == "gpu-1" and server["detail"]["serving_version"] == 197
    evaluator = by_id["synthetic:11:d"]
    assert evaluator["role"] == "evaluator" and evaluator["run_id"] == "big00000"
    assert by_id["synthetic:5:e"]["role"] == "supervisor"
    bridge = by_id["synthetic:6:f"]
    assert bridge["role"] == "bridge" and bridge["state"] == "stopped"
    assert by_id["other:8:g"]["state"] == "dead"  # no beat for five minutes
    recent = (await api.get("/api/machines", params={"recent_s": 120})).json()["items"]
    assert "other:8:g" not in {m["id"] for m in recent}
    assert (await api.get("/api/machines", params={"recent_s": 0})).status_code == 400


async def test_pages_render_on_a_large_run(api: httpx.AsyncClient) -> None:
    for path, text in [
        ("/", "big00000"),
        ("/runs/big", "Per step"),
        ("/runs/big/checkpoints", "v200"),
        ("/episodes?run=big", "big00000-train-g624-m7"),
        ("/episodes?run=big&status=failed&q=needle-4+turn", "big00000-train-g0-m4"),
        ("/episodes/big00000-train-g0-m3", "Agent 0"),
        ("/_/episodes/big00000-train-g0-m3/agents/0/turns", "needle-3 turn 19"),
        ("/_/episodes/big00000-train-g0-m3/agents/0/turns/2/tokens", "logprob -0.25"),
        ("/machines", "synthetic:42:a"),
    ]:
        response = await api.get(path)
        assert response.status_code == 200, (path, response.text[:500])
        assert text in response.text, path
    rows = (await api.get("/episodes?run=big")).text.count('class="episode-row"')
    assert rows == 50
    missing = await api.get("/runs/nope")
    assert missing.status_code == 404 and "nope" in missing.text
    assert (await api.get("/runs/big/evals")).status_code == 404

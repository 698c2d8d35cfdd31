"""The monitor's controls (its only writes), its token, its loopback rule and its read-only pool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import psycopg
import pytest

from rollout.ledger import Ledger
from rollout.monitor.app import check_binding
from rollout.monitor.errors import MonitorError
from rollout.monitor.store import MonitorStore
from tests.cli_helpers import rollout

Serve = Callable[..., Awaitable[str]]


async def test_pause_resume_and_max_lag(ledger: Ledger, serve_monitor: Serve) -> None:
    run = await ledger.create_run("steer", "parity.environment:environment", {})
    async with httpx.AsyncClient(base_url=await serve_monitor(ledger.url)) as api:
        paused = (await api.post("/api/runs/steer/pause", json={})).json()
        assert paused["state"] == "paused"
        assert (await ledger.settings(run.run_id))["paused"] is True
        assert (await api.post(f"/api/runs/{run.run_id}/resume", json={})).json()["state"] == (
            "active"
        )
        assert (await ledger.settings(run.run_id))["paused"] is False
        lag = await api.post("/api/runs/steer/max_lag", json={"max_lag": 3})
        assert lag.json()["max_lag"] == 3 and (await ledger.settings(run.run_id))["max_lag"] == 3
        for bad in (-1, "two", 1.5, None):
            refused = await api.post("/api/runs/steer/max_lag", json={"max_lag": bad})
            assert refused.status_code == 400, bad
            assert "max_lag" in refused.json()["error"] and repr(bad) in refused.json()["error"]
        assert (await ledger.settings(run.run_id))["max_lag"] == 3
        # The page's form (htmx posts url-encoded fields) answers with the new status block.
        form = await api.post(
            "/_/runs/steer/max_lag", content="max_lag=5", headers={"HX-Request": "true"}
        )
        assert form.status_code == 200 and 'id="max-lag">5<' in form.text
        # A plain cross-site form post cannot steer a run.
        forged = await api.post(
            "/api/runs/steer/pause",
            content="x=1",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert forged.status_code == 403
        assert (await ledger.settings(run.run_id))["paused"] is False
        assert (await api.post("/api/runs/none/pause", json={})).status_code == 404


async def test_run_controls_show_only_where_they_apply(
    ledger: Ledger, serve_monitor: Serve
) -> None:
    spec = "parity.environment:environment"
    train = await ledger.create_run("train", spec, {"kind": "train", "model": "m"})
    done = await ledger.create_run("done", spec, {"kind": "train", "model": "m"})
    await ledger.set_setting(done.run_id, "finished", True)
    single = await ledger.create_run("single", spec, {"kind": "single", "model": "scripted"})
    shown = {"pause": 'id="pause"', "max_lag": 'id="max-lag"', "plots": 'id="plots"'}
    async with httpx.AsyncClient(base_url=await serve_monitor(ledger.url)) as api:
        pages = {
            run.name: (await api.get(f"/runs/{run.run_id}")).text for run in (train, done, single)
        }
    found = {
        name: {c for c, marker in shown.items() if marker in page} for name, page in pages.items()
    }
    # A one-episode run (`rollout run`) has no steps to plot, nothing to pause, no max_lag.
    assert found == {"train": set(shown), "done": {"plots"}, "single": set()}


async def test_token_is_required_everywhere(ledger: Ledger, serve_monitor: Serve) -> None:
    await ledger.create_run("secret", "parity.environment:environment", {})
    base = await serve_monitor(ledger.url, token="s3cret")
    async with httpx.AsyncClient(base_url=base) as anonymous:
        for path in ("/", "/api/runs", "/runs/secret", "/static/uplot.min.js", "/machines"):
            assert (await anonymous.get(path)).status_code == 401, path
        assert (await anonymous.post("/api/runs/secret/pause", json={})).status_code == 401
        wrong = await anonymous.get("/api/runs", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert (await anonymous.get("/?token=nope")).status_code == 401
        header = await anonymous.get("/api/runs", headers={"Authorization": "Bearer s3cret"})
        assert header.status_code == 200 and header.json()["items"][0]["name"] == "secret"
        other = await anonymous.get("/api/runs", headers={"X-Rollout-Token": "s3cret"})
        assert other.status_code == 200
    async with httpx.AsyncClient(base_url=base, follow_redirects=True) as browser:
        # A ?token= link sets the cookie and reloads the page without the token in it.
        page = await browser.get("/runs/secret?token=s3cret")
        assert page.status_code == 200 and "secret" in page.text
        assert str(page.url).endswith("/runs/secret")
        assert (await browser.get("/api/runs")).status_code == 200


def test_binding_beyond_loopback_needs_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    check_binding("127.0.0.1", None)
    check_binding("::1", None)
    check_binding("0.0.0.0", "t")
    with pytest.raises(MonitorError, match="--token"):
        check_binding("0.0.0.0", None)
    code, _, err = rollout(capsys, "monitor", "--host", "0.0.0.0")
    assert code == 2 and "--token" in err and len(err.strip().splitlines()) == 1


async def test_reads_go_through_a_read_only_connection(database_url: str) -> None:
    store = await MonitorStore.open(database_url)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            async with store.reads._pool.connection() as conn:  # pyright: ignore[reportPrivateUsage]
                await conn.execute("DELETE FROM runs")
        assert (await store.runs())["items"] == []
    finally:
        await store.close()


async def test_evals_show_only_once_scored(
    ledger: Ledger, serve_monitor: Serve, database_url: str
) -> None:
    run = await ledger.create_run("scored", "parity.environment:environment", {})
    async with httpx.AsyncClient(base_url=await serve_monitor(ledger.url)) as api:
        assert (await api.get("/api/runs/scored")).json()["has_evals"] is False
        assert (await api.get("/runs/scored/evals")).status_code == 404
        assert "/evals" not in (await api.get("/runs/scored")).text
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO eval_suites (name, version, content_hash, definition)"
                " VALUES ('arith', '1', 'h', '{}')"
            )
            for version, score in ((-1, 0.25), (0, 0.5)):
                cursor = await conn.execute(
                    "INSERT INTO eval_jobs (run_id, suite, suite_version, version, episodes,"
                    " trigger) VALUES (%s, 'arith', '1', %s, 10, 'demand') RETURNING job_id",
                    (run.run_id, version),
                )
                (job,) = await cursor.fetchone() or (None,)
                await conn.execute(
                    "INSERT INTO eval_scores (job_id, environment, position, run_id, score,"
                    " ci_low, ci_high, episodes, failed, method)"
                    " VALUES (%s, 'arithmetic', 0, %s, %s, 0.1, 0.9, 10, 0, 'wilson')",
                    (job, run.run_id, score),
                )
        assert (await api.get("/api/runs/scored")).json()["has_evals"] is True
        scores = (await api.get("/api/runs/scored/evals")).json()["items"]
        assert [(s["version"], s["suite"], s["environment"], s["score"]) for s in scores] == [
            (-1, "arith", "arithmetic", 0.25),
            (0, "arith", "arithmetic", 0.5),
        ]
        page = await api.get("/runs/scored/evals")
        assert page.status_code == 200 and "arith@1" in page.text and "base" in page.text
        assert f'href="/runs/{run.run_id}/evals"' in (await api.get("/runs/scored")).text

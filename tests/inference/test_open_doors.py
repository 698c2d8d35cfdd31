"""No open doors: every HTTP role binds loopback by default, and an inference server bound
beyond loopback refuses (401) any request without the run's internal secret."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path

import httpx
import pytest

from rollout.cli import monitor
from rollout.cli import roles as cli_roles
from rollout.contracts import SamplingParams
from rollout.inference.remote import SECRET_HEADER, InferenceUnavailable, RemoteBackend
from rollout.launch import roles
from rollout.ledger import Ledger
from rollout.models import init_model
from rollout.monitor.app import is_loopback


@pytest.mark.parametrize(
    "command",
    [cli_roles.inference_role, cli_roles.gateway_role, cli_roles.playground, monitor.monitor],
)
def test_every_http_role_binds_loopback_by_default(command: object) -> None:
    default = inspect.signature(command).parameters["host"].default  # type: ignore[arg-type]
    assert is_loopback(default), f"{command} binds {default!r} by default"


async def _setting(ledger: Ledger, run_id: str, key: str) -> str:
    for _ in range(600):
        value = (await ledger.settings(run_id)).get(key)
        if value:
            return str(value)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} was never set")


async def test_inference_bound_beyond_loopback_requires_the_runs_secret(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    model = init_model(tmp_path / "model", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=300)
    ledger = await Ledger.connect(database_url)
    stop = asyncio.Event()
    try:
        run = await ledger.create_run(
            "doors", "parity.environment:environment", {"model": str(model)}
        )
        server = asyncio.create_task(roles.inference(stop, run=run.run_id, host="0.0.0.0", port=0))
        advertised = await _setting(ledger, run.run_id, "inference_url")
        secret = await _setting(ledger, run.run_id, "internal_secret")
        assert len(secret) >= 32
        url = f"http://127.0.0.1:{advertised.rsplit(':', 1)[1]}"
        body = {"prompt_tokens": [1, 2, 3], "params": {"max_tokens": 2}}
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await client.get(f"{url}/health")).status_code == 401
            assert (await client.post(f"{url}/sample", json=body)).status_code == 401
            wrong = {SECRET_HEADER: "not-the-secret"}
            assert (await client.post(f"{url}/sample", json=body, headers=wrong)).status_code == 401
            right = {SECRET_HEADER: secret}
            assert (await client.get(f"{url}/health", headers=right)).status_code == 200
        params = SamplingParams(max_tokens=2)
        with_secret = RemoteBackend(url, secret=secret)
        without = RemoteBackend(url)
        try:
            assert len((await with_secret.sample([1, 2, 3], params)).tokens) >= 1
            with pytest.raises(InferenceUnavailable, match="401"):
                await without.sample([1, 2, 3], params)
        finally:
            await with_secret.close()
            await without.close()
        stop.set()
        await asyncio.wait_for(server, 30)
    finally:
        stop.set()
        await ledger.close()


async def test_a_new_run_gets_its_own_random_internal_secret(
    ledger: Ledger, tmp_path: Path
) -> None:
    from rollout.launch.new_run import create_run, training_config

    config = training_config("cpu-tiny", [], steps=1, max_lag=1)
    spec = "parity.environment:environment"
    first = await create_run(ledger, spec, config, tmp_path, "doors-1")
    second = await create_run(ledger, spec, config, tmp_path, "doors-2")
    secrets = [(await ledger.settings(r.run_id))["internal_secret"] for r in (first, second)]
    assert all(len(s) >= 32 for s in secrets) and secrets[0] != secrets[1]
    # The inference role uses it as it is (it makes one only for a run without one).
    assert await roles.internal_secret(ledger, first.run_id) == secrets[0]


async def test_runs_show_and_the_monitor_hide_the_internal_secret(
    ledger: Ledger, tmp_path: Path
) -> None:
    from rollout.launch.new_run import create_run, training_config
    from rollout.monitor.queries import run_detail
    from rollout.monitor.store import MonitorStore

    config = training_config("cpu-tiny", [], steps=1, max_lag=1)
    run = await create_run(ledger, "parity.environment:environment", config, tmp_path, "doors-3")
    secret = (await ledger.settings(run.run_id))["internal_secret"]
    detail = await run_detail(ledger, run.run_id)
    assert detail["settings"]["internal_secret"] == "(hidden)"
    assert secret not in json.dumps(detail, default=str)
    store = await MonitorStore.open(ledger.url)
    try:
        page = await store.run(run.run_id)
    finally:
        await store.close()
    assert secret not in json.dumps(page, default=str)

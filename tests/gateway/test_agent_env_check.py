"""`rollout env check` on the agent-CLI environments: a real gateway serves the real CLIs.

Claude Code and Codex make their own model calls, so the environments say `needs_gateway` and
name the scripted model's replies (`scripted_reply`: the CLI's own file-writing tool call, then
`Done.`). The check plays one episode through an in-process gateway; the CLI writes the file,
the reward checks it, and the gateway records both model calls in the ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from claude_code.environment import environment as claude_environment
from codex.environment import environment as codex_environment

from rollout.contracts import SamplingParams
from rollout.harness import Environment
from rollout.harness.check import check_environment
from rollout.harness.errors import InvalidEnvironment
from rollout.inference.factory import load_model
from rollout.inference.scripted import environment_backend
from rollout.ledger import Ledger
from tests.gateway.test_agent_clis import needs_claude, needs_codex

ENVIRONMENT_WITHOUT_SCRIPT = Environment(name="plain", task=claude_environment.task)


def env_check(
    spec: str, database_url: str, tmp_path: Path, command: str = "env check"
) -> dict[str, Any]:
    environ = {
        **os.environ,
        "ROLLOUT_DATABASE_URL": database_url,
        "ROLLOUT_STATE_DIR": str(tmp_path / "state"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", *command.split(), spec, "--json"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


async def recorded(database_url: str, episode_id: str) -> list[str]:
    ledger = await Ledger.connect(database_url)
    try:
        record = await ledger.episode(episode_id)
    finally:
        await ledger.close()
    return [turn.request["protocol"] for turn in record.turns]


@pytest.mark.slow
async def test_env_check_serves_the_openai_sdk_agent(database_url: str, tmp_path: Path) -> None:
    report = env_check("openai_agent.environment:environment", database_url, tmp_path)
    assert report["ok"] and report["recorded_turns"] >= 1, report
    turns = await recorded(database_url, str(report["episode_id"]))
    assert turns and set(turns) <= {"chat.completions", "responses"}, turns


@pytest.mark.slow
@needs_claude
async def test_env_check_passes_claude_code(database_url: str, tmp_path: Path) -> None:
    report = env_check("claude_code.environment:environment", database_url, tmp_path)
    assert report["ok"] and report["recorded_turns"] == 2, report
    assert [seat["reward"] for seat in report["seats"]] == [1.0]
    assert await recorded(database_url, str(report["episode_id"])) == ["messages", "messages"]


@pytest.mark.slow
@needs_codex
async def test_env_check_passes_codex(database_url: str, tmp_path: Path) -> None:
    report = env_check("codex.environment:environment", database_url, tmp_path)
    assert report["ok"] and report["recorded_turns"] == 2, report
    assert [seat["reward"] for seat in report["seats"]] == [1.0]
    assert await recorded(database_url, str(report["episode_id"])) == ["responses", "responses"]


@pytest.mark.slow
@needs_claude
async def test_rollout_run_uses_the_environments_scripted_reply(
    database_url: str, tmp_path: Path
) -> None:
    outcome = env_check("claude_code.environment:environment", database_url, tmp_path, "run")
    (seat,) = outcome["seats"]
    assert seat["status"] == "completed" and seat["reward"] == 1.0 and seat["turns"] == 2, seat


async def test_a_scripted_backend_takes_the_environments_replies() -> None:
    renderer, backend = load_model("scripted")
    assert environment_backend(backend, codex_environment) is not backend
    assert environment_backend(backend, ENVIRONMENT_WITHOUT_SCRIPT) is backend
    scripted = environment_backend(backend, claude_environment)
    prompt = renderer.encode("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n")
    reply = await scripted.sample(prompt, SamplingParams(max_tokens=8))
    assert renderer.decode(list(reply.tokens[:-1])) == "5"  # no file task: arithmetic answers


@pytest.mark.parametrize("environment", [claude_environment, codex_environment])
async def test_check_without_a_gateway_names_the_need(environment: object) -> None:
    async def never(*_: object) -> object:
        raise AssertionError("not played")

    report = await check_environment(environment, never)  # type: ignore[arg-type]
    assert not report.ok and report.seats == []
    assert report.problems == [
        f"{report.environment} needs a gateway (its Task calls the model itself): "
        "check it with `rollout env check`, which serves one"
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("scripted_reply", "Done."), ("needs_gateway", "yes")]
)
def test_bad_agent_fields_name_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidEnvironment, match=f"{field}.*{value}"):
        Environment(name="plain", task=claude_environment.task, **{field: value})  # type: ignore[arg-type]

"""Codex as the agent: `codex exec` creates a file in its computer through the gateway.

The Task runs the unmodified Codex CLI (pinned in tools/agents) once, non-interactively
(`codex exec`), with a temporary `CODEX_HOME` whose config.toml names a model provider at the
gateway (`wire_api = "responses"`, key from `ROLLOUT_API_KEY`: the seat's key), so every model
call it makes is a recorded turn of the seat. It runs inside the episode's computer
(`claude_code.cli.agent_pool`), which is the sandbox: Codex's own is off. Reward 1.0 when the
computer holds the requested file with the requested content. With the scripted model, the
script writes the file with Codex's `exec_command` tool (`claude_code.cli.scripted_file_reply`).

    uv run rollout env check codex.environment:environment
"""

from __future__ import annotations

import random
from typing import Any

from claude_code.cli import (
    CliFileTask,
    agent_pool,
    file_parameters,
    find_cli,
    scripted_file_reply,
)

from rollout.harness import RunContext
from rollout.sandboxes import SandboxedEnvironment
from rollout.sandboxes.computer import Computer

CONFIG = """\
model = "policy"
model_provider = "rollout"
check_for_update_on_startup = false

[model_providers.rollout]
name = "rollout gateway"
base_url = "{base_url}"
env_key = "ROLLOUT_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false
"""


class CodexFileTask(CliFileTask):
    """One `codex exec` run that should create one file."""

    cli_name = "codex"

    def command(self, prompt: str, folder: str, home: str) -> list[str]:
        return [
            find_cli("codex", "CODEX_BIN"),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--cd",
            folder,
            prompt,
        ]

    async def environment(
        self, run: RunContext, computer: Computer, gateway: str, home: str
    ) -> dict[str, str]:
        assert run.api_key is not None
        codex_home = f"{home}/.codex"
        await computer.write(f"{codex_home}/config.toml", CONFIG.format(base_url=gateway + "/v1"))
        return {"CODEX_HOME": codex_home, "ROLLOUT_API_KEY": run.api_key}


def draw_file(rng: random.Random) -> dict[str, Any]:
    return file_parameters(rng.randrange(1 << 30))


environment = SandboxedEnvironment(
    name="codex",
    task=CodexFileTask,
    parameters=draw_file,
    group_size=2,
    max_turns=1,
    needs_gateway=True,
    scripted_reply=scripted_file_reply,
    pool=agent_pool(),
)

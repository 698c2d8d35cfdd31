"""Claude Code as the agent: `claude -p` creates a file in its computer through the gateway.

The Task runs the unmodified Claude Code CLI (pinned in tools/agents) once, non-interactively
(`claude -p ... --permission-mode acceptEdits`), with `ANTHROPIC_BASE_URL` set to the gateway's
root and `ANTHROPIC_AUTH_TOKEN` to the seat's key, so every model call it makes is a recorded turn
of the seat. It runs inside the episode's computer (`claude_code.cli.agent_pool`), so the file it
writes, and anything else it runs, stays there. Reward 1.0 when the computer holds the requested
file with the requested content. With the scripted model, the model's script writes the file
with Claude Code's `Write` tool (`claude_code.cli.scripted_file_reply`).

    uv run rollout env check claude_code.environment:environment
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


class ClaudeCodeFileTask(CliFileTask):
    """One `claude -p` run that should create one file."""

    cli_name = "claude"

    def command(self, prompt: str, folder: str, home: str) -> list[str]:
        return [
            find_cli("claude", "CLAUDE_CODE_BIN"),
            "-p",
            prompt,
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Write",
            "--max-turns",
            str(int(self.parameters.get("max_turns", 4))),
            "--output-format",
            "text",
        ]

    async def environment(
        self, run: RunContext, computer: Computer, gateway: str, home: str
    ) -> dict[str, str]:
        assert run.api_key is not None
        return {
            "ANTHROPIC_BASE_URL": gateway,
            "ANTHROPIC_AUTH_TOKEN": run.api_key,
            "CLAUDE_CONFIG_DIR": f"{home}/.claude",
            # Telemetry, error reports, update checks and side traffic off.
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        }


def draw_file(rng: random.Random) -> dict[str, Any]:
    return file_parameters(rng.randrange(1 << 30))


environment = SandboxedEnvironment(
    name="claude_code",
    task=ClaudeCodeFileTask,
    parameters=draw_file,
    group_size=2,
    max_turns=1,
    needs_gateway=True,
    scripted_reply=scripted_file_reply,
    pool=agent_pool(),
)

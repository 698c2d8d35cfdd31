"""The real Claude Code and Codex CLIs (pinned in tools/agents) against the gateway.

Each completes a turn against `rollout playground` (the scripted arithmetic model), and each plays
one tool-using episode as the agent (environments/claude_code, environments/codex): the scripted
model emits the CLI's own file-writing tool call, the CLI runs it inside the episode's computer
(a real `ComputerPool` instance), the reward checks the computer, and the CLI's calls are the
seat's recorded turns. The file lands in the computer, not on the host.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from claude_code.cli import LOOPBACK_ONLY, find_cli, scripted_file_reply
from claude_code.environment import environment as claude_environment
from codex.environment import CONFIG
from codex.environment import environment as codex_environment

from rollout.harness import End, Environment
from rollout.harness.play import play_seat
from rollout.inference.scripted import arithmetic_reply
from rollout.launch.playground import Playground
from rollout.sandboxes import sandbox_pool
from rollout.sandboxes.computer import Computer
from tests.gateway.gateway_helpers import Serve
from tests.sandboxes.computer.machines import require_computers


def _installed(name: str, env_var: str) -> bool:
    try:
        find_cli(name, env_var)
    except FileNotFoundError:
        return False
    return True


needs_claude = pytest.mark.skipif(
    not _installed("claude", "CLAUDE_CODE_BIN"), reason="run `npm ci` in tools/agents"
)
needs_codex = pytest.mark.skipif(
    not _installed("codex", "CODEX_BIN"), reason="run `npm ci` in tools/agents"
)
pytestmark = [pytest.mark.slow]


def agent_script(prompt_text: str) -> str:
    """The file task's tool call and `Done.`; arithmetic otherwise."""
    return scripted_file_reply(prompt_text) or arithmetic_reply(prompt_text)


async def run_cli(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], "HOME": str(cwd), **LOOPBACK_ONLY, **env},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(errors="replace")


@needs_claude
@needs_codex
async def test_both_clis_complete_a_turn_against_the_playground(
    database_url: str, tmp_path: Path
) -> None:
    async with Playground("scripted", database_url=database_url, state_dir=tmp_path) as pg:
        code, out = await run_cli(
            [find_cli("claude", "CLAUDE_CODE_BIN"), "-p", "What is 2 + 3?"],
            tmp_path,
            {
                "ANTHROPIC_BASE_URL": pg.root_url,
                "ANTHROPIC_AUTH_TOKEN": pg.api_key,
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            },
        )
        assert code == 0 and out.strip() == "5", out
        codex_home = tmp_path / "codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(CONFIG.format(base_url=pg.base_url))
        code, out = await run_cli(
            [
                find_cli("codex", "CODEX_BIN"),
                "exec",
                "--skip-git-repo-check",
                "What is 6 * 7?",
            ],
            tmp_path,
            {"CODEX_HOME": str(codex_home), "ROLLOUT_API_KEY": pg.api_key},
        )
        assert code == 0 and "42" in out, out
        claim = pg.claim
        assert claim is not None
        turns = await pg.ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
    assert [t.request["protocol"] for t in turns] == ["messages", "responses"]


async def play_cli_episode(serve: Serve, environment: Environment, tmp_path: Path) -> None:
    require_computers()
    served = await serve(agent_script)
    pool = sandbox_pool(environment)
    assert pool is not None
    computer = await pool.start(tmp_path / "computer")
    try:
        run = served.run_context(sandbox=computer)
        parameters = environment.draw_parameters(0, seed=3)
        task = environment.task(parameters)

        async def never(*_: object) -> object:
            raise AssertionError("the CLI makes its own model calls")

        result = await play_seat(environment, task, run, never)  # type: ignore[arg-type]
        assert isinstance(result.end, End)
        assert result.reward == 1.0, result.end
        # The policy's file is in the computer; the host's path of the same name is not there.
        path = f"/workspace/{parameters['filename']}"
        async with Computer.of(computer) as inside:
            assert await inside.read_text(path) == parameters["content"]
        assert not os.path.exists(path)  # noqa: ASYNC240
    finally:
        await pool.stop(computer)
    one, two = await served.turns()
    assert one.stop_reason == "tool_calls" and two.stop_reason == "stop"
    assert served.renderer.decode(list(two.completion_tokens)).startswith("Done.")


@needs_claude
async def test_claude_code_plays_a_tool_using_episode(serve: Serve, tmp_path: Path) -> None:
    await play_cli_episode(serve, claude_environment, tmp_path)


@needs_codex
async def test_codex_plays_a_tool_using_episode(serve: Serve, tmp_path: Path) -> None:
    await play_cli_episode(serve, codex_environment, tmp_path)

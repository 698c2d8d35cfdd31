"""What the Claude Code and Codex environments share: a coding-agent CLI as the agent, inside
the episode's computer.

Each episode claims a computer (`rollout.sandboxes.computer`: an isolated Linux workspace, no
network, limits on memory, processes, disk and time) made from `agent_template()`: an empty
git workspace, with Node.js and the pinned CLIs visible read-only. `CliFileTask.start` runs the
CLI there once, non-interactively, with the seat's gateway URL and key; the gateway's address is
the one thing the CLI's command may reach (relayed onto the computer's loopback), so the CLI's
model calls are the episode's recorded turns, and every tool call it makes (a file write, a
shell command) happens inside the computer. The task asks for one file with given content; the
reward is 1.0 when the computer holds exactly that file content afterwards, read from the
computer. The run is bounded by `timeout_seconds` (the computer kills every process past it).

The CLIs come from `tools/agents` (`npm ci` there; `.ci/run` does it), or from `CLAUDE_CODE_BIN`
/ `CODEX_BIN`, or from PATH.

`scripted_file_reply` is what the scripted model answers to such a task: the tool call that
writes the file with the CLI's own tool (`Write` for Claude Code, `exec_command` for Codex), and
`Done.` once the tool's result is back.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from abc import abstractmethod
from pathlib import Path
from typing import Any

from rollout.contracts import Message
from rollout.harness import End, Observation, RunContext, Task
from rollout.sandboxes.computer import (
    HOME,
    WORKSPACE,
    Computer,
    ComputerPool,
    Limits,
    Template,
    loopback_route,
)

AGENTS_DIR = Path(__file__).resolve().parents[2] / "tools" / "agents"
"""The pinned CLIs' npm project (package.json with exact versions, package-lock.json)."""

_TASK = re.compile(r"Create the file (\S+) whose content is exactly the JSON string (\".*\")\.")

# Everything that is not loopback goes to a closed port: the CLIs try nothing but the gateway
# (the computer has no other network anyway).
_DEAD_PROXY = "http://127.0.0.1:9"
LOOPBACK_ONLY = {
    "HTTP_PROXY": _DEAD_PROXY,
    "HTTPS_PROXY": _DEAD_PROXY,
    "ALL_PROXY": _DEAD_PROXY,
    "http_proxy": _DEAD_PROXY,
    "https_proxy": _DEAD_PROXY,
    "all_proxy": _DEAD_PROXY,
    "NO_PROXY": "127.0.0.1,localhost,::1",
    "no_proxy": "127.0.0.1,localhost,::1",
}


def find_cli(name: str, env_var: str) -> str:
    """The CLI's executable: `$env_var`, then tools/agents/node_modules/.bin, then PATH."""
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit
    pinned = AGENTS_DIR / "node_modules" / ".bin" / name
    if pinned.exists():
        return str(pinned)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        f"the {name!r} CLI is not installed: run `npm ci` in {AGENTS_DIR} (or set {env_var})"
    )


def task_prompt(path: Path, content: str) -> str:
    """The instruction given to the CLI (and read back by `scripted_file_reply`)."""
    return (
        f"Create the file {path} whose content is exactly the JSON string "
        f"{json.dumps(content)}. Use your file or shell tool, then say Done."
    )


def scripted_file_reply(prompt_text: str) -> str | None:
    """The scripted model's reply to a file task (None when the prompt holds no such task)."""
    found = _TASK.search(prompt_text)
    if found is None:
        return None
    user_turns = prompt_text.split("<|im_start|>user\n")
    if "<tool_response>" in user_turns[-1]:
        return "Done."
    path, content = found.group(1), json.loads(found.group(2))
    if '"name": "Write"' in prompt_text:
        call = {"name": "Write", "arguments": {"file_path": path, "content": content}}
    elif '"name": "exec_command"' in prompt_text:
        command = f"printf %s {shlex.quote(content)} > {shlex.quote(path)}"
        call = {"name": "exec_command", "arguments": {"cmd": command}}
    else:
        return None
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def gateway_root(gateway_url: str) -> str:
    """The gateway's root (`http://host:port`) from its OpenAI base URL (`.../v1`)."""
    return gateway_url.rstrip("/").removesuffix("/v1")


def agent_template(limits: Limits | None = None) -> Template:
    """A coding agent's computer: an empty git workspace; Node.js and the pinned CLIs
    (`tools/agents`, or the folders of `CLAUDE_CODE_BIN` / `CODEX_BIN`) read-only."""
    tools = [str(AGENTS_DIR)]
    node = shutil.which("node")
    if node is not None:
        tools.append(str(Path(node).resolve().parent.parent))
    for variable in ("CLAUDE_CODE_BIN", "CODEX_BIN"):
        if os.environ.get(variable):
            tools.append(str(Path(os.environ[variable]).resolve().parent))
    present = [tool for tool in dict.fromkeys(tools) if Path(tool).is_dir()]
    return Template(git=True, tools=tuple(present), limits=limits or Limits())


def agent_pool() -> ComputerPool:
    """The computers of the coding-agent environments (one agent each)."""
    return ComputerPool(agent_template(), name="agent-computer", seats=1)


class CliFileTask(Task):
    """Run a coding-agent CLI once, inside the episode's computer, to create one file; reward
    1.0 if the file is right.

    Parameters: `filename`, `content`, and optionally `timeout_seconds` (default 120).
    """

    cli_name = "cli"

    def __init__(self, parameters: dict[str, Any]) -> None:
        super().__init__(parameters)
        self.filename = str(parameters["filename"])
        self.content = str(parameters["content"])
        self.timeout = float(parameters.get("timeout_seconds", 120.0))

    @abstractmethod
    def command(self, prompt: str, folder: str, home: str) -> list[str]:
        """The CLI's command line, run in `folder` inside the computer."""

    @abstractmethod
    async def environment(
        self, run: RunContext, computer: Computer, gateway: str, home: str
    ) -> dict[str, str]:
        """The CLI's own variables (gateway URL `gateway`, as reached inside, and key;
        telemetry off), after writing any configuration it needs into the computer."""

    async def start(self, run: RunContext) -> Observation:
        if run.gateway_url is None or run.api_key is None:
            raise RuntimeError(
                f"{self.cli_name} makes its own model calls and needs the gateway: "
                "RunContext.gateway_url and api_key are None (play it with `rollout run`)"
            )
        gateway, route = loopback_route(gateway_root(run.gateway_url))
        target = f"{WORKSPACE}/{self.filename}"
        prompt = task_prompt(Path(target), self.content)
        async with Computer.of(run.sandbox) as computer:
            env = {**LOOPBACK_ONLY, **await self.environment(run, computer, gateway, HOME)}
            result = await computer.run(
                self.command(prompt, WORKSPACE, HOME),
                env=env,
                timeout=self.timeout,
                connect=[route],
            )
            written = await computer.read_text(target) if await computer.exists(target) else None
        correct = written is not None and written.rstrip("\n") == self.content
        run.logger.info("%s in the computer: %s", self.cli_name, result.report(500))
        return End(
            reward=1.0 if correct else 0.0,
            metrics={
                "exit_code": float(result.exit_code),
                "file_written": float(written is not None),
                "limits_hit": float(len(result.limits)),
            },
            messages=[
                Message.user(prompt),
                Message.assistant(result.stdout.strip() if result.ok else result.report(2000)),
            ],
        )


def file_parameters(seed: int) -> dict[str, Any]:
    """A file name and a one-line content that depend on the seed."""
    words = ["rollout", "gateway", "episode", "turn", "reward", "agent", "token", "seat"]
    picked = [words[(seed * 7 + k * 3) % len(words)] for k in range(3)]
    return {"filename": f"{picked[0]}.txt", "content": " ".join(picked)}

"""What the Claude Code and Codex environments share: a coding-agent CLI as the agent.

`CliFileTask.start` runs the CLI once, non-interactively, in a fresh scratch folder with the
seat's gateway URL and key, so the CLI's model calls are the episode's recorded turns. The task
asks for one file with given content; the reward is 1.0 when the folder holds exactly that file
content afterwards. The CLI's network is loopback only (a dead proxy for everything else),
telemetry and update checks are off, and the run is bounded by `timeout_seconds`.

The CLIs come from `tools/agents` (`npm ci` there; `.ci/run` does it), or from `CLAUDE_CODE_BIN`
/ `CODEX_BIN`, or from PATH.

`scripted_file_reply` is what the scripted model answers to such a task: the tool call that
writes the file with the CLI's own tool (`Write` for Claude Code, `exec_command` for Codex), and
`Done.` once the tool's result is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import tempfile
from abc import abstractmethod
from pathlib import Path
from typing import Any

from rollout.contracts import Message
from rollout.harness import End, Observation, RunContext, Task

AGENTS_DIR = Path(__file__).resolve().parents[2] / "tools" / "agents"
"""The pinned CLIs' npm project (package.json with exact versions, package-lock.json)."""

_TASK = re.compile(r"Create the file (\S+) whose content is exactly the JSON string (\".*\")\.")

# Everything that is not loopback goes to a closed port: the CLIs reach only the gateway.
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


class CliFileTask(Task):
    """Run a coding-agent CLI once to create one file; reward 1.0 if the file is right.

    Parameters: `filename`, `content`, and optionally `timeout_seconds` (default 120).
    """

    cli_name = "cli"

    def __init__(self, parameters: dict[str, Any]) -> None:
        super().__init__(parameters)
        self.filename = str(parameters["filename"])
        self.content = str(parameters["content"])
        self.timeout = float(parameters.get("timeout_seconds", 120.0))

    @abstractmethod
    def command(self, prompt: str, folder: Path, home: Path) -> list[str]:
        """The CLI's command line, run in `folder`."""

    @abstractmethod
    def environment(self, run: RunContext, home: Path) -> dict[str, str]:
        """The CLI's own variables (gateway URL and key, telemetry off)."""

    async def start(self, run: RunContext) -> Observation:
        if run.gateway_url is None or run.api_key is None:
            raise RuntimeError(
                f"{self.cli_name} makes its own model calls and needs the gateway: "
                "RunContext.gateway_url and api_key are None (play it with `rollout run`)"
            )
        scratch = Path(tempfile.mkdtemp(prefix=f"rollout-{self.cli_name}-"))
        try:
            folder, home = scratch / "work", scratch / "home"
            folder.mkdir()
            home.mkdir()
            target = folder / self.filename
            prompt = task_prompt(target, self.content)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(home),
                "TMPDIR": str(scratch),
                "LANG": "C.UTF-8",
                **LOOPBACK_ONLY,
                **self.environment(run, home),
            }
            code, out, err = await self._run(self.command(prompt, folder, home), folder, env)
            written = target.read_text() if target.is_file() else None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        correct = written is not None and written.rstrip("\n") == self.content
        run.logger.info("%s exited %s: %s %s", self.cli_name, code, out[-500:], err[-500:])
        return End(
            reward=1.0 if correct else 0.0,
            metrics={
                "exit_code": float(code),
                "file_written": float(written is not None),
            },
            messages=[Message.user(prompt), Message.assistant(out.strip())],
        )

    async def _run(self, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills its children too
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def file_parameters(seed: int) -> dict[str, Any]:
    """A file name and a one-line content that depend on the seed."""
    words = ["rollout", "gateway", "episode", "turn", "reward", "agent", "token", "seat"]
    picked = [words[(seed * 7 + k * 3) % len(words)] for k in range(3)]
    return {"filename": f"{picked[0]}.txt", "content": " ".join(picked)}

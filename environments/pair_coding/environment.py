"""Two coding agents share one computer: one writes a function, the other its tests.

Each episode claims one computer (`rollout.sandboxes.computer`: an isolated Linux workspace
holding a git repository with `TASK.md`; the host's Python read-only; no network). Agent 0, the
coder, writes the function in `solution.py`; agent 1, the tester, writes `test_solution.py`
(unittest) for it. Both act through tools that run inside the computer: `shell` (a command, its
output and the limits it hit come back) and `write_file`. The two agents may be played by
runners in different processes or on different hosts: they meet in the computer. An agent's
turn ends with a reply that calls no tool (or after `max_turns`); it then waits for its partner
(a mark on the computer), and the reward comes from the computer's state, the same for both:
1.0 when the tester's tests exist, run (at least one) and pass against the coder's function
(`team_reward`).

    uv run rollout env check pair_coding.environment:environment

`pair_script` is a scripted pair (for tests and demonstrations): each writes its file and
checks it with `shell`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Mapping
from typing import Any

from rollout.contracts import Message, ToolSpec
from rollout.harness import End, Observation, RunContext, Task
from rollout.sandboxes import SandboxedEnvironment
from rollout.sandboxes.computer import (
    CommandResult,
    Computer,
    ComputerPool,
    Limits,
    Template,
    python_tool,
)

SOLUTION = "solution.py"
TESTS = "test_solution.py"
ROLES = ("coder", "tester")

FUNCTIONS: list[dict[str, Any]] = [
    {"name": "add", "arguments": "a, b", "does": "returns a + b", "example": [[2, 3], 5]},
    {
        "name": "largest",
        "arguments": "items",
        "does": "returns max(items)",
        "example": [[[4, 9, 2]], 9],
    },
    {
        "name": "shout",
        "arguments": "text",
        "does": "returns text.upper() + '!'",
        "example": [["hi"], "HI!"],
    },
]
"""The functions a pair may be asked for: name, arguments, behaviour and one example call."""

TOOLS = [
    ToolSpec(
        name="shell",
        description="Run a shell command in the shared workspace (/workspace).",
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    ),
    ToolSpec(
        name="write_file",
        description="Write a file in the shared workspace.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
]


def computer_template() -> Template:
    """A fresh pair's computer: `TASK.md` in a git repository, Python read-only."""
    return Template(
        files={"TASK.md": "Two agents: one writes solution.py, the other test_solution.py.\n"},
        git=True,
        tools=(python_tool(),),
        limits=Limits(memory_mb=512, processes=64, disk_mb=64, command_seconds=60),
    )


async def team_reward(computer: Computer) -> tuple[float, CommandResult]:
    """1.0 when the tests exist, at least one runs, and all pass; the test run's result.

    The tests run from source, never from bytecode an earlier run cached: Python trusts a cached
    module whose source has the same size and modification second, so a solution rewritten
    within a second (`a + b` to `a - b`) was graded by its old bytecode. `-B` writes no cache and
    the cache prefix names a folder that does not exist, so none is read either.
    """
    argv = ["python3", "-B", "-X", "pycache_prefix=/nonexistent/rollout-grader"]
    result = await computer.run([*argv, "-m", "unittest", "-v", TESTS[:-3]], timeout=60)
    ran = re.search(r"^Ran (\d+) tests?", result.stderr, re.MULTILINE)
    passed = result.ok and ran is not None and int(ran.group(1)) >= 1
    return (1.0 if passed else 0.0), result


class PairCoding(Task):
    """One agent of the pair (see the module docstring).

    Parameters: `function` (one of `FUNCTIONS`), and optionally `team_wait` (seconds to wait for
    the partner, default 120).
    """

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        super().__init__(parameters)
        self.function = dict(parameters["function"])
        self.team_wait = float(parameters.get("team_wait", 120.0))
        self.computer: Computer | None = None
        self.commands = 0

    async def start(self, run: RunContext) -> Observation:
        self.computer = Computer.of(run.sandbox)
        role = ROLES[run.agent % 2]
        spec = self.function
        signature = f"{spec['name']}({spec['arguments']})"
        (arguments, expected) = spec["example"]
        if role == "coder":
            goal = (
                f"Write the Python function {signature} that {spec['does']} in {SOLUTION}. "
                f"Your partner writes its tests in {TESTS}."
            )
        else:
            goal = (
                f"Your partner writes the Python function {signature} that {spec['does']} in "
                f"{SOLUTION}. Write unittest tests for it in {TESTS} (from solution import "
                f"{spec['name']}); for example {spec['name']}(*{json.dumps(arguments)}) == "
                f"{json.dumps(expected)}."
            )
        text = (
            f"You are the {role} (agent{run.agent}) of a pair sharing one computer "
            f"(/workspace). {goal} Use the tools; reply without a tool call when you are done."
        )
        return Observation(text, tools=TOOLS)

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        if not reply.tool_calls:
            return await self._end(run)
        assert self.computer is not None
        results = []
        for call in reply.tool_calls:
            arguments = call.parsed_arguments()
            if call.name == "shell" and isinstance(arguments.get("command"), str):
                self.commands += 1
                answer = (await self.computer.run(arguments["command"])).report()
            elif call.name == "write_file" and isinstance(arguments.get("path"), str):
                await self.computer.write(arguments["path"], str(arguments.get("content", "")))
                answer = f"wrote {arguments['path']}"
            else:
                answer = f"unknown tool or bad arguments: {call.name} {json.dumps(arguments)}"
            results.append(Message.tool(answer, tool_call_id=call.id, name=call.name))
        return Observation(results)

    async def _end(self, run: RunContext) -> End:
        assert self.computer is not None
        await self.computer.mark(f"finished-{run.agent}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.team_wait
        marks = await self.computer.marks()
        while len(marks) < run.agents and loop.time() < deadline:
            await asyncio.sleep(0.2)
            marks = await self.computer.marks()
        reward, tests = await team_reward(self.computer)
        return End(
            reward=reward,
            metrics={
                "team_finished": float(len(marks)),
                "commands": float(self.commands),
                "tests_passed": reward,
            },
            messages=[Message.user(f"The team's tests: {tests.report(2000)}")],
        )

    async def close(self, run: RunContext) -> None:
        if self.computer is not None:
            await self.computer.close()


_ROLE = re.compile(r"You are the (coder|tester) \(agent\d+\)")
_SIGNATURE = re.compile(r"Python function (\w+)\(([^)]*)\) that (.*?) in ")


def _files(role: str, name: str, arguments: str, does: str) -> tuple[str, str, str]:
    """The scripted player's file, its content and the command that checks it."""
    spec = next(f for f in FUNCTIONS if f["name"] == name)
    if role == "coder":
        body = does.removeprefix("returns ")
        return (
            SOLUTION,
            f"def {name}({arguments}):\n    return {body}\n",
            "python3 -c 'import solution'",
        )
    call_arguments, expected = spec["example"]
    test = (
        f"import unittest\n\nfrom solution import {name}\n\n\n"
        "class Test(unittest.TestCase):\n"
        "    def test_example(self):\n"
        f"        self.assertEqual({name}(*{call_arguments!r}), {expected!r})\n"
    )
    return TESTS, test, f"python3 -m py_compile {TESTS}"


def pair_script(prompt_text: str) -> str | None:
    """A scripted player: write its file, check it with `shell`, then finish (None when the
    prompt holds no pair's task)."""
    role, signature = _ROLE.search(prompt_text), _SIGNATURE.search(prompt_text)
    if role is None or signature is None:
        return None
    path, content, check = _files(role.group(1), *signature.groups())
    calls = [
        ("write_file", {"path": path, "content": content}),
        ("shell", {"command": check}),
    ]
    step = prompt_text.count("<tool_response>")
    if step >= len(calls):
        return "Done."
    name, arguments = calls[step]
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def draw_function(rng: random.Random) -> dict[str, Any]:
    return {"function": rng.choice(FUNCTIONS)}


environment = SandboxedEnvironment(
    name="pair_coding",
    task=PairCoding,
    parameters=draw_function,
    agents=2,
    group_size=2,
    max_turns=8,
    pool=ComputerPool(computer_template(), name="pair-computer", seats=2),
    sampling={"max_tokens": 300},
    scripted_reply=pair_script,
)

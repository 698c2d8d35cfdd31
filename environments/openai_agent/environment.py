"""An agent program as an episode: an `openai` SDK tool-calling loop with a calculator.

The Task's `start` runs an ordinary agent loop, the kind written for OpenAI's API, against the
gateway with the seat's own key (`RunContext.gateway_url`, `RunContext.api_key`):

    client = AsyncOpenAI(base_url=run.gateway_url, api_key=run.api_key)

The model may call `calculator(expression)` as often as it likes (up to `max_steps` calls to the
model); the loop ends at the first reply without tool calls, which is graded: reward 1 when its
last number equals the answer. The gateway records every call as a turn of this seat, so the
episode trains like any other. `start` returns the `End` directly: the program drove the
conversation itself.

    uv run rollout run openai_agent.environment:environment
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from collections.abc import Callable
from typing import Any, cast

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from rollout.contracts import Message, ToolCall
from rollout.harness import End, Environment, Observation, RunContext, Task

SYSTEM_PROMPT = (
    "You are a careful assistant. Use the calculator tool for arithmetic, then answer with the "
    "number alone."
)

CALCULATOR: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / ** and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 17 * 23"}},
            "required": ["expression"],
        },
    },
}

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculate(expression: str) -> str:
    """Evaluate `expression` safely (numbers and arithmetic only); errors come back as text.

    >>> calculate("17 * (2 + 1)")
    '51'
    >>> calculate("__import__('os')")
    'error: unsupported expression'
    """

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError("unsupported expression")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        return f"error: {exc}" if str(exc) else "error: unsupported expression"
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The last number in `text`, or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


class CalculatorAgent(Task):
    """Runs an openai SDK agent loop on one question and grades its final answer."""

    def __init__(self, parameters: dict[str, Any]) -> None:
        super().__init__(parameters)
        self.question = str(parameters["question"])
        self.answer = str(parameters["answer"])
        self.max_steps = int(parameters.get("max_steps", 4))
        self.max_tokens = int(parameters.get("max_tokens", 128))
        self.temperature = float(parameters.get("temperature", 1.0))

    async def start(self, run: RunContext) -> Observation:
        if run.gateway_url is None or run.api_key is None:
            raise RuntimeError(
                "openai_agent runs its own model calls and needs the gateway: "
                "RunContext.gateway_url and api_key are None (play it with `rollout run`)"
            )
        client = AsyncOpenAI(base_url=run.gateway_url, api_key=run.api_key, max_retries=0)
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self.question},
        ]
        transcript = [Message.system(SYSTEM_PROMPT), Message.user(self.question)]
        tool_calls = 0
        final = ""
        try:
            for _ in range(self.max_steps):
                response = await client.chat.completions.create(
                    model="policy",
                    messages=messages,
                    tools=[CALCULATOR],
                    max_tokens=self.max_tokens,
                    temperature=self.temperature,
                )
                message = response.choices[0].message
                calls = [c for c in message.tool_calls or [] if c.type == "function"]
                messages.append(
                    cast(ChatCompletionMessageParam, message.model_dump(exclude_none=True))
                )
                transcript.append(
                    Message.assistant(
                        message.content or "",
                        [
                            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                            for c in calls
                        ],
                    )
                )
                if not calls:
                    final = message.content or ""
                    break
                for call in calls:
                    tool_calls += 1
                    if call.function.name == "calculator":
                        try:
                            args = json.loads(call.function.arguments or "{}")
                        except json.JSONDecodeError:
                            args = {}
                        output = calculate(str(args.get("expression", "")))
                    else:
                        output = f"error: unknown tool {call.function.name!r}"
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
                    transcript.append(Message.tool(output, call.id, name=call.function.name))
        finally:
            await client.close()
        answered = final_number(final)
        correct = answered is not None and float(answered) == float(self.answer)
        return End(
            reward=1.0 if correct else 0.0,
            metrics={"tool_calls": float(tool_calls), "answered": float(answered is not None)},
            messages=transcript,
        )


def draw_problem(rng: random.Random) -> dict[str, Any]:
    """A two- or three-digit product or sum."""
    a, b = rng.randint(11, 999), rng.randint(11, 99)
    op = rng.choice("+*")
    return {"question": f"What is {a} {op} {b}?", "answer": str(a + b if op == "+" else a * b)}


environment = Environment(
    name="openai_agent",
    task=CalculatorAgent,
    parameters=draw_problem,
    group_size=4,
    max_turns=1,
    needs_gateway=True,  # the agent program calls the model itself through the OpenAI SDK
)

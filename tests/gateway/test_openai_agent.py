"""environments/openai_agent: an unmodified openai SDK agent loop played as an episode.

The scripted model calls the calculator with the question's expression, then answers with the
tool's result, so the episode is deterministic: two recorded turns, the second extending the
first, reward 1.
"""

from __future__ import annotations

import json
import re

from openai_agent.environment import CalculatorAgent, calculate, environment, final_number

from rollout.harness import End
from rollout.harness.play import play_seat
from rollout.inference.scripted import last_user_message
from tests.gateway.gateway_helpers import Serve


def calculator_script(prompt_text: str) -> str:
    last = last_user_message(prompt_text)
    result = re.search(r"<tool_response>\n(.*?)\n</tool_response>", last, re.DOTALL)
    if result:
        return f"The answer is {result.group(1)}."
    question = re.search(r"What is (.+)\?", last)
    expression = question.group(1) if question else "0"
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


async def test_agent_program_plays_an_episode_through_the_gateway(serve: Serve) -> None:
    served = await serve(calculator_script)
    run = served.run_context()
    parameters = environment.draw_parameters(0, seed=1)
    task = environment.task(parameters)
    assert isinstance(task, CalculatorAgent)

    async def never(*_: object) -> object:
        raise AssertionError("the agent program makes its own model calls")

    result = await play_seat(environment, task, run, never)  # type: ignore[arg-type]
    assert isinstance(result.end, End)
    assert result.reward == 1.0 and result.end.metrics["tool_calls"] == 1.0
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]
    one, two = await served.turns()
    assert one.stop_reason == "tool_calls" and two.extends_previous
    assert served.renderer.decode(two.completion_tokens).startswith(
        f"The answer is {parameters['answer']}."
    )


async def test_agent_without_tool_use_still_graded(serve: Serve) -> None:
    served = await serve()  # the default tool script asks for `add`, which the agent lacks
    run = served.run_context(seed=0)
    end = await CalculatorAgent({"question": "What is 2 + 3?", "answer": "5"}).start(run)
    assert isinstance(end, End)
    assert end.value == 1.0  # unknown tool reported, then "The sum is 5."
    assert end.metrics["tool_calls"] == 1.0


def test_calculator_and_grading_helpers() -> None:
    assert calculate("17 * 23") == "391"
    assert calculate("2 ** 100000").startswith("error")
    assert calculate("open('x')").startswith("error")
    assert calculate("1 / 0") == "error: division by zero"
    assert final_number("So it is 1,234.") == "1234"
    assert final_number("no idea") is None

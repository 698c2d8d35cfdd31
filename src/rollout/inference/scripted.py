"""The scripted backend: deterministic replies with real token ids, no weights.

It is what tests and a first episode run on (`rollout run ... --model scripted`): the reply is
chosen by a script, encoded with the real tokenizer, and ended with the chat template's stop
token, so everything downstream (gateway, parser, ledger, trainer) sees exactly what a model
would have produced. Every token is forced, so its logprob is 0.0.
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from rollout.contracts import Completion, SamplingParams
from rollout.inference.base import BackendError, InferenceBackend
from rollout.rendering.base import Renderer

Script = Sequence[str] | Callable[[str], str | None]
"""Replies in order (cycling), or a function from the decoded prompt text to the reply (None:
`arithmetic_reply` answers, so an environment's script names only the replies it needs)."""

FALLBACK_REPLY = "I don't know."
"""What `arithmetic_reply` answers when the last user message holds no arithmetic."""

_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_EXPRESSION = re.compile(r"[-+(]*\s*\d[\d\s+\-*/().]*")
_WORDS = (
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\b(?:times|multiplied by)\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided by\b", re.IGNORECASE), "/"),
    (re.compile(r"(?<=\d)\s*[×x]\s*(?=\d)"), " * "),
    (re.compile(r"÷"), "/"),
)
_MAX_EXPRESSION = 200


def last_user_message(prompt_text: str) -> str:
    """The text of the last ChatML user turn in `prompt_text` (the whole text if none)."""
    turns = _USER_TURN.findall(prompt_text)
    return turns[-1] if turns else prompt_text


def arithmetic_reply(prompt_text: str) -> str:
    """Answer the last arithmetic expression in the last user message, else `FALLBACK_REPLY`.

    `"What is 3 + 4?"` -> `"7"`, `"What is 7 divided by 2?"` -> `"3.5"`. Only + - * / and
    parentheses on numbers are evaluated (never Python code).
    """
    text = last_user_message(prompt_text)
    for pattern, symbol in _WORDS:
        text = pattern.sub(symbol, text)
    for candidate in reversed(_EXPRESSION.findall(text)):
        value = _evaluate(candidate.strip().rstrip(".").rstrip())
        if value is not None:
            return _format(value)
    return FALLBACK_REPLY


class ScriptedBackend:
    """Deterministic replies encoded with a real tokenizer.

    Args:
        renderer: The model's renderer (its tokenizer encodes the replies; its first stop token
            ends them unless the request names stop tokens).
        script: Replies in order (cycling over calls), a function from the decoded prompt text
            to the reply (returning None: `arithmetic_reply` answers), or None for
            `arithmetic_reply`. A reply may contain tool-call markup.
        version: The checkpoint version reported on every completion.
    """

    name = "scripted"

    def __init__(self, renderer: Renderer, script: Script | None = None, *, version: int = 0):
        self.renderer = renderer
        if script is None:
            self._reply: Callable[[str], str] = arithmetic_reply
        elif callable(script):
            self._reply = _or_arithmetic(script)
        else:
            if isinstance(script, str) or not script:
                raise BackendError(f"script must be a non-empty list of replies, got {script!r}")
            cycle = itertools.cycle(list(script))
            self._reply = lambda _prompt: next(cycle)
        self._version = version
        self.calls = 0

    @classmethod
    def from_model_dir(
        cls, path: str | os.PathLike[str], script: Script | None = None, *, version: int = 0
    ) -> ScriptedBackend:
        """A scripted backend with the tokenizer and chat template of a model folder."""
        from rollout.rendering.hf import HFRenderer

        return cls(HFRenderer(Path(path)), script, version=version)

    @classmethod
    def default(
        cls, script: Script | None = None, *, state_dir: str | os.PathLike[str] | None = None
    ) -> ScriptedBackend:
        """A scripted backend on the default tiny tokenizer (built once, nothing downloaded)."""
        from rollout.models import default_tokenizer_dir

        return cls.from_model_dir(default_tokenizer_dir(state_dir), script)

    @property
    def version(self) -> int:
        """The checkpoint version reported on completions."""
        return self._version

    def set_version(self, version: int) -> None:
        """Report `version` on the completions sampled from now on."""
        self._version = version

    async def load_weights(self, path: object, version: int) -> None:
        """There are no weights; only the reported version changes."""
        self._version = version

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        """The script's reply to the prompt, then the stop token, cut to `max_tokens`."""
        if not prompt_tokens:
            raise BackendError("prompt_tokens must not be empty")
        if any(not isinstance(t, int) or t < 0 for t in prompt_tokens):
            bad = [t for t in prompt_tokens if not isinstance(t, int) or t < 0][:5]
            raise BackendError(f"prompt_tokens must be non-negative token ids, got {bad}")
        self.calls += 1
        reply = self._reply(self.renderer.decode(prompt_tokens))
        if not isinstance(reply, str):
            raise BackendError(f"script must return a str, got {reply!r}")
        tokens = self._reply_tokens(reply, params)
        stop_reason: Literal["stop", "length"] = "stop"
        if len(tokens) > params.max_tokens:
            tokens, stop_reason = tokens[: params.max_tokens], "length"
        top = tuple({t: 0.0} for t in tokens) if params.top_logprobs else ()
        return Completion(
            tokens=tuple(tokens),
            logprobs=(0.0,) * len(tokens),
            stop_reason=stop_reason,
            version=self._version,
            top_logprobs=top,
        )

    async def close(self) -> None:
        """Nothing to release."""

    def _reply_tokens(self, reply: str, params: SamplingParams) -> list[int]:
        # A stop string ends the reply right after it, as a sampling backend would stop.
        cut = min((reply.find(s) + len(s) for s in params.stop if s and s in reply), default=-1)
        if cut >= 0:
            return self.renderer.encode(reply[:cut])
        stops = params.stop_token_ids or self.renderer.stop_token_ids
        return [*self.renderer.encode(reply), stops[0]]


def environment_backend(backend: InferenceBackend, environment: object) -> InferenceBackend:
    """`backend`, or a scripted backend on its renderer answering with the environment's script.

    A scripted backend is replaced when `environment.demonstration` or, failing that,
    `environment.scripted_reply` is set (see `rollout.harness.Environment`); any other backend
    is returned as it is.
    """
    script = getattr(environment, "demonstration", None) or getattr(
        environment, "scripted_reply", None
    )
    if isinstance(backend, ScriptedBackend) and script is not None:
        return ScriptedBackend(backend.renderer, script, version=backend.version)
    return backend


def _or_arithmetic(script: Callable[[str], str | None]) -> Callable[[str], str]:
    def reply(prompt_text: str) -> str:
        answer = script(prompt_text)
        return arithmetic_reply(prompt_text) if answer is None else answer

    return reply


def _evaluate(expression: str) -> int | float | None:
    if not expression or len(expression) > _MAX_EXPRESSION:
        return None
    if not any(op in expression.lstrip("-+ (") for op in "+-*/"):
        return None
    try:
        value = _eval_node(ast.parse(expression, mode="eval").body)
        if isinstance(value, float) and not math.isfinite(value):
            return None
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return value


def _eval_node(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right
    raise ValueError("not arithmetic")


def _format(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")

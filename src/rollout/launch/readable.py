"""Whether a run's model can read its environment's text: the one line `rollout train` and
`rollout env check` print, before any step, when it cannot.

cpu-tiny's model reads only the characters of parity (`0123456789EO=` and newline); a word
reaches it as a row of `<unk>` tokens, and a run on it stays at reward 0 with no other sign.
`readability_note` names the characters lost and the preset to use instead, `TEXT_PRESET`,
whose byte-level model reads any text. The text is what the environment shows the model: the
conversations of the preflight's model calls (`rollout.harness.preflight`, or the env check's
own) and a few of its format warm-up examples, replies included.

Example:
    >>> import asyncio
    >>> from parity.environment import environment as parity
    >>> from rollout.contracts import Message
    >>> from rollout.runs.presets import load_preset
    >>> seen = [Message.user("Which letter does apple start with?")]
    >>> print(readability_note(parity, load_preset("cpu-tiny"), seen))
    ... # doctest: +NORMALIZE_WHITESPACE
    preset cpu-tiny's model cannot read ' ?Wacdehiloprstw' in parity's text (it becomes
    <unk>); train it with --preset cpu-text, whose model reads any text
    >>> readability_note(parity, load_preset("cpu-text"), seen) is None
    True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from rollout.contracts import Message
from rollout.harness import Environment
from rollout.models.readable import folder_tokenizer, unreadable
from rollout.runs.config import RunConfig

TEXT_PRESET = "cpu-text"
"""The built-in CPU preset whose model reads any text: the one the guides use for a new
environment (`deploy/chart/rollout/files/presets/cpu-text.yaml`)."""
WARMUP_DRAWS = 8
"""Format warm-up examples whose text is checked too (their replies are what the model writes)."""


def run_tokenizer(config: RunConfig, model_path: Path | None = None) -> Tokenizer | None:
    """The tokenizer the run's model will have: `model_path`'s (a built or given folder), the
    preset's `model.path`'s, or the one `model.init` builds; None when there is none to read."""
    if model_path is None and config.model.path:
        model_path = Path(config.model.path)
    if model_path is not None:
        return folder_tokenizer(model_path)
    init = config.model.init
    if init is None:
        return None
    from rollout.models.default_tokenizer import DEFAULT_VOCAB_SIZE
    from rollout.models.tokenizer import build_tokenizer

    wrapped = build_tokenizer(
        vocab_size=init.vocab_size or DEFAULT_VOCAB_SIZE,
        kind=init.tokenizer,
        alphabet=init.alphabet,
    )
    return wrapped.backend_tokenizer


def environment_texts(environment: Environment, seen: Sequence[Message]) -> list[str]:
    """The text the model reads and writes: `seen` (its prompts) and warm-up examples."""
    texts = [message.text for message in seen]
    if environment.warmup is not None:
        rng = random.Random(0)
        for _ in range(WARMUP_DRAWS):
            messages, reply = environment.warmup(rng)
            texts += [*(message.text for message in messages), reply]
    if environment.system_prompt:
        texts.append(environment.system_prompt)
    return texts


def readability_note(
    environment: Environment,
    config: RunConfig,
    seen: Sequence[Message],
    model_path: Path | None = None,
) -> str | None:
    """One line when the run's model turns some of the environment's text into `<unk>`, naming
    the characters and `TEXT_PRESET`; None when it reads it all (or there is no tokenizer)."""
    tokenizer = run_tokenizer(config, model_path)
    if tokenizer is None:
        return None
    lost = unreadable(tokenizer, environment_texts(environment, seen))
    if not lost:
        return None
    shown = repr(lost if len(lost) <= 40 else lost[:40] + "...")
    return (
        f"preset {config.name}'s model cannot read {shown} in {environment.name}'s text "
        f"(it becomes <unk>); train it with --preset {TEXT_PRESET}, whose model reads any text"
    )

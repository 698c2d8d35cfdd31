"""HF-folder helpers: what a Hugging Face model folder says about its special tokens and weights.

Every part that loads a model folder (the renderer, the local backend, the trainer) asks here,
so they agree on which ids stop a turn, which id pads a batch and which weights are tied:

- `token_ids`: an id field (`int`, list of ints, or absent) as a list.
- `generation_eos_ids`: the `eos_token_id` of `generation_config.json`.
- `eos_token_ids`: the generation config's eos ids, then the model config's.
- `turn_stop_ids`: a chat tokenizer's stop ids: the template's end-of-turn token first.
- `pad_token_id`: the id that fills padding (pad, else eos, else bos, else 0).
- `missing_weights`: weights a partial state dict leaves unset, tied weights counted as set.
- `cache_argument`: the name a model's `forward` takes its KV cache under.
- `copy_tokenizer_files`: a folder's tokenizer and chat template files (`TOKENIZER_FILES`),
  copied into another (a full checkpoint is then a complete Hugging Face folder).

Nothing here imports torch or transformers; models and tokenizers are passed in.
"""

from __future__ import annotations

import inspect
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>")
"""End-of-turn tokens of common chat templates; one counts when the template writes it."""

GENERATION_CONFIG = "generation_config.json"

TOKENIZER_FILES = (
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template*",
    "vocab*",
    "merges.txt",
    "*.tiktoken",
)
"""Glob patterns of a Hugging Face folder's tokenizer and chat template files."""


def token_ids(value: object) -> list[int]:
    """An id field of a config as a list of ids.

    >>> token_ids(2), token_ids([2, 0, "x"]), token_ids(None)
    ([2], [2, 0], [])
    """
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def generation_eos_ids(folder: str | Path | None) -> list[int]:
    """The `eos_token_id` of `folder/generation_config.json` ([] when there is none)."""
    if folder is None:
        return []
    path = Path(folder) / GENERATION_CONFIG
    if not path.is_file():
        return []
    return token_ids(json.loads(path.read_text()).get("eos_token_id"))


def eos_token_ids(folder: str | Path | None, config: Any) -> list[int]:
    """The ids that end generation: the generation config's eos ids, then the model config's."""
    ids = generation_eos_ids(folder) + token_ids(getattr(config, "eos_token_id", None))
    return list(dict.fromkeys(ids))


def turn_stop_ids(tokenizer: Any, chat_template: str, folder: str | Path | None) -> list[int]:
    """Ids that end an assistant turn, most specific first (duplicates removed).

    The end-of-turn tokens the chat template writes (`END_OF_TURN_TOKENS`), then the
    generation config's eos ids, then the tokenizer's eos token.
    """
    vocab = tokenizer.get_vocab()
    ids = [vocab[t] for t in END_OF_TURN_TOKENS if t in vocab and t in chat_template]
    ids += generation_eos_ids(folder)
    ids += token_ids(tokenizer.eos_token_id)
    return list(dict.fromkeys(int(t) for t in ids))


def pad_token_id(config: Any) -> int:
    """The id that fills padding: the config's pad id, else its eos id, else bos, else 0.

    Padded positions are masked out of attention, so any id would do; a real one keeps the
    embedding lookup in range.

    >>> from types import SimpleNamespace
    >>> pad_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=[7, 0]))
    7
    """
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        ids = token_ids(getattr(config, name, None))
        if ids:
            return ids[0]
    return 0


def missing_weights(model: torch.nn.Module, loaded: Iterable[str]) -> list[str]:
    """Names in `model`'s state dict that `loaded` neither names nor sets through a tie.

    Tied weights (an output head sharing the input embedding's storage) are saved once; setting
    either name sets both, so the other does not count as missing.
    """
    state = model.state_dict(keep_vars=True)
    names = set(loaded)
    storage = {state[name].data_ptr() for name in names if name in state}
    return [
        name
        for name, tensor in state.items()
        if name not in names and tensor.data_ptr() not in storage
    ]


def cache_argument(model: Any) -> str:
    """The keyword `model.forward` takes its KV cache under (transformers 5 renamed it)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def copy_tokenizer_files(source: str | Path, out: str | Path) -> list[str]:
    """Copy `source`'s tokenizer and chat template files into `out`; the names copied.

    Files `out` already has are kept (a checkpoint's own tokenizer wins over its base's).
    """
    copied: list[str] = []
    for pattern in TOKENIZER_FILES:
        for file in Path(source).glob(pattern):
            target = Path(out) / file.name
            if file.is_file() and not target.exists():
                shutil.copy2(file, target)
                copied.append(file.name)
    return copied

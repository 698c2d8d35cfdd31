"""A chat-template tokenizer that needs neither transformers nor torch.

Importing transformers' tokenizers imports torch (several seconds of start-up), and the gateway
only needs three things from a model folder: its `tokenizer.json` (the `tokenizers` library),
its chat template (jinja2) and its special tokens. `TemplateTokenizer` reads exactly those and
renders the template the way transformers' `apply_chat_template` does (the same sandboxed jinja2
environment, filters and globals, the same message normalisation and special-token variables),
so a folder renders to the same text and tokens either way (tests/rendering checks this).

`TemplateTokenizer.load` returns None for a folder it cannot render identically (a tokenizer
class with its own Python code, several named templates, the `{% generation %}` tag); the
renderer then falls back to transformers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The named special tokens a chat template sees as variables (transformers' list)."""

PLAIN_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
"""Tokenizer classes that are their `tokenizer.json` and nothing more."""

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


class _TemplateDict:
    # A `dict` global that gives templates no attribute access to the real type.
    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    # Namespaces reject underscore names, so templates cannot reach CPython internals.
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore-prefixed names, got {name!r}"
            )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters; templates expect plain JSON.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@cache
def compile_template(source: str) -> jinja2.Template:
    """`source` compiled in the sandboxed environment transformers renders chat templates in."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env.from_string(source)


def _token_text(value: object) -> str | None:
    """A special token from a tokenizer config: a string or a serialised AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    # As transformers does: drop None values, and give reasoning under each name templates read.
    message = {key: value for key, value in message.items() if value is not None}
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


class TemplateTokenizer:
    """A model folder's `tokenizer.json`, chat template and special tokens.

    It offers the part of a transformers tokenizer that `HFRenderer` uses (`encode`, `decode`,
    `apply_chat_template`, `get_vocab`, `eos_token_id`, `len()`, `save_pretrained`).

    Args:
        folder: The model folder.
        tokenizer: Its loaded `tokenizer.json`.
        chat_template: Its chat template.
        special_tokens: The named special tokens (`eos_token`, ...) the template sees.
    """

    def __init__(
        self,
        folder: Path,
        tokenizer: Tokenizer,
        chat_template: str,
        special_tokens: dict[str, str],
    ) -> None:
        self.name_or_path = str(folder)
        self.chat_template = chat_template
        self.special_tokens_map = dict(special_tokens)
        self._tokenizer = tokenizer
        self._vocab = tokenizer.get_vocab(with_added_tokens=True)
        eos = special_tokens.get("eos_token")
        self.eos_token_id: int | None = self._vocab.get(eos) if eos is not None else None

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> TemplateTokenizer | None:
        """The folder's tokenizer, or None when only transformers can render it identically."""
        root = Path(folder)
        config_path = root / "tokenizer_config.json"
        if not (root / "tokenizer.json").is_file() or not config_path.is_file():
            return None
        config = json.loads(config_path.read_text())
        if config.get("tokenizer_class") not in PLAIN_TOKENIZER_CLASSES:
            return None
        template_file = root / "chat_template.jinja"
        template = template_file.read_text() if template_file.is_file() else None
        if template is None:
            template = config.get("chat_template")
        if not isinstance(template, str) or not template or _GENERATION_TAG.search(template):
            return None
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        for entry in (config.get("added_tokens_decoder") or {}).values():
            if _token_text(entry) not in vocab:  # transformers would add it; we would not
                return None
        special: dict[str, str] = {}
        for name in SPECIAL_TOKEN_NAMES:
            text = _token_text(config.get(name))
            if text is not None:
                special[name] = text
        return cls(root, tokenizer, template, special)

    def __len__(self) -> int:
        return len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        """Token text -> id, added tokens included."""
        return dict(self._vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text` (markup tokens recognised)."""
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(
        self,
        ids: Sequence[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool = False,
    ) -> str:
        """Text of `ids` (no tokenization-space clean-up is ever applied)."""
        del clean_up_tokenization_spaces  # always off, as HFRenderer asks
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        conversation: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = False,
    ) -> str | list[int]:
        """The chat template's text for `conversation` (token ids when `tokenize`)."""
        text = compile_template(self.chat_template).render(
            messages=[_template_message(dict(m)) for m in conversation],
            tools=list(tools) if tools is not None else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens_map,
        )
        return self.encode(text) if tokenize else text

    def save_pretrained(self, folder: str | os.PathLike[str]) -> list[str]:
        """Copy the tokenizer's files into `folder`; the names copied."""
        from rollout.models.hf import copy_tokenizer_files

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        return copy_tokenizer_files(self.name_or_path, out)

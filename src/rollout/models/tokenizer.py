"""Tokenizers for the tiny models, trained on a small built-in corpus with `tokenizers`.

Two kinds:

- `bytes` (the default when the vocabulary has room): byte-level BPE like Qwen's and GPT-2's.
  The 256 byte symbols are always in the vocabulary, so every string encodes and decodes back
  byte for byte. It needs `vocab_size >= 256 + len(ADDED_TOKENS)` (265).
- `chars`: BPE over a given alphabet of characters plus an `<unk>` token, for vocabularies too
  small for the 256 bytes (a vocab-64 model for parity tests). Characters outside the alphabet
  encode as `<unk>`, so only text inside the alphabet round-trips.

The chat markup tokens (`ADDED_TOKENS`) are whole tokens in both kinds. The vocabulary size is
honoured exactly: if the corpus does not support enough merges, the vocabulary is filled up
with unused `<|reserved_N|>` special tokens.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from rollout.models.errors import ModelError
from rollout.models.template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TokenizerKind = Literal["auto", "bytes", "chars"]

ENDOFTEXT, IM_START, IM_END, UNK = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
"""Control tokens: ids 0, 1, 2 in every tiny tokenizer, skipped by `skip_special_tokens`."""
MARKUP_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
"""Markup the model writes as text; whole tokens, but not special (decoding keeps them)."""
ADDED_TOKENS = SPECIAL_TOKENS + MARKUP_TOKENS
ROLE_TOKENS = ("system", "user", "assistant")
"""Chat role names. A `chars` tokenizer whose alphabet cannot spell one makes it a whole token (as
real vocabularies do), so a chat header stays three tokens instead of a run of `<unk>`."""

DEFAULT_ALPHABET = ' \n0123456789abcdefghijklmnopqrstuvwxyz+-*/=?.,:{}[]"'
"""The `chars` alphabet by default: enough for arithmetic, lowercase words and JSON."""

# Qwen2's pre-tokenizer split: words, single digits, punctuation runs, whitespace.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MIN_BYTES_VOCAB = 256 + len(ADDED_TOKENS)

_WORDS = (
    "the a an of to and in is it you that for on with as what how many answer question "
    "number sum difference product total result value tool call function name arguments "
    "system user assistant helpful please think step first then so equals plus minus "
    "times divided hello world yes no true false null move left right up down look"
)


def builtin_corpus(seed: int = 0) -> list[str]:
    """A small deterministic corpus: arithmetic, words, JSON tool calls and chat markup."""
    rng = random.Random(seed)
    words = _WORDS.split()
    texts: list[str] = []
    for _ in range(400):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        texts.append(f"What is {a} {op} {b}?")
        value = {"+": a + b, "-": a - b, "*": a * b, "/": round(a / max(b, 1), 2)}[op]
        texts.append(f"{a} {op} {b} = {value}")
        texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(2, 8)))
        texts.append(sentence.capitalize() + rng.choice(".!?"))
        call = {"name": rng.choice(words), "arguments": {rng.choice(words): rng.randint(0, 99)}}
        texts.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        texts.append(
            f"<|im_start|>user\n{sentence}<|im_end|>\n<|im_start|>assistant\n{value}<|im_end|>\n"
        )
    texts.append("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789")
    texts.append("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n")
    texts.append(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    return texts


def build_tokenizer(
    *,
    vocab_size: int,
    kind: TokenizerKind = "auto",
    alphabet: str | None = None,
    corpus: Iterable[str] | None = None,
    model_max_length: int = 2048,
) -> PreTrainedTokenizerFast:
    """Train a tokenizer and wrap it for transformers, with the tiny models' chat template.

    Args:
        vocab_size: The exact number of tokens, added tokens included.
        kind: `bytes`, `chars`, or `auto` (bytes when `vocab_size` has room for them).
        alphabet: The characters of a `chars` tokenizer (default `DEFAULT_ALPHABET`).
        corpus: Extra training text, added to the built-in corpus.
        model_max_length: The longest sequence the model takes.

    Raises:
        ModelError: When `vocab_size`, `kind` or `alphabet` cannot make a tokenizer.
    """
    if kind == "auto":
        kind = "bytes" if vocab_size >= MIN_BYTES_VOCAB else "chars"
    if kind not in ("bytes", "chars"):
        raise ModelError(f"tokenizer must be 'auto', 'bytes' or 'chars', got {kind!r}")
    if alphabet is not None and kind != "chars":
        raise ModelError(f"alphabet is only used by tokenizer='chars', got tokenizer={kind!r}")
    texts = list(builtin_corpus())
    if corpus is not None:
        texts.extend(corpus)
    texts = [_strip_added(text) for text in texts]
    roles: tuple[str, ...] = ()

    if kind == "bytes":
        if vocab_size < MIN_BYTES_VOCAB:
            raise ModelError(
                f"vocab_size must be at least {MIN_BYTES_VOCAB} for a byte-level tokenizer "
                f"(256 bytes + {len(ADDED_TOKENS)} added tokens), got {vocab_size}; "
                "use tokenizer='chars' for smaller vocabularies"
            )
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size - len(MARKUP_TOKENS),
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        chars = _alphabet(DEFAULT_ALPHABET if alphabet is None else alphabet)
        roles = tuple(word for word in ROLE_TOKENS if not set(word) <= set(chars))
        added = len(ADDED_TOKENS) + len(roles)
        floor = added + 1 + len(chars)
        if vocab_size < floor:
            raise ModelError(
                f"vocab_size must be at least {floor} for tokenizer='chars' with a "
                f"{len(chars)}-character alphabet ({added} added tokens + <unk>), "
                f"got {vocab_size}"
            )
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated")
        tok.decoder = decoders.Fuse()
        allowed = set(chars)
        texts = ["".join(c for c in text if c in allowed) for text in texts]
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size - len(MARKUP_TOKENS) - len(roles),
            special_tokens=[*SPECIAL_TOKENS, UNK],
            initial_alphabet=chars,
            limit_alphabet=len(chars),
            show_progress=False,
        )
    tok.train_from_iterator(texts, trainer=trainer)
    words = (*MARKUP_TOKENS, *roles)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in words])
    missing = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    if missing < 0:
        raise ModelError(f"tokenizer came out with more than vocab_size={vocab_size} tokens")
    tok.add_special_tokens(
        [AddedToken(f"<|reserved_{i}|>", special=True, normalized=False) for i in range(missing)]
    )
    # Imported here: a cached tokenizer folder is found without transformers (see
    # default_tokenizer.py).
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=UNK if kind == "chars" else None,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    if len(wrapped) != vocab_size:
        raise ModelError(f"tokenizer has {len(wrapped)} tokens, expected vocab_size={vocab_size}")
    return wrapped


def _strip_added(text: str) -> str:
    # Added tokens are whole tokens; learning merges over their characters would waste vocab.
    for token in ADDED_TOKENS:
        text = text.replace(token, "\n")
    return text


def _alphabet(alphabet: str) -> list[str]:
    chars = list(dict.fromkeys(alphabet))
    if not chars:
        raise ModelError("alphabet must contain at least one character, got ''")
    return chars

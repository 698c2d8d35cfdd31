"""Whether a model's tokenizer reads a text as written: the characters it turns into `<unk>`.

A `chars` tokenizer (cpu-tiny's) encodes every character outside its alphabet as `<unk>`, so a
task whose prompt is a word reaches its model as a row of identical tokens: nothing to learn
from. A byte-level tokenizer (cpu-text's, and every Hugging Face model's) has no `<unk>` and
reads any text. `unreadable(tokenizer, texts)` names the characters lost; `rollout train` and
`rollout env check` use it on the environment's prompts (`rollout.launch.readable`).

Example:
    >>> from rollout.models.tokenizer import build_tokenizer
    >>> parity = build_tokenizer(vocab_size=64, kind="chars", alphabet="0123456789EO=\\n")
    >>> unreadable(parity.backend_tokenizer, ["1234", "Spell it: abc"])
    ' :Sabceilpt'
    >>> text = build_tokenizer(vocab_size=512, kind="bytes")
    >>> unreadable(text.backend_tokenizer, ["Spell it: abc", "{\\"é\\": 1}"])
    ''
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
"""The `tokenizers` file of a Hugging Face model folder."""


def unreadable(tokenizer: Tokenizer, texts: Iterable[str]) -> str:
    """The characters of `texts` that `tokenizer` encodes as its unknown token, sorted, once
    each ('' when it reads them all, and always for a tokenizer without an unknown token)."""
    unknown = getattr(tokenizer.model, "unk_token", None)
    unknown_id = tokenizer.token_to_id(unknown) if unknown else None
    if unknown_id is None:
        return ""
    lost: set[str] = set()
    for text in texts:
        encoding = tokenizer.encode(text, add_special_tokens=False)
        for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
            if token == unknown_id:
                lost.update(text[start:end])
    return "".join(sorted(lost))


def folder_tokenizer(folder: Path) -> Tokenizer | None:
    """The tokenizer of a Hugging Face model folder, or None when it has no `tokenizer.json`."""
    path = folder / TOKENIZER_FILE
    return Tokenizer.from_file(str(path)) if path.is_file() else None

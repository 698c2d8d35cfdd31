"""Built-in GSM8K and AIME benchmarks: single-turn environments with answer extraction.

- `gsm8k(items)` / `aime(items)`: `Benchmark`s over item dicts you already have.
- `load_gsm8k(...)` / `load_aime(...)`: the same over the conventional Hugging Face datasets
  (`openai/gsm8k`, config `main`; `AI-MO/aimo-validation-aime` or `Maxwell-Jia/AIME_2024`), or
  over local `data_files`. They need the `rolloutlib[benchmarks]` extra (`datasets`).
- `extract_answer(text)`: the final number of a response: the last `#### x`, else the last
  `\\boxed{x}`, else the last "The answer is x", else the last number.
- `GSM8KEnv` / `AIMEEnv`: observe the question, take the response text as the action, and
  end with a `Score` of 1.0 (correct) or 0.0, whose metadata holds the expected and the
  extracted answer.

Numbers are compared exactly as decimals after normalization: `$`, thousands separators
(`1,000` is 1000, never 000), trailing periods, leading zeros (AIME `004` is 4) and signs are
handled; GSM8K accepts decimals (`42.0` equals `42`), AIME answers are integers in 0..999.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from rolloutlib.core import SingleTurnEnv
from rolloutlib.errors import ArgumentError, MissingDependencyError
from rolloutlib.evals import Benchmark
from rolloutlib.graders import Score
from rolloutlib.spaces.text import TextSpace

__all__ = [
    "AIMEEnv",
    "GSM8KEnv",
    "aime",
    "extract_answer",
    "extract_boxed",
    "gsm8k",
    "load_aime",
    "load_gsm8k",
    "parse_number",
]

# A number: optional sign (not a hyphen joining words/numbers), digits with optional
# thousands groups, optional decimals. Thousands groups are tried first so that "1,000" is
# read whole and never as "000".
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>-)?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?(?!\d)"
    r"|(?<![\w.\d])(?P<sign2>-)?(?P<frac_only>\.\d+)(?!\d)"
)
_HASHES = re.compile(r"####\s*(.*)")
_ANSWER_IS = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=)\s*:?\s*(.*)", re.IGNORECASE
)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _clean(text: str) -> str:
    text = text.replace("\u2212", "-").replace("\u2013", "-")  # unicode minus / en dash
    text = text.replace("{,}", ",").replace("\\,", "").replace("\\!", "")
    text = text.replace("\\$", "").replace("$", "")
    text = text.replace("\\%", "%")
    # "- 5" after an operator-less start is still minus five in answers like "$-5$"
    return text


def parse_number(text: str) -> Decimal | None:
    """The first number in `text` as a `Decimal` (None if there is none).

    Example:
        >>> parse_number("$1,000.50."), parse_number("-7"), parse_number("007")
        (Decimal('1000.50'), Decimal('-7'), Decimal('7'))
    """
    match = _NUMBER.search(_clean(text))
    return _to_decimal(match) if match else None


def _to_decimal(match: re.Match[str]) -> Decimal | None:
    if match.group("int") is not None:
        digits = match.group("int").replace(",", "") + (match.group("frac") or "")
        sign = match.group("sign") or ""
    else:
        digits = "0" + match.group("frac_only")
        sign = match.group("sign2") or ""
    try:
        return Decimal(sign + digits)
    except InvalidOperation:  # pragma: no cover - the pattern only admits valid decimals
        return None


def _last_number(text: str) -> Decimal | None:
    matches = list(_NUMBER.finditer(_clean(text)))
    return _to_decimal(matches[-1]) if matches else None


def extract_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced.

    Example:
        >>> extract_boxed(r"first \\boxed{1} then \\boxed{\\frac{1}{2}}")
        '\\\\frac{1}{2}'
    """
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
    return None


def extract_answer(text: str) -> Decimal | None:
    """The final numeric answer of a model response (None if there is none).

    Looks, in order, for the last `#### x`, the last `\\boxed{x}`, the last "answer is x"
    (or "answer: x"), and finally the last number anywhere.

    Example:
        >>> extract_answer("6 * 7 = 42. The answer is 42.")
        Decimal('42')
        >>> extract_answer(r"so \\boxed{1,000} dollars")
        Decimal('1000')
    """
    if not isinstance(text, str):
        return None
    hashes = _HASHES.findall(text)
    for candidate in reversed(hashes):
        number = parse_number(candidate)
        if number is not None:
            return number
    boxed = extract_boxed(text)
    if boxed is not None:
        number = parse_number(boxed)
        if number is not None:
            return number
    for candidate in reversed(_ANSWER_IS.findall(text)):
        number = parse_number(candidate)
        if number is not None:
            return number
    return _last_number(text)


def _format(number: Decimal | None) -> str | None:
    if number is None:
        return None
    normalized = number.normalize()
    # normalize() writes 1000 as 1E+3; quantize integers back to plain digits
    if normalized == normalized.to_integral_value():
        return str(normalized.quantize(Decimal(1)))
    return format(normalized, "f")


def _field(item: Mapping[str, Any], names: Sequence[str], what: str) -> Any:
    if not isinstance(item, Mapping):
        raise ArgumentError("item", item, f"expected a mapping with a {what} field")
    for name in names:
        if name in item and item[name] is not None:
            return item[name]
    raise ArgumentError("item", item, f"has no {what} field (looked for {list(names)})")


def _gold_number(value: Any, item: Any) -> Decimal:
    if isinstance(value, bool):
        raise ArgumentError("item.answer", value, "expected a number or answer text")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, str):
        number = extract_answer(value)
        if number is not None:
            return number
    raise ArgumentError("item.answer", value, f"no numeric answer in item {item!r:.80}")


class _MathEnv(SingleTurnEnv[str, str]):
    """Shared machinery: observe a question, grade the number in the response."""

    observation_space = TextSpace()
    action_space = TextSpace()
    question_fields: tuple[str, ...] = ("question",)
    answer_fields: tuple[str, ...] = ("answer",)

    def __init__(self, item: Mapping[str, Any], *, template: str = "{question}") -> None:
        self.item = item
        question = _field(item, self.question_fields, "question")
        if not isinstance(question, str):
            raise ArgumentError("item.question", question, "expected a str")
        self.question = question
        self.expected = self._expected(_field(item, self.answer_fields, "answer"))
        try:
            self.prompt = template.format(question=question)
        except (KeyError, IndexError) as exc:
            raise ArgumentError("template", template, f"unknown placeholder {exc}") from None

    def _expected(self, value: Any) -> Decimal:
        return _gold_number(value, self.item)

    def _predicted(self, response: str) -> Decimal | None:
        return extract_answer(response)

    def observe(self) -> str:
        return self.prompt

    def evaluate(self, action: str) -> Score:
        predicted = self._predicted(action) if isinstance(action, str) else None
        expected = _format(self.expected)
        got = _format(predicted)
        correct = predicted is not None and predicted == self.expected
        if predicted is None:
            feedback = f"no answer found; expected {expected}"
        elif correct:
            feedback = f"correct: {got}"
        else:
            feedback = f"incorrect: expected {expected}, got {got}"
        return Score(
            1.0 if correct else 0.0,
            feedback=feedback,
            metadata={"expected": expected, "predicted": got},
        )


class GSM8KEnv(_MathEnv):
    """One GSM8K problem: `{"question": str, "answer": "... #### 42"}` (or a plain number).

    Example:
        >>> env = GSM8KEnv({"question": "What is 6 times 7?", "answer": "6*7=42\\n#### 42"})
        >>> env.reset()[0]
        'What is 6 times 7?'
        >>> env.step("It is 42.")[1]
        1.0
    """


class AIMEEnv(_MathEnv):
    """One AIME problem; answers are integers 0..999 (`004` equals 4).

    Items use `problem`/`Problem`/`question` and `answer`/`Answer` fields.
    """

    question_fields = ("problem", "Problem", "question")
    answer_fields = ("answer", "Answer")

    def _expected(self, value: Any) -> Decimal:
        number = _gold_number(value, self.item)
        if number != number.to_integral_value() or not 0 <= number <= 999:
            raise ArgumentError("item.answer", value, "AIME answers are integers in 0..999")
        return number

    def _predicted(self, response: str) -> Decimal | None:
        number = extract_answer(response)
        if number is None or number != number.to_integral_value() or not 0 <= number <= 999:
            return None
        return number


def _item_id_from(fields: Sequence[str]) -> Callable[[Mapping[str, Any]], str]:
    def get(item: Mapping[str, Any]) -> str:
        for name in fields:
            if name in item and item[name] is not None:
                return str(item[name])
        raise KeyError(fields)

    return get


def _make_get_id(
    items: Sequence[Mapping[str, Any]], fields: Sequence[str]
) -> Callable[[Mapping[str, Any]], str] | None:
    if items and all(isinstance(i, Mapping) and any(f in i for f in fields) for i in items):
        return _item_id_from(fields)
    return None


def gsm8k(
    items: Iterable[Mapping[str, Any]], *, name: str = "gsm8k", template: str = "{question}"
) -> Benchmark[Mapping[str, Any]]:
    """A GSM8K benchmark over `items` (`{"question", "answer"}` dicts).

    Args:
        items: The problems; `answer` is GSM8K's solution text ending in `#### x`, or a number.
        name: The benchmark's name.
        template: Prompt template with a `{question}` placeholder.
    """
    materialized = list(items)
    return Benchmark(
        name,
        materialized,
        lambda item: GSM8KEnv(item, template=template),
        _make_get_id(materialized, ("id",)),
    )


def aime(
    items: Iterable[Mapping[str, Any]], *, name: str = "aime", template: str = "{question}"
) -> Benchmark[Mapping[str, Any]]:
    """An AIME benchmark over `items` (`problem`/`Problem` and `answer`/`Answer` fields).

    Args:
        items: The problems.
        name: The benchmark's name.
        template: Prompt template with a `{question}` placeholder.
    """
    materialized = list(items)
    return Benchmark(
        name,
        materialized,
        lambda item: AIMEEnv(item, template=template),
        _make_get_id(materialized, ("id", "ID")),
    )


_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            "loading Hugging Face datasets needs the `datasets` package: "
            "pip install 'rolloutlib[benchmarks]'"
        ) from exc
    return datasets


def _builder_for(data_files: Any) -> str:
    files: list[str] = []
    if isinstance(data_files, str):
        files = [data_files]
    elif isinstance(data_files, Mapping):
        for value in data_files.values():
            files.extend([value] if isinstance(value, str) else list(value))
    else:
        files = [str(f) for f in data_files]
    kinds = set()
    for file in files:
        suffix = next((s for s in _BUILDERS if str(file).endswith(s)), None)
        if suffix is None:
            raise ArgumentError(
                "data_files", data_files, f"unknown file type {file!r}; use {sorted(_BUILDERS)}"
            )
        kinds.add(_BUILDERS[suffix])
    if len(kinds) != 1:
        raise ArgumentError("data_files", data_files, "all files must have the same format")
    return kinds.pop()


def _load_rows(
    name: str,
    config: str | None,
    split: str,
    data_files: Any,
    limit: int | None,
    load_kwargs: dict[str, Any],
) -> list[dict[str, Any]]:
    datasets = _import_datasets()
    if data_files is not None:
        if isinstance(data_files, Mapping):
            files = dict(data_files)
        else:
            files = {
                split: [
                    str(f) for f in ([data_files] if isinstance(data_files, str) else data_files)
                ]
            }
        if split not in files:
            raise ArgumentError("split", split, f"not among the data_files splits {sorted(files)}")
        table = datasets.load_dataset(
            _builder_for(data_files), data_files=files, split=split, **load_kwargs
        )
    else:
        table = datasets.load_dataset(name, config, split=split, **load_kwargs)
    if limit is not None:
        if not isinstance(limit, int) or limit < 1:
            raise ArgumentError("limit", limit, "expected a positive int or None")
        table = table.select(range(min(limit, len(table))))
    return [dict(row) for row in table]


def load_gsm8k(
    split: str = "test",
    *,
    name: str = "openai/gsm8k",
    config: str | None = "main",
    data_files: str | Sequence[str] | Mapping[str, Any] | None = None,
    limit: int | None = None,
    template: str = "{question}",
    **load_kwargs: Any,
) -> Benchmark[Mapping[str, Any]]:
    """Load GSM8K with Hugging Face `datasets` (needs `rolloutlib[benchmarks]`).

    Args:
        split: Which split (`"test"` or `"train"`).
        name: The dataset repository.
        config: The dataset configuration (`"main"` or `"socratic"`).
        data_files: Local `.jsonl`/`.json`/`.parquet`/`.csv` file(s) to read instead of the
            Hub: a path, a list of paths (used as `split`) or a `{split: paths}` mapping.
        limit: Keep only the first `limit` items.
        template: Prompt template with a `{question}` placeholder.
        **load_kwargs: Passed to `datasets.load_dataset` (e.g. `cache_dir`, `revision`).
    """
    rows = _load_rows(name, config, split, data_files, limit, load_kwargs)
    return gsm8k(rows, name=f"gsm8k/{split}", template=template)


def load_aime(
    split: str = "train",
    *,
    name: str = "AI-MO/aimo-validation-aime",
    config: str | None = None,
    data_files: str | Sequence[str] | Mapping[str, Any] | None = None,
    limit: int | None = None,
    template: str = "{question}",
    **load_kwargs: Any,
) -> Benchmark[Mapping[str, Any]]:
    """Load an AIME set with Hugging Face `datasets` (needs `rolloutlib[benchmarks]`).

    Args:
        split: Which split (both conventional sets only have `"train"`).
        name: The dataset repository, e.g. `"AI-MO/aimo-validation-aime"` or
            `"Maxwell-Jia/AIME_2024"`.
        config: The dataset configuration, if any.
        data_files: Local files to read instead of the Hub (see `load_gsm8k`).
        limit: Keep only the first `limit` items.
        template: Prompt template with a `{question}` placeholder.
        **load_kwargs: Passed to `datasets.load_dataset`.
    """
    rows = _load_rows(name, config, split, data_files, limit, load_kwargs)
    return aime(rows, name=f"aime/{split}", template=template)

"""Tiny models of real architectures, randomly initialised, saved in the Hugging Face layout.

`init_model` writes a folder that `AutoModelForCausalLM.from_pretrained` and
`AutoTokenizer.from_pretrained` load like any downloaded model: `config.json`,
`model.safetensors`, `generation_config.json`, `tokenizer.json`, `tokenizer_config.json`,
`chat_template.jinja`, and `rollout_model.json` (the recipe, for people; nothing reads it).
Everything else in rollout takes any local Hugging Face model folder the same way; nothing
here is special-cased downstream.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from rollout.models.default_tokenizer import DEFAULT_VOCAB_SIZE
from rollout.models.errors import ModelError
from rollout.models.tokenizer import (
    ENDOFTEXT,
    IM_END,
    TokenizerKind,
    build_tokenizer,
)
from rollout.runs.architectures import ARCH_NAMES, Arch

ARCHITECTURES: dict[str, tuple[Callable[..., PretrainedConfig], type[PreTrainedModel]]] = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
}
"""The transformers classes of each name in `ARCH_NAMES` (the list of names lives there)."""
if tuple(ARCHITECTURES) != ARCH_NAMES:  # pragma: no cover - a mistake in this file
    raise ModelError(f"ARCHITECTURES {tuple(ARCHITECTURES)} differ from ARCH_NAMES {ARCH_NAMES}")

RECIPE_FILE = "rollout_model.json"
"""What `init_model` was asked for (name, sizes, tokenizer, seed), next to the weights."""
MAX_POSITIONS = 2048


def init_model(
    out_dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    arch: Arch = "qwen3",
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int | None = None,
    intermediate: int | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    tokenizer: TokenizerKind = "auto",
    alphabet: str | None = None,
    max_positions: int = MAX_POSITIONS,
    tie_embeddings: bool = True,
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    sliding_window: int | None = None,
    sliding_layers: Sequence[int] | None = None,
) -> Path:
    """Build a tiny randomly initialised model with a trained tokenizer and chat template.

    Args:
        out_dir: The folder to write (created; files in it are overwritten).
        name: A name for the model, recorded with the recipe in `rollout_model.json`
            (default: the folder's name).
        arch: One of `ARCH_NAMES` (`qwen3`, `qwen2` or `llama`).
        hidden: Hidden size; must be divisible by `heads`.
        layers: Number of decoder layers.
        heads: Attention heads; must be divisible by `kv_heads`.
        kv_heads: Key/value heads (grouped-query attention).
        head_dim: Width of each attention head (default `hidden / heads`).
        intermediate: MLP size (default `3 * hidden`).
        vocab_size: Exact vocabulary size, added tokens included (the model's embedding has
            exactly `len(tokenizer)` rows).
        tokenizer: `bytes` (byte-level BPE, needs vocab_size >= 265), `chars` (BPE over
            `alphabet`, for tiny vocabularies) or `auto` (bytes when it fits).
        alphabet: Characters of a `chars` tokenizer.
        max_positions: `max_position_embeddings` and the tokenizer's `model_max_length`.
        tie_embeddings: Share the input embedding and the output head.
        seed: Seed of the weight initialisation (the tokenizer is deterministic).
        corpus: Extra text to train the tokenizer on.
        sliding_window: Local attention: the layers in `sliding_layers` attend to only this
            many latest tokens (qwen3 and qwen2; None: every layer sees the whole sequence).
        sliding_layers: The layers with local attention (default: all of them).

    Returns:
        The folder, as a `Path`.

    Raises:
        ModelError: When a size is invalid; the message names the argument and its value.
    """
    if arch not in ARCHITECTURES:
        raise ModelError(f"arch must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
    for field, value in (("hidden", hidden), ("layers", layers), ("heads", heads)):
        if value < 1:
            raise ModelError(f"{field} must be positive, got {value}")
    if kv_heads < 1 or heads % kv_heads:
        raise ModelError(f"kv_heads must be a positive divisor of heads={heads}, got {kv_heads}")
    if head_dim is None:
        if hidden % heads:
            raise ModelError(f"hidden must be divisible by heads={heads}, got {hidden}")
        head_dim = hidden // heads
    if head_dim < 2 or head_dim % 2:
        raise ModelError(f"head_dim must be even and positive (rotary embeddings), got {head_dim}")
    if intermediate is None:
        intermediate = 3 * hidden
    if intermediate < 1:
        raise ModelError(f"intermediate must be positive, got {intermediate}")
    local = _local_layers(arch, layers, sliding_window, sliding_layers)

    tok = build_tokenizer(
        vocab_size=vocab_size,
        kind=tokenizer,
        alphabet=alphabet,
        corpus=corpus,
        model_max_length=max_positions,
    )
    config_cls, model_cls = ARCHITECTURES[arch]
    vocab = tok.get_vocab()
    pad_id, eos_id = vocab[ENDOFTEXT], vocab[IM_END]
    config = config_cls(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
        **local,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id,
        eos_token_id=[eos_id, pad_id],
        pad_token_id=pad_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    recipe = {
        "name": name or out.resolve().name,
        "arch": arch,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate": intermediate,
        "vocab_size": len(tok),
        "tokenizer": "bytes" if tok.unk_token is None else "chars",
        "alphabet": alphabet,
        "max_positions": max_positions,
        "tie_embeddings": tie_embeddings,
        "seed": seed,
        "extra_corpus": corpus is not None,
        "sliding_window": sliding_window,
        "sliding_layers": local.get("layer_types")
        and [n for n, kind in enumerate(local["layer_types"]) if kind == "sliding_attention"],
    }
    (out / RECIPE_FILE).write_text(json.dumps(recipe, indent=2) + "\n")
    return out


def _local_layers(
    arch: Arch, layers: int, window: int | None, chosen: Sequence[int] | None
) -> dict[str, Any]:
    """The config fields of local attention (`sliding_window` in the `chosen` layers).

    >>> _local_layers("qwen3", 3, 16, [0])["layer_types"]
    ['sliding_attention', 'full_attention', 'full_attention']
    >>> _local_layers("qwen3", 2, None, None)
    {}
    """
    if window is None:
        if chosen is not None:
            raise ModelError(f"sliding_layers {list(chosen)} needs a sliding_window")
        return {}
    if arch == "llama":
        raise ModelError("sliding_window needs arch qwen3 or qwen2; llama has no local layers")
    if window < 2:
        raise ModelError(f"sliding_window must be at least 2, got {window}")
    local = set(range(layers) if chosen is None else chosen)
    if not local <= set(range(layers)):
        raise ModelError(f"sliding_layers must be layers of 0..{layers - 1}, got {sorted(local)}")
    kinds = ["sliding_attention" if n in local else "full_attention" for n in range(layers)]
    return {"sliding_window": window, "use_sliding_window": True, "layer_types": kinds}

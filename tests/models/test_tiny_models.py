"""Tiny models: built folders load with transformers, have the asked sizes, and generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rollout.models import (
    ADDED_TOKENS,
    MIN_BYTES_VOCAB,
    ModelError,
    build_tokenizer,
    default_tokenizer_dir,
    init_model,
)

FILES = {
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
}


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("qwen3"), vocab_size=320)


@pytest.fixture(scope="module")
def byte_tokenizer(qwen3_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(qwen3_dir)


def test_qwen3_folder_loads_with_the_asked_sizes(qwen3_dir: Path) -> None:
    assert {p.name for p in qwen3_dir.iterdir()} >= FILES
    model = AutoModelForCausalLM.from_pretrained(qwen3_dir)
    config = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert (config.hidden_size, config.num_hidden_layers) == (128, 2)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert (config.head_dim, config.intermediate_size) == (32, 384)
    assert config.max_position_embeddings == 2048
    assert config.vocab_size == 320
    assert model.get_input_embeddings().weight.shape == (320, 128)
    assert config.tie_word_embeddings
    head = model.get_output_embeddings()
    assert isinstance(head, torch.nn.Linear)
    assert head.weight is model.get_input_embeddings().weight


def test_tokenizer_has_the_chat_tokens_and_the_config_names_them(
    qwen3_dir: Path, byte_tokenizer: PreTrainedTokenizerBase
) -> None:
    assert len(byte_tokenizer) == 320
    vocab = byte_tokenizer.get_vocab()
    for token in ADDED_TOKENS:
        assert token in vocab
        assert byte_tokenizer.encode(token, add_special_tokens=False) == [vocab[token]]
    config = json.loads((qwen3_dir / "config.json").read_text())
    generation = json.loads((qwen3_dir / "generation_config.json").read_text())
    assert config["eos_token_id"] == vocab["<|im_end|>"] == byte_tokenizer.eos_token_id
    assert config["pad_token_id"] == vocab["<|endoftext|>"] == byte_tokenizer.pad_token_id
    assert generation["eos_token_id"] == [vocab["<|im_end|>"], vocab["<|endoftext|>"]]
    assert "<tool_call>" in (qwen3_dir / "chat_template.jinja").read_text()


def test_generate_produces_tokens_from_the_vocabulary(
    qwen3_dir: Path, byte_tokenizer: PreTrainedTokenizerBase
) -> None:
    model = AutoModelForCausalLM.from_pretrained(qwen3_dir)
    text = byte_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True, tokenize=False
    )
    assert isinstance(text, str)
    ids = torch.tensor([byte_tokenizer.encode(text, add_special_tokens=False)])
    generate = model.generate  # pyright: ignore[reportAttributeAccessIssue]
    out = generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape[1] > ids.shape[1]
    assert int(out.max()) < 320


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips_any_text(byte_tokenizer: PreTrainedTokenizerBase, text: str):
    ids = byte_tokenizer.encode(text, add_special_tokens=False)
    assert byte_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    a = init_model(tmp_path / "a", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=300)
    b = init_model(tmp_path / "b", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=300)
    c = init_model(tmp_path / "c", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=300, seed=1)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_vocab_64_chars_model_for_the_trainer(tmp_path: Path) -> None:
    folder = init_model(tmp_path / "m", hidden=64, layers=2, heads=4, kv_heads=2, vocab_size=64)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert len(tok) == model.config.vocab_size == 64
    assert model.config.head_dim == 16
    text = 'what is 12 + 30?\n{"a": [1, 2]}'
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    # Outside the alphabet: <unk>, never an error.
    assert "<unk>" in tok.decode(tok.encode("Ω", add_special_tokens=False))


def test_chars_alphabet_without_letters_keeps_chat_roles_whole(tmp_path: Path) -> None:
    folder = init_model(
        tmp_path / "m", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=64,
        tokenizer="chars", alphabet="0123456789EO=\n",
    )  # fmt: skip
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == 64
    ids = tok.apply_chat_template([{"role": "user", "content": "907"}], add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == [
        "<|im_start|>", "user", "\n", "9", "0", "7", "<|im_end|>", "\n",
        "<|im_start|>", "assistant", "\n",
    ]  # fmt: skip


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_other_architectures(tmp_path: Path, arch: str) -> None:
    folder = init_model(tmp_path / arch, arch=arch, hidden=32, heads=2, kv_heads=1, vocab_size=300)  # type: ignore[arg-type]
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.model_type == arch
    assert model.config.vocab_size == 300
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 300)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hidden": 130}, "hidden"),
        ({"kv_heads": 3}, "kv_heads"),
        ({"layers": 0}, "layers"),
        ({"arch": "gpt9"}, "arch"),
        ({"vocab_size": 20}, "vocab_size"),
        ({"vocab_size": 100, "tokenizer": "bytes"}, "vocab_size"),
        ({"tokenizer": "words"}, "tokenizer"),
        ({"head_dim": 7}, "head_dim"),
    ],
)
def test_bad_sizes_name_the_field(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ModelError, match=field):
        init_model(tmp_path / "bad", **kwargs)


def test_heads_may_be_wider_than_hidden_over_heads(tmp_path: Path) -> None:
    folder = init_model(tmp_path / "wide", hidden=64, heads=2, kv_heads=1, head_dim=64)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.head_dim == 64
    assert model.model.layers[0].self_attn.q_proj.weight.shape == (128, 64)  # 2 heads of 64
    assert model(torch.tensor([[1, 2, 3]])).logits.shape[:2] == (1, 3)


def test_vocab_size_is_exact_even_when_the_corpus_runs_out() -> None:
    tok = build_tokenizer(vocab_size=6000)
    assert len(tok) == 6000
    assert build_tokenizer(vocab_size=MIN_BYTES_VOCAB).get_vocab()["<think>"] < MIN_BYTES_VOCAB


def test_default_tokenizer_dir_is_built_once(tmp_path: Path) -> None:
    first = default_tokenizer_dir(tmp_path)
    assert first == tmp_path / "models" / "scripted"
    stamp = (first / "tokenizer.json").stat().st_mtime_ns
    assert default_tokenizer_dir(tmp_path) == first
    assert (first / "tokenizer.json").stat().st_mtime_ns == stamp
    tok = AutoTokenizer.from_pretrained(first)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template

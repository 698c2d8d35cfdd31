"""The helpers every part uses on model folders: special ids, tied weights, padding, logprobs."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rollout.models import ARCHITECTURES, ModelError, init_model
from rollout.models.hf import (
    TOKENIZER_FILES,
    cache_argument,
    copy_tokenizer_files,
    eos_token_ids,
    missing_weights,
    pad_token_id,
    turn_stop_ids,
)
from rollout.models.logprobs import completion_logprobs, token_logprobs
from rollout.models.padding import left_padded
from rollout.rendering import HFRenderer
from rollout.runs.architectures import ARCH_NAMES
from rollout.runs.config import ModelInit


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("helpers"), hidden=32, layers=2, heads=2, kv_heads=1)


@pytest.fixture(scope="module")
def model(folder: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(folder).eval()


def test_stop_and_eos_ids_come_from_the_folder(folder: Path, model: PreTrainedModel) -> None:
    tok = AutoTokenizer.from_pretrained(folder)
    im_end, endoftext = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    # The template's end of turn first, then the generation config's eos ids, no repeats.
    assert turn_stop_ids(tok, tok.chat_template, folder) == [im_end, endoftext]
    assert turn_stop_ids(tok, tok.chat_template, folder) == HFRenderer(folder).stop_token_ids
    assert turn_stop_ids(tok, "no markup", None) == [im_end]
    assert eos_token_ids(folder, model.config) == [im_end, endoftext]
    assert eos_token_ids(None, model.config) == [im_end]


def test_pad_id_falls_back_to_eos_then_bos_then_zero() -> None:
    assert pad_token_id(SimpleNamespace(pad_token_id=5, eos_token_id=7)) == 5
    assert pad_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=[7, 8])) == 7
    assert pad_token_id(SimpleNamespace(bos_token_id=3)) == 3
    assert pad_token_id(SimpleNamespace()) == 0


def test_a_tied_weight_counts_as_set_by_its_twin(model: PreTrainedModel) -> None:
    state = model.state_dict()
    assert model.config.tie_word_embeddings
    embed, head = "model.embed_tokens.weight", "lm_head.weight"
    assert missing_weights(model, [k for k in state if k != head]) == []
    assert missing_weights(model, [k for k in state if k != embed]) == []
    some_layer = "model.layers.0.mlp.up_proj.weight"
    assert missing_weights(model, [k for k in state if k != some_layer]) == [some_layer]
    assert set(missing_weights(model, [])) >= {some_layer, embed}


def test_the_cache_argument_is_one_the_model_takes(model: PreTrainedModel) -> None:
    assert cache_argument(model) in inspect.signature(model.forward).parameters


def test_tokenizer_files_are_copied_and_existing_ones_kept(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}")
    copied = copy_tokenizer_files(folder, tmp_path)
    assert "tokenizer.json" in copied and "chat_template.jinja" in copied
    assert "tokenizer_config.json" not in copied and "model.safetensors" not in copied
    assert (tmp_path / "tokenizer_config.json").read_text() == "{}"
    assert any(p.match(pattern) for p in tmp_path.iterdir() for pattern in TOKENIZER_FILES)


def test_a_left_padded_row_computes_what_it_would_alone(model: PreTrainedModel) -> None:
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12]]
    batch = left_padded(prompts, pad_id=pad_token_id(model.config))
    with torch.no_grad():
        padded = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
        ).logits[:, -1]
        for row, prompt in enumerate(prompts):
            alone = model(input_ids=torch.tensor([prompt])).logits[0, -1]
            assert torch.allclose(padded[row], alone, atol=1e-5)
    assert batch.next_positions.tolist() == [5, 2, 1]


def test_completion_logprobs_are_the_batched_token_logprobs(model: PreTrainedModel) -> None:
    prompt, completion = [5, 6, 7], [8, 9, 10]
    scored = completion_logprobs(model, prompt, completion, temperature=0.7)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    batched = token_logprobs(logits, ids, torch.tensor([0.7]))[0, len(prompt) :]
    assert scored == pytest.approx(batched.tolist(), abs=1e-6)
    manual = torch.log_softmax(logits[0, len(prompt) - 1 : -1].float() / 0.7, -1)
    assert scored == pytest.approx(
        manual.gather(-1, torch.tensor([completion]).T)[:, 0].tolist(), abs=1e-5
    )
    assert completion_logprobs(model, prompt, [], 1.0) == []


def test_one_list_of_architectures_for_the_builder_the_config_and_the_cli() -> None:
    assert tuple(ARCHITECTURES) == ARCH_NAMES == ("qwen3", "qwen2", "llama")
    for arch in ARCH_NAMES:
        assert ModelInit.model_validate({"arch": arch}).arch == arch
    with pytest.raises(ValidationError, match="arch"):
        ModelInit.model_validate({"arch": "gpt2"})
    with pytest.raises(ModelError, match="arch must be one of"):
        init_model("/nonexistent", arch="gpt2")  # pyright: ignore[reportArgumentType]


def test_the_architecture_list_imports_without_torch() -> None:
    code = (
        "import sys; from rollout.runs.architectures import ARCH_NAMES; "
        "import rollout.runs.config; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

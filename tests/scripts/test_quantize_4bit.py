"""scripts/quantize_4bit.py: minecraft-one-gpu's 4-bit model folder, built from a tiny model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from rollout.contracts import Message
from rollout.models import init_model
from rollout.rendering import HFRenderer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "quantize_4bit.py"


def _module():
    spec = importlib.util.spec_from_file_location("quantize_4bit", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["quantize_4bit"] = module
    spec.loader.exec_module(module)
    return module


def test_a_tiny_model_becomes_a_4bit_folder_that_loads_and_renders_the_same(tmp_path: Path) -> None:
    from bitsandbytes.nn.modules import Linear4bit
    from transformers import AutoModelForCausalLM

    source = init_model(tmp_path / "tiny", hidden=128, layers=2, seed=3)
    out = _module().quantize(source, tmp_path / "tiny-bnb-4bit")

    quantization = json.loads((out / "config.json").read_text())["quantization_config"]
    assert quantization["quant_method"] == "bitsandbytes"
    assert quantization["load_in_4bit"] and quantization["bnb_4bit_quant_type"] == "nf4"
    # The tokenizer and chat template came along: the folder renders as the source does.
    messages = [Message.user("hello")]
    assert HFRenderer(out).render(messages) == HFRenderer(source).render(messages)

    model = AutoModelForCausalLM.from_pretrained(out, device_map="cpu")
    layer = model.model.layers[0]
    assert isinstance(layer.mlp.up_proj, Linear4bit)
    assert isinstance(layer.self_attn.q_proj, Linear4bit)
    assert not isinstance(model.lm_head, Linear4bit)
    # The quantized model computes (nearly) the full-precision one's next-token distribution.
    full = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    ids = torch.tensor([HFRenderer(source).render(messages)])
    with torch.no_grad():
        p = torch.softmax(full(input_ids=ids).logits[0, -1].float(), -1)
        q = torch.softmax(model(input_ids=ids).logits[0, -1].float(), -1)
    assert 0.5 * (p - q).abs().sum() < 0.2  # total variation distance


def test_a_folder_that_is_not_a_model_or_an_output_in_use_is_refused(tmp_path: Path) -> None:
    module = _module()
    with pytest.raises(SystemExit, match="not a Hugging Face model folder"):
        module.quantize(tmp_path, tmp_path / "out")
    source = init_model(tmp_path / "tiny", hidden=64, layers=1)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    with pytest.raises(SystemExit, match="exists and is not empty"):
        module.quantize(source, tmp_path / "used")

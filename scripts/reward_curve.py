"""Draw a run's reward curve as a standalone SVG (no plotting library needed).

Reads the JSON that `rollout runs show RUN --json` prints and writes an SVG with the mean reward
of each train step against the wall-clock seconds since the run was created:

    uv run rollout runs show RUN --json > run.json
    uv run python scripts/reward_curve.py run.json docs/images/reward-curve.svg

The README's picture was drawn this way from a `rollout train parity.environment:environment
--preset cpu-tiny` run.
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 36, 44


def points(detail: dict[str, Any], metric: str = "reward") -> list[tuple[float, float]]:
    """(seconds since the run was created, metric) for every step that recorded `metric`."""
    start = float(detail["created_at"])
    return [
        (float(step["created_at"]) - start, float(step["metrics"][metric]))
        for step in detail["steps"]
        if metric in step["metrics"]
    ]


def _ticks(high: float, count: int = 5) -> list[float]:
    raw = high / count
    for nice in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if nice >= raw:
            return [nice * i for i in range(int(high // nice) + 1)]
    return [0.0, high]


def svg(detail: dict[str, Any], metric: str = "reward") -> str:
    """The SVG document for one run's curve (raises ValueError when no step has `metric`)."""
    data = points(detail, metric)
    if not data:
        raise ValueError(f"run {detail.get('name')!r} has no step with metric {metric!r}")
    span = max(x for x, _ in data) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + plot_w * x / span, TOP + plot_h * (1.0 - y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14">{escape(str(detail.get("environment", "")))}: '
        f"mean {escape(metric)} per train step</text>",
    ]
    for value in (0.0, 0.25, 0.5, 0.75, 1.0):
        _, y = at(0, value)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
    for second in _ticks(span):
        x, _ = at(second, 0)
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{second:g}</text>'
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">'
        "seconds since the run was created</text>"
    )
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(*p) for p in data))
    parts.append(f'<polyline points="{line}" fill="none" stroke="#1f6feb" stroke-width="2"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw a run's reward curve as an SVG.")
    parser.add_argument("run_json", type=Path, help="output of `rollout runs show RUN --json`")
    parser.add_argument("out", type=Path, help="the SVG file to write")
    parser.add_argument("--metric", default="reward", help="step metric to draw (default: reward)")
    args = parser.parse_args(argv)
    try:
        document = svg(json.loads(args.run_json.read_text()), args.metric)
    except (OSError, ValueError, KeyError) as error:
        print(f"reward_curve: {error}", file=sys.stderr)
        return 2
    args.out.write_text(document)
    return 0


if __name__ == "__main__":
    sys.exit(main())

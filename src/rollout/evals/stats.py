"""A score and its 95% confidence interval from per-episode values.

Rewards that are all 0 or 1 (pass/fail) get a Wilson score interval, which stays inside [0, 1]
and is sensible at 0/n and n/n; any other rewards get a Student-t interval around the mean
(the normal quantile beyond 30 degrees of freedom). A single non-binary value has no spread to
estimate: its interval is the value itself (method 'single').

Example:
    >>> e = estimate([1, 1, 0, 1, 0, 1, 1, 1, 0, 1])
    >>> e.method, e.mean, round(e.low, 3), round(e.high, 3)
    ('wilson', 0.7, 0.397, 0.892)
    >>> e = estimate([0.5, 0.7, 0.9])
    >>> e.method, round(e.mean, 3), round(e.low, 3), round(e.high, 3)
    ('t', 0.7, 0.203, 1.197)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rollout.errors import RolloutError

Z95 = 1.959963984540054
"""The two-sided 95% quantile of the standard normal."""

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """A mean over `n` episodes with a 95% interval [low, high], and how it was computed."""

    mean: float
    low: float
    high: float
    n: int
    method: str
    """'wilson' (pass/fail rewards), 't' (any rewards) or 'single' (one non-binary value)."""


def t95(df: int) -> float:
    """The two-sided 95% Student-t quantile for `df` degrees of freedom (normal beyond 30).

    Example:
        >>> t95(1), t95(10), t95(1000) == Z95
        (12.706, 2.228, True)
    """
    if df < 1:
        raise RolloutError(f"degrees of freedom must be >= 1, got {df!r}")
    return _T95[df - 1] if df <= len(_T95) else Z95


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `successes / n`.

    Example:
        >>> [round(x, 3) for x in wilson(0, 10)]
        [0.0, 0.278]
    """
    if n < 1 or not 0 <= successes <= n:
        raise RolloutError(f"wilson needs 0 <= successes <= n and n >= 1, got {successes}/{n}")
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def estimate(values: Sequence[float]) -> Estimate:
    """The mean of `values` with its 95% interval (see the module docstring).

    Raises:
        RolloutError: no values, or a value that is not finite.
    """
    if not values:
        raise RolloutError("cannot score zero episodes")
    numbers = [float(v) for v in values]
    for index, value in enumerate(numbers):
        if not math.isfinite(value):
            raise RolloutError(f"values[{index}] must be finite, got {value!r}")
    n = len(numbers)
    mean = math.fsum(numbers) / n
    if all(v in (0.0, 1.0) for v in numbers):
        low, high = wilson(int(sum(numbers)), n)
        return Estimate(mean, low, high, n, "wilson")
    if n == 1:
        return Estimate(mean, mean, mean, 1, "single")
    variance = math.fsum((v - mean) ** 2 for v in numbers) / (n - 1)
    half = t95(n - 1) * math.sqrt(variance / n)
    return Estimate(mean, mean - half, mean + half, n, "t")

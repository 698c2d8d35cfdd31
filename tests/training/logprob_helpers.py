"""Comparing trainer logprobs with the sampler's, token for token."""

from __future__ import annotations

from collections.abc import Sequence

from rollout.training.segments import Segment


def abs_diffs(segments: Sequence[Segment], logprobs: Sequence[Sequence[float]]) -> list[float]:
    """|trainer - sampler| for every trained (loss-masked) token of every segment."""
    return [
        abs(a - b)
        for seg, lp in zip(segments, logprobs, strict=True)
        for a, b, m in zip(lp, seg.sampler_logprobs, seg.loss_mask, strict=True)
        if m
    ]

"""Training sequences from one seat's recorded turns.

A seat (one agent of one episode attempt) makes a series of model calls. When a call's prompt is
the previous call's prompt followed by its completion (plus whatever came in between: a tool
result, a user message), the two calls are one growing conversation and train as one sequence:
a `Segment`. A call whose prompt does not extend (the agent's context was rewritten, summarised
or truncated) starts a new segment.

Per token, a segment carries:

- `tokens`: exactly the tokens that were fed and sampled (nothing is re-tokenized);
- `loss_mask`: True on sampled (completion) tokens, False on prompt, tool and user tokens;
- `sampler_logprobs`: the sampler's logprob of each sampled token (0.0 where masked), at the
  sampling temperature, for importance weights;
- `versions`: the checkpoint version that sampled each token (-1 where masked), for lag metrics;
- `advantages` (when a seat's turns have different advantages, `rollout.training.advantages`):
  the advantage of each token, its turn's (0.0 where masked); otherwise every trained token
  takes the segment's `advantage`.

>>> from rollout.contracts import Turn
>>> t0 = Turn("ep", 0, 0, 0, (1, 2), (3, 4), (-0.1, -0.2), version=5, stop_reason="stop")
>>> t1 = Turn("ep", 0, 0, 1, (1, 2, 3, 4, 9), (7,), (-0.3,), version=6, stop_reason="stop")
>>> [s.tokens for s in build_segments([t0, t1], advantage=0.5)]
[(1, 2, 3, 4, 9, 7)]
>>> build_segments([t0, t1], advantage=0.5)[0].loss_mask
(False, False, True, True, False, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rollout.contracts import Turn
from rollout.training.errors import TrainingError

UNSAMPLED_VERSION = -1
"""The version recorded for tokens that were not sampled (prompt, tool results)."""


@dataclass(frozen=True)
class Segment:
    """One training sequence: merged turns of one seat, with per-token training data.

    Attributes:
        tokens: Token ids of the whole sequence.
        loss_mask: True where the token was sampled by the policy (it is trained on).
        sampler_logprobs: Sampler logprob of each token at `temperature` (0.0 where masked).
        versions: Checkpoint version that sampled each token (-1 where masked).
        advantage: The advantage of the segment's first turn; of every trained token when
            `advantages` is None.
        temperature: The sampling temperature of the segment's turns; the trainer scores at it.
        episode_id: The episode the turns belong to.
        agent: The seat's agent index.
        turn_indices: The `Turn.index` of each merged turn, in order.
        advantages: Each token's advantage (its turn's; 0.0 where masked), or None: every
            trained token has `advantage`.
    """

    tokens: tuple[int, ...]
    loss_mask: tuple[bool, ...]
    sampler_logprobs: tuple[float, ...]
    versions: tuple[int, ...]
    advantage: float = 0.0
    temperature: float = 1.0
    episode_id: str = ""
    agent: int = 0
    turn_indices: tuple[int, ...] = ()
    advantages: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.tokens)
        names = ("loss_mask", "sampler_logprobs", "versions")
        for name in (*names, "advantages") if self.advantages is not None else names:
            if len(getattr(self, name)) != n:
                raise TrainingError(
                    f"Segment.{name} has {len(getattr(self, name))} entries but tokens has {n}"
                )
        if n and self.loss_mask[0]:
            # The first token has no context, so no logprob: it can never be trained on.
            raise TrainingError("Segment.loss_mask[0] is True: the first token cannot be trained")
        if self.temperature <= 0:
            raise TrainingError(f"Segment.temperature must be > 0, got {self.temperature!r}")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_loss_tokens(self) -> int:
        """How many tokens are trained on."""
        return sum(self.loss_mask)

    def with_advantage(self, advantage: float) -> Segment:
        """A copy whose every trained token has `advantage`."""
        return replace(self, advantage=float(advantage), advantages=None)

    def token_advantages(self) -> tuple[float, ...]:
        """Each token's advantage (0.0 where masked)."""
        if self.advantages is not None:
            return self.advantages
        return tuple(self.advantage if m else 0.0 for m in self.loss_mask)


def mask_after_stop(
    tokens: Sequence[int], loss_mask: Sequence[bool], stop_token_ids: Iterable[int]
) -> tuple[bool, ...]:
    """Mask every trained token that follows a trained stop token in the same run.

    A run is a stretch of consecutive trained tokens (one completion). A sampler that kept going
    after a stop token (a fixed-length batch, a stop token the backend did not stop on) produced
    tokens the policy would never have emitted in a real turn; they must not be trained on.

    >>> mask_after_stop([5, 2, 7, 8], [False, True, True, True], stop_token_ids=[2])
    (False, True, False, False)
    """
    stops = frozenset(stop_token_ids)
    out: list[bool] = []
    stopped = False
    for token, trained in zip(tokens, loss_mask, strict=True):
        if not trained:
            stopped = False
            out.append(False)
            continue
        out.append(not stopped)
        if token in stops:
            stopped = True
    return tuple(out)


def extends(prompt_tokens: Sequence[int], previous: Sequence[int]) -> bool:
    """Whether `prompt_tokens` starts with `previous` (the previous prompt plus completion)."""
    n = len(previous)
    return len(prompt_tokens) >= n and tuple(prompt_tokens[:n]) == tuple(previous)


def build_segments(
    turns: Sequence[Turn],
    advantage: float = 0.0,
    *,
    stop_token_ids: Iterable[int] = (),
    turn_advantages: Sequence[float] | None = None,
) -> list[Segment]:
    """Merge one seat's turns into training segments.

    The token prefix is checked directly (`Turn.extends_previous` is a hint recorded by the
    gateway; the tokens are the truth). Turns at different temperatures never merge, since a
    segment is scored at one temperature.

    Args:
        turns: The seat's turns, ordered by `Turn.index` (one episode, agent and attempt).
        advantage: The seat's advantage, given to every segment.
        stop_token_ids: Trained tokens after a stop token in the same completion are masked.
        turn_advantages: Each turn's advantage, by `Turn.index` (an index past the end takes
            the last one); when they differ, each segment carries them per token.

    Returns:
        The segments in turn order. Turns with no completion tokens still contribute context.

    Raises:
        TrainingError: Turns from different seats, out of order, or with logprobs that do not
            match their completion.
    """
    if not turns:
        return []
    first = turns[0]
    seat = (first.episode_id, first.agent, first.attempt)
    stops = tuple(stop_token_ids)
    segments: list[Segment] = []
    tokens: list[int] = []
    mask: list[bool] = []
    logprobs: list[float] = []
    versions: list[int] = []
    indices: list[int] = []
    token_turns: list[int] = []
    temperature = first.temperature
    previous_index: int | None = None
    per_turn = tuple(turn_advantages) if turn_advantages else None

    def turn_advantage(index: int) -> float:
        if per_turn is None:
            return float(advantage)
        return float(per_turn[min(index, len(per_turn) - 1)])

    def flush() -> None:
        if not tokens:
            return
        final_mask = mask_after_stop(tokens, mask, stops) if stops else tuple(mask)
        token_advantages = None
        if len({turn_advantage(i) for i in indices}) > 1:  # this segment's turns differ
            token_advantages = tuple(
                turn_advantage(t) if m else 0.0
                for t, m in zip(token_turns, final_mask, strict=True)
            )
        segments.append(
            Segment(
                tokens=tuple(tokens),
                loss_mask=final_mask,
                sampler_logprobs=tuple(
                    lp if m else 0.0 for lp, m in zip(logprobs, final_mask, strict=True)
                ),
                versions=tuple(
                    v if m else UNSAMPLED_VERSION for v, m in zip(versions, final_mask, strict=True)
                ),
                advantage=turn_advantage(indices[0]),
                temperature=temperature,
                episode_id=seat[0],
                agent=seat[1],
                turn_indices=tuple(indices),
                advantages=token_advantages,
            )
        )

    for turn in turns:
        if (turn.episode_id, turn.agent, turn.attempt) != seat:
            raise TrainingError(
                f"turn {turn.index} belongs to seat {(turn.episode_id, turn.agent, turn.attempt)}"
                f", not {seat}: build segments one seat at a time"
            )
        if previous_index is not None and turn.index <= previous_index:
            raise TrainingError(
                f"Turn.index {turn.index} follows {previous_index}: turns must be in order"
            )
        previous_index = turn.index
        if len(turn.logprobs) != len(turn.completion_tokens):
            raise TrainingError(
                f"turn {turn.index} has {len(turn.logprobs)} logprobs for "
                f"{len(turn.completion_tokens)} completion tokens"
            )
        if not turn.prompt_tokens:
            raise TrainingError(f"turn {turn.index} has empty prompt_tokens")
        merge = (
            bool(tokens) and turn.temperature == temperature and extends(turn.prompt_tokens, tokens)
        )
        if not merge:
            flush()
            tokens, mask, logprobs, versions, indices, token_turns = [], [], [], [], [], []
            temperature = turn.temperature
        new_prompt = turn.prompt_tokens[len(tokens) :]
        tokens.extend(new_prompt)
        mask.extend([False] * len(new_prompt))
        logprobs.extend([0.0] * len(new_prompt))
        versions.extend([UNSAMPLED_VERSION] * len(new_prompt))
        token_turns.extend([turn.index] * len(new_prompt))
        tokens.extend(turn.completion_tokens)
        mask.extend([True] * len(turn.completion_tokens))
        logprobs.extend(turn.logprobs)
        versions.extend([turn.version] * len(turn.completion_tokens))
        token_turns.extend([turn.index] * len(turn.completion_tokens))
        indices.append(turn.index)
    flush()
    return segments

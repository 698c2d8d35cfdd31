"""The ledger invariants of a run that survived kills (of roles, of Postgres, of whole hosts).

`check_ledger` asserts: checkpoint versions 0..N once each on one parent chain, trainer lease
epochs that never go back (and, after a trainer was killed, a later epoch that carried on),
every consumed group trained once and complete, every seat's end written by its final attempt
(a seat a killed runner held, by a later one), every turn belonging to exactly one attempt, and
a trained seat's turns numbered without a gap. `held_seats` lists the seats a runner held
before it was killed, for that check. A run with several policies is checked per policy (each
policy's versions once on its own parent chain, each group trained once by each policy), and
every turn was sampled by its agent's policy.
"""

from __future__ import annotations

import psycopg


def held_seats(
    url: str, run_id: str, before: float, host: str | None = None
) -> set[tuple[str, int, int]]:
    """Unended seats whose current attempt was claimed before `before` (the dead runner's): by
    a runner on `host` (its id names it), or by any runner."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.episode_id, c.agent, c.attempt FROM seat_claims c JOIN seats s"
            "  ON s.episode_id = c.episode_id AND s.agent = c.agent AND s.attempt = c.attempt"
            " WHERE c.run_id = %s AND NOT s.done AND c.claimed_at < to_timestamp(%s)"
            "   AND (%s::text IS NULL OR c.runner LIKE '%%-' || %s || '-%%')",
            (run_id, before, host, host),
        ).fetchall()
    return {(episode, agent, attempt) for episode, agent, attempt in rows}


def check_ledger(
    url: str,
    run_id: str,
    *,
    steps: int,
    groups: int,
    trainer_killed: bool,
    held: set[tuple[str, int, int]],
    policies: dict[int, str] | None = None,
) -> None:
    """Assert the invariants of a run that finished `steps` steps of `groups` groups each
    whatever was killed on the way (see the module docstring); `held`: seats a killed runner
    held (`held_seats`); `policies`: agent index -> policy, for a run with several."""
    names = sorted(set(policies.values())) if policies else ["main"]
    for policy in names:
        _check_policy(url, run_id, policy, steps=steps, groups=groups, killed=trainer_killed)
    with psycopg.connect(url) as conn:
        if policies:  # every turn was sampled by its agent's policy
            wrong = conn.execute(
                "SELECT agent, policy, count(*) FROM turns WHERE run_id = %s GROUP BY 1, 2",
                (run_id,),
            ).fetchall()
            assert all(policies[agent] == policy for agent, policy, _ in wrong), wrong
        _check_seats(conn, run_id, held)


def _check_policy(
    url: str, run_id: str, policy: str, *, steps: int, groups: int, killed: bool
) -> None:
    """One policy's chain, steps and consumed groups (see the module docstring)."""
    with psycopg.connect(url) as conn:
        chain = conn.execute(
            "SELECT version, parent_version, lease_epoch FROM checkpoints"
            " WHERE run_id = %s AND policy = %s ORDER BY version",
            (run_id, policy),
        ).fetchall()
        # Versions 0..N once each, each the child of the one before: one parent chain.
        assert [v for v, _, _ in chain] == list(range(steps + 1)), chain
        assert [p for _, p, _ in chain] == [None, *range(steps)], chain
        trained = conn.execute(
            "SELECT step, lease_epoch FROM train_steps WHERE run_id = %s AND policy = %s"
            " ORDER BY step",
            (run_id, policy),
        ).fetchall()
        assert [s for s, _ in trained] == list(range(steps + 1)), trained
        # A fenced-out trainer never wrote after its successor: epochs never go back.
        for epochs in ([e for _, e in trained], [e for _, _, e in chain]):
            assert epochs == sorted(epochs), (trained, chain)
        if killed:  # a new trainer (a new lease epoch) carried on after a kill
            assert trained[-1][1] > trained[0][1], trained
        # Each consumed group was trained once, and only complete groups were trained.
        consumed = conn.execute(
            "SELECT count(*), count(DISTINCT group_index) FROM consumed_groups"
            " WHERE run_id = %s AND policy = %s",
            (run_id, policy),
        ).fetchone()
        assert consumed is not None and consumed[0] == consumed[1] == steps * groups, consumed
        unfinished = conn.execute(
            "SELECT count(*) FROM consumed_groups c JOIN episodes e"
            "  ON e.run_id = c.run_id AND e.group_index = c.group_index"
            " JOIN seats s ON s.episode_id = e.episode_id"
            " WHERE c.run_id = %s AND NOT s.done",
            (run_id,),
        ).fetchone()
        assert unfinished == (0,)


def _check_seats(conn: psycopg.Connection, run_id: str, held: set[tuple[str, int, int]]) -> None:
    """Seat ends, attempts and turn numbering (see the module docstring)."""
    # Every seat's end was written by its final attempt.
    stale_ends = conn.execute(
        "SELECT s.episode_id, s.agent, s.attempt, e.attempt FROM seats s JOIN seat_ends e"
        "  ON e.episode_id = s.episode_id AND e.agent = s.agent"
        " WHERE s.run_id = %s AND s.attempt <> e.attempt",
        (run_id,),
    ).fetchall()
    assert not stale_ends, stale_ends
    # A seat a killed runner held was ended, if at all, by a later attempt.
    ends = dict(
        ((episode, agent), attempt)
        for episode, agent, attempt in conn.execute(
            "SELECT episode_id, agent, attempt FROM seat_ends WHERE run_id = %s", (run_id,)
        )
    )
    replayed = {(e, a): ends[e, a] for e, a, _ in held if (e, a) in ends}
    assert all(ends[e, a] > attempt for e, a, attempt in held if (e, a) in ends), replayed
    # Every recorded turn belongs to exactly one attempt (a claim of its seat).
    orphans = conn.execute(
        "SELECT t.episode_id, t.agent, t.attempt, t.turn_index, count(c.attempt)"
        " FROM turns t LEFT JOIN seat_claims c ON c.episode_id = t.episode_id"
        "  AND c.agent = t.agent AND c.attempt = t.attempt"
        " WHERE t.run_id = %s GROUP BY 1, 2, 3, 4 HAVING count(c.attempt) <> 1",
        (run_id,),
    ).fetchall()
    assert not orphans, orphans
    # A trained seat's turns are its final attempt's, numbered 0..k-1 without a gap.
    gaps = conn.execute(
        "SELECT t.episode_id, t.agent"
        " FROM (SELECT DISTINCT run_id, group_index FROM consumed_groups) g JOIN episodes e"
        "  ON e.run_id = g.run_id AND e.group_index = g.group_index"
        " JOIN seats s ON s.episode_id = e.episode_id"
        " JOIN turns t ON t.episode_id = s.episode_id AND t.agent = s.agent"
        "  AND t.attempt = s.attempt"
        " WHERE g.run_id = %s GROUP BY 1, 2 HAVING max(t.turn_index) + 1 <> count(*)",
        (run_id,),
    ).fetchall()
    assert not gaps, gaps

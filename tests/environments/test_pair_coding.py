"""pair_coding end to end: two runner processes play the two agents of one episode in one real
computer, through a real gateway serving the scripted pair.

Each runner process claims one seat; the first to arrive starts the computer (a sandbox
instance: a real server, every command under bubblewrap) and the other joins the episode's
claim. The coder writes `solution.py`, the tester `test_solution.py`, each in the shared
workspace; both rewards come from running the tests in the computer. The test then reads the
computer itself: both files are there, the tests pass, and after breaking the function the
same reward is 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pair_coding.environment import SOLUTION, TESTS, pair_script, team_reward

from rollout.ledger import EpisodeSpec, Ledger
from rollout.monitor.store import MonitorStore
from rollout.monitor.transcripts import conversation
from rollout.sandboxes.computer import Computer, ComputerPool
from tests.environments.runner_processes import play_in_processes, scripted_gateway, seat_claimers
from tests.sandboxes.computer.machines import require_computers

FUNCTION = {"name": "add", "arguments": "a, b", "does": "returns a + b", "example": [[2, 3], 5]}


@pytest.fixture
async def pair_gateway(ledger: Ledger) -> AsyncIterator[str]:
    async with scripted_gateway(ledger, lambda text: pair_script(text) or "Done.") as url:
        yield url


@pytest.mark.slow
async def test_two_runner_processes_code_in_one_computer(
    ledger: Ledger, database_url: str, pair_gateway: str, tmp_path: Path
) -> None:
    require_computers()
    run = await ledger.create_run("pair", "pair_coding.environment:environment", {})
    [episode] = await ledger.add_episodes(
        run.run_id, [EpisodeSpec(0, 0, {"function": FUNCTION}, seed=3, agents=2)]
    )
    await play_in_processes(database_url, pair_gateway, run.run_id, 2, tmp_path, 300)
    [instance] = await ledger.list_sandboxes(pool="pair-computer")
    try:
        record = await ledger.episode(episode)
        ends = sorted(record.ends, key=lambda end: end.agent)
        assert [end.status for end in ends] == ["completed"] * 2, [e.error for e in ends]
        assert [end.reward for end in ends] == [1.0, 1.0]
        assert all(
            end.metrics["team_finished"] == 2 and end.metrics["commands"] == 1 for end in ends
        )
        claimers = await seat_claimers(database_url, episode)
        assert claimers == {"runner-0", "runner-1"}  # two processes, one computer
        events = [e.event for e in await ledger.sandbox_events(instance.instance_id)]
        assert events == ["started", "claimed", "released"]

        # The monitor's transcript: each tool call with its result, in the turn that ran it.
        store = await MonitorStore.open(database_url)
        try:
            turns = (await conversation(store, episode, 0))["items"]
        finally:
            await store.close()
        ran = [
            (t["reply"]["tool_calls"][0]["name"], [r["text"] for r in t["results"]])
            for t in turns
            if t["reply"] and t["reply"]["tool_calls"]
        ]
        assert ran == [("write_file", [f"wrote {SOLUTION}"]), ("shell", ["exit code 0"])], ran
        assert all(m["role"] != "tool" for t in turns for m in t["messages"])

        # The computer itself: each agent's file, and the reward follows its state.
        async with Computer.of(instance.details) as computer:
            listing = await computer.run("ls *.py")
            assert listing.stdout.split() == [SOLUTION, TESTS], listing.report()
            assert (await team_reward(computer))[0] == 1.0
            # Rewritten with the same size and modification time: a grader that trusted the
            # bytecode the agent's own test run cached would still see `a + b`.
            stamp = (await computer.run(["stat", "-c", "%Y", SOLUTION])).stdout.strip()
            await computer.write(SOLUTION, "def add(a, b):\n    return a - b\n")
            assert (await computer.run(["touch", "-d", f"@{stamp}", SOLUTION])).ok
            reward, tests = await team_reward(computer)
            assert reward == 0.0 and "FAILED" in tests.stderr, tests.report()
    finally:
        await ComputerPool().stop(instance.details)

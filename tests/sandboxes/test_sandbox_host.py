"""`SandboxHost` (`rollout sandboxes serve`): a machine keeps served instances of a pool that
runners on other hosts claim; once an episode used one, or it died, the host replaces it.

Real processes: the instances are `tests.sandboxes.worlds.FolderServer` HTTP servers listening
on the address `ROLLOUT_HOST_ADDRESS` names; the runner's side is a real `SandboxSeats` with a
host name of its own. The instances of a pool on other machines are never signalled from here.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from rollout.ledger import Ledger
from rollout.sandboxes import SandboxHost, SandboxSeats
from rollout.sandboxes.process import port_open, process_alive
from tests.sandboxes.worlds import FolderServer, Seat


async def test_a_served_instance_is_played_from_another_host_then_replaced(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_HOST_ADDRESS", "127.0.0.2")
    pool = FolderServer()
    host = SandboxHost(ledger, pool, count=1, hostname="box")
    try:
        await host.tend()
        [served] = await ledger.list_sandboxes()
        assert served.served and served.host == "box" and served.details["host"] == "127.0.0.2"
        # A runner on host h plays an episode in it (its agents connect to the served address).
        seats = SandboxSeats(ledger, "runner-h", host="h")
        async with seats.hold(pool, Seat()) as details:
            assert details["instance"] == served.instance_id
            assert await port_open(details["host"], details["port"])
        assert seats.started == []  # it started no instance of its own
        await host.tend()  # used: replaced
        [fresh] = await ledger.list_sandboxes()
        assert fresh.instance_id != served.instance_id and fresh.state == "idle"
        assert not process_alive(served.details["pid"])
        # An idle instance that died is replaced too.
        await pool.stop(fresh.details)
        await host.tend()
        [third] = await ledger.list_sandboxes()
        assert third.instance_id not in (served.instance_id, fresh.instance_id)
    finally:
        await host.close()
    assert await ledger.list_sandboxes() == []
    assert not process_alive(third.details["pid"])


async def test_an_instance_of_another_machine_is_never_signalled_from_here() -> None:
    pool = FolderServer()
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "")
    await gone.wait()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        # Its process is judged on its own machine only: from here, the port says it all.
        elsewhere = {"host": "127.0.0.1", "port": port, "pid": gone.pid, "hostname": "elsewhere"}
        assert await pool.health(elsewhere)
        assert not await pool.health({**elsewhere, "hostname": socket.gethostname()})
    # A session of its own, as `ProcessPool` starts its instances (stopped as a group).
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", start_new_session=True
    )
    try:
        await pool.stop({**elsewhere, "pid": child.pid})
        assert child.returncode is None and process_alive(child.pid)  # a pid means nothing there
        await pool.stop({**elsewhere, "pid": child.pid, "hostname": socket.gethostname()})
        await asyncio.wait_for(child.wait(), 10)
    finally:
        if child.returncode is None:
            child.kill()

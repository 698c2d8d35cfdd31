"""`rollout up --role ROLE`: a supervisor starts only the roles it was given, and the servers it
starts listen on this machine's service address, which it records for the other machines.

The roles of one run on several machines, each a supervisor of its own, run end to end in
tests/launch/test_many_hosts.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rollout.launch.local import LocalSupervisor
from rollout.ledger import Ledger
from rollout.net.address import routable_address, service_address
from rollout.runs import live
from rollout.settings import Settings, get_settings
from tests.cli_helpers import rollout
from tests.launch.failed_runs import new_run


async def test_a_supervisor_starts_only_its_roles_on_its_address(
    ledger: Ledger, tmp_path: Path
) -> None:
    run_id = await new_run(ledger, tmp_path, "split")
    # Recorded by a machine that served the run before: this one serves it at its own address.
    await ledger.set_setting(run_id, live.GATEWAY_URL, "http://10.9.9.9:1234")
    settings = dataclasses.replace(
        get_settings(), state_dir=tmp_path / "state", host_address="127.0.0.3"
    )
    supervisor = LocalSupervisor(ledger, settings, roles=frozenset({"inference", "gateway"}))
    try:
        assert await supervisor.reconcile()
        assert set(supervisor.processes) == {"inference-split", "gateway-split"}
        run_settings = await ledger.run_settings(run_id)
        for role in ("inference", "gateway"):
            url = run_settings.url_of(role) or ""
            assert url.startswith("http://127.0.0.3:"), url
            argv = supervisor.processes[f"{role}-split"].argv
            assert argv[3:] == [role, "--run", run_id, "--host", "127.0.0.3", "--port", url[17:]]
    finally:
        supervisor.stop_all(grace=5.0)
    others = LocalSupervisor(ledger, settings, roles=frozenset({"trainer", "bridge", "runner"}))
    try:
        assert await others.reconcile()
        assert set(others.processes) == {"trainer-split", "bridge", "runner-0"}
    finally:
        others.stop_all(grace=5.0)


def test_servers_listen_on_loopback_only_while_every_role_is_on_this_machine() -> None:
    embedded = Settings.from_environ({})
    assert service_address(embedded) == "127.0.0.1"
    socket_url = "postgresql://postgres:@/rollout?host=/tmp/state/postgres"
    assert service_address(Settings.from_environ({"ROLLOUT_DATABASE_URL": socket_url})) == (
        "127.0.0.1"
    )
    # A ledger over TCP: other machines may run roles, so servers listen where they reach.
    remote = Settings.from_environ({"ROLLOUT_DATABASE_URL": "postgresql://u:p@db:5432/r"})
    assert service_address(remote) == routable_address()
    given = {"ROLLOUT_DATABASE_URL": "postgresql://u:p@db:5432/r", "ROLLOUT_HOST_ADDRESS": "::"}
    assert service_address(Settings.from_environ(given)) == "::"


def test_up_refuses_an_unknown_role_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = rollout(capsys, "up", "--role", "runner", "--role", "sandbox")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--role must be one of inference, gateway, trainer, evaluator, runner, bridge" in err
    assert "got 'sandbox'" in err

"""`rollout up --launcher ray`: what it refuses before anything starts.

The launcher's run (a short parity training with every role a Ray actor, spread over a head and
a worker on two hosts, whose trainer actor is SIGKILLed mid-run, restarted by Ray and fenced) is
in tests/launch/test_many_hosts.py. (Learning itself is tested on plain `rollout up` across
hosts, in the same file: the launcher changes where roles run, not what they compute.)
"""

from __future__ import annotations

import pytest

from rollout.launch.ray import RayLauncher, RayLaunchError
from rollout.ledger import Ledger
from rollout.settings import Settings
from tests.cli_helpers import rollout


def test_up_refuses_an_unknown_launcher_and_ray_options_without_ray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = rollout(capsys, "up", "--launcher", "kubernetes")
    assert code == 2 and "--launcher must be local or ray, got 'kubernetes'" in err
    code, _, err = rollout(capsys, "up", "--ray-address", "auto")
    assert code == 2 and "--ray-address needs --launcher ray" in err


async def test_the_launcher_refuses_an_unknown_role(ledger: Ledger) -> None:
    settings = Settings.from_environ({})
    with pytest.raises(RayLaunchError, match="role 'evaluator' is not one of inference"):
        RayLauncher(ledger, settings, roles=frozenset({"trainer", "evaluator"}))

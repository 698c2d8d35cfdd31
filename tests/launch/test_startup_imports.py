"""The gateway and runner roles, and `rollout run` against the scripted model, start without
torch or transformers' model code (seconds of imports)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rollout.models.default_tokenizer import default_tokenizer_dir

# What `rollout gateway` and `rollout runner` import, and what the gateway builds (its renderer).
PROGRAM = """
import json, sys
import rollout.cli
import rollout.launch.roles
from rollout.contracts import Message
from rollout.gateway.admission import LagGate
from rollout.gateway.app import create_app
from rollout.inference.remote import RemoteBackend
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer
from rollout.runners.runner import Runner
import rollout.launch.model_folder  # `rollout train` before it builds a model
import rollout.launch.single  # `rollout run`
from rollout.inference.factory import load_model
import parity.environment

assert HFRenderer(sys.argv[1]).render([Message.user("hi")])
renderer, backend = load_model("scripted")  # what `rollout run` serves by default
assert renderer.render([Message.user("hi")])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
print(json.dumps(heavy))
"""


@pytest.mark.slow  # a fresh interpreter importing the roles: ~5 s on 2 busy cores
def test_gateway_and_runner_import_no_torch_or_transformers() -> None:
    folder = default_tokenizer_dir()
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []

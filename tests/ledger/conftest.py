"""Fixtures for the ledger's tests."""

from __future__ import annotations

import pytest

from rollout.ledger import Ledger, RunRecord


@pytest.fixture
async def run(ledger: Ledger) -> RunRecord:
    return await ledger.create_run("test-run", "environments.arithmetic:env", {"lr": 1e-5})

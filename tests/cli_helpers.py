"""Run the `rollout` command in-process through its real entry point (`rollout.cli.main`)."""

from __future__ import annotations

import sys

import pytest

from rollout.cli import main


def rollout(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `rollout ARGS`; return (exit code, stdout, stderr)."""
    old = sys.argv
    sys.argv = ["rollout", *args]
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err

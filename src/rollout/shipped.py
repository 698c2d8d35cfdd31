"""Data files rollout ships: inside the installed package, or in a source checkout.

The wheel carries the built-in presets as `rollout/presets` and the built-in eval suites as
`rollout/suites` (pyproject.toml's force-include); in a source checkout they are read where they
are kept (`deploy/chart/rollout/files/presets`, `evals/`), so an edit there is seen at once.

Example:
    >>> shipped_dir("suites").name in ("suites", "evals")
    True
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

IN_CHECKOUT = {
    "presets": Path("deploy", "chart", "rollout", "files", "presets"),
    "suites": Path("evals"),
}
"""Where each shipped folder is kept in a checkout, from the repository root."""


def shipped_dir(name: str) -> Path:
    """The folder `name` ("presets" or "suites"): packaged with rollout, or the checkout's."""
    packaged = PACKAGE_DIR / name
    if packaged.is_dir():
        return packaged
    return PACKAGE_DIR.parents[1] / IN_CHECKOUT[name]

"""Releases: one version per package, a CI workflow that runs .ci/run on pushes and pull requests,
and a tag workflow that runs the same checks, then publishes with PyPI Trusted Publishing."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import rolloutlib
import yaml

import rollout

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
CI = ROOT / ".github" / "workflows" / "ci.yml"
PACKAGES = {
    "rollout": (ROOT / "pyproject.toml", "src/rollout/__init__.py", rollout.__version__),
    "rolloutlib": (
        ROOT / "packages" / "rolloutlib" / "pyproject.toml",
        "rolloutlib/__init__.py",
        rolloutlib.__version__,
    ),
}


def test_each_package_defines_its_version_once() -> None:
    for name, (pyproject, init, version) in PACKAGES.items():
        project = tomllib.loads(pyproject.read_text())
        assert "version" not in project["project"], f"{name}: version is also in {pyproject}"
        assert project["project"]["dynamic"] == ["version"]
        assert project["tool"]["hatch"]["version"]["path"] == init
        assert re.fullmatch(r"\d+\.\d+\.\d+", version)
        assert importlib.metadata.version(name) == version


def test_the_release_workflow_publishes_on_a_matching_tag_with_trusted_publishing() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the `on` key as True
    assert set(triggers["push"]["tags"]) == {"v*", "rollout-v*"}
    publish = workflow["jobs"]["publish"]
    assert publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    assert any(
        step.get("uses", "").startswith("pypa/gh-action-pypi-publish") for step in publish["steps"]
    )
    script = "\n".join(step.get("run", "") for step in workflow["jobs"]["build"]["steps"])
    # The tag is compared with the very file hatch reads the version from.
    assert "init=src/rollout/__init__.py" in script
    assert "init=packages/rolloutlib/rolloutlib/__init__.py" in script
    assert "uv build --package" in script
    # rollout's tag also builds the package it depends on; one already published is skipped.
    assert "also=rollout-environments" in script
    (published,) = [s for s in publish["steps"] if "pypi-publish" in s.get("uses", "")]
    assert published["with"]["skip-existing"] is True


def test_ci_runs_the_checks_and_the_release_waits_for_them() -> None:
    ci = yaml.safe_load(CI.read_text())
    triggers = ci[True]
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    assert "workflow_call" in triggers  # the release calls it
    steps = ci["jobs"]["checks"]["steps"]
    assert any(step.get("run") == "bash .ci/run" for step in steps)
    assert ci["jobs"]["checks"]["timeout-minutes"] == 90  # CONTRIBUTING.md's hard limit
    release = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    assert release["checks"]["uses"] == "./.github/workflows/ci.yml"
    assert release["build"]["needs"] == "checks" and release["publish"]["needs"] == "build"

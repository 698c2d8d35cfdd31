"""Render the Helm chart offline and validate what it renders.

- `render(values)` renders `deploy/chart/rollout` with Helm's own Go SDK (PyPI's
  `helm-python-sdk`, no `helm` binary) and returns the Kubernetes objects;
- `validate(obj)` checks a built-in kind against Kubernetes' OpenAPI schemas with
  `kubernetes-validate` in strict mode (unknown fields fail), and a `RayCluster` against
  KubeRay's CRD (schemas/ray.io_rayclusters.yaml) with jsonschema, made strict the same way.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart" / "rollout"
PRESETS = sorted(p.stem for p in (CHART / "files" / "presets").glob("*.yaml"))
RAY_CRD = Path(__file__).resolve().parent / "schemas" / "ray.io_rayclusters.yaml"
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes the chart supports (schemas up to this version)."""

Obj = dict[str, Any]


def render(values: Obj | None = None, chart: Path = CHART) -> list[Obj]:
    """The objects the chart renders for `values` (release `demo` in namespace `ml`)."""
    with helm.Chart.load(str(chart)) as loaded:
        manifests = loaded.render(values or {}, name="demo", namespace="ml")
    objects: list[Obj] = []
    for path, text in sorted(manifests.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def lint(chart: Path = CHART, values: Obj | None = None) -> list[str]:
    """`helm lint`'s errors and warnings (severity >= 2; 1 is informational)."""
    result = helm.lint(str(chart), values or None, strict=True)
    return [
        f"{m.get('path')}: {m.get('error')}"
        for m in result.get("messages", [])
        if int(m.get("severity", 0)) >= 2
    ] + [str(e) for e in result.get("errors", [])]


def copy_chart(destination: Path) -> Path:
    """A copy of the chart to break in a test."""
    target = destination / "rollout"
    shutil.copytree(CHART, target)
    return target


@functools.cache
def _ray_schema() -> Obj:
    crd = yaml.safe_load(RAY_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return _strict(version["schema"]["openAPIV3Schema"])


def _strict(schema: Any) -> Any:
    """Unknown fields fail, as with the API server's strict field validation: every object
    schema that lists its properties gets `additionalProperties: false`."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def validate(obj: Obj) -> None:
    """Raise when `obj` is not a valid object of its kind (unknown fields included)."""
    if obj.get("kind") == "RayCluster":
        assert obj["apiVersion"] == "ray.io/v1", obj["apiVersion"]
        jsonschema.Draft4Validator(_ray_schema()).validate(obj)
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """Every pod spec in the objects, named `Kind/name[/group]`."""
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield name, spec["template"]
        elif obj["kind"] == "RayCluster":
            yield f"{name}/head", spec["headGroupSpec"]["template"]
            for group in spec.get("workerGroupSpecs", []):
                yield f"{name}/{group['groupName']}", group["template"]


def find(objects: list[Obj], kind: str, suffix: str) -> Obj:
    """The one object of `kind` whose name ends with `suffix`."""
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, (kind, suffix, [o["metadata"]["name"] for o in objects])
    return found[0]

"""The Helm chart renders valid Kubernetes objects for its default values, for each preset and
with every optional part on; a broken template fails these checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import typer
import yaml

from rollout.cli import app
from tests.deploy.chart import (
    CHART,
    PRESETS,
    Obj,
    copy_chart,
    find,
    lint,
    pod_specs,
    render,
    validate,
)

EVERYTHING: Obj = {
    "evaluator": {"enabled": True},
    "monitor": {"enabled": True, "token": "s3cret"},
    "postgres": {"enabled": False},
    "externalDatabase": {"existingSecret": "ledger-url", "key": "url"},
    "blobs": {
        "url": "s3://checkpoints/rollout",
        "endpoint": "http://minio.storage:9000",
        "region": "us-east-1",
        "credentialsSecret": "s3-credentials",
    },
    "ray": {"workers": {"nodeSelector": {"gpu": "true"}, "tolerations": [{"key": "gpu"}]}},
}
CASES: dict[str, Obj] = {
    "defaults": {},
    **{f"preset-{name}": {"preset": name} for name in PRESETS},
    "everything": EVERYTHING,
}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def rendered(request: pytest.FixtureRequest) -> list[Obj]:
    return render(CASES[request.param])


def test_chart_lints_clean() -> None:
    assert lint() == []
    assert lint(values=EVERYTHING) == []


def test_every_object_is_valid_for_its_schema(rendered: list[Obj]) -> None:
    assert rendered
    for obj in rendered:
        validate(obj)


def test_every_container_has_probes_and_resource_requests(rendered: list[Obj]) -> None:
    for name, template in pod_specs(rendered):
        spec = template["spec"]
        for container in spec["containers"]:
            where = f"{name}: container {container['name']}"
            assert container.get("readinessProbe") and container.get("livenessProbe"), where
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), where
        for container in spec.get("initContainers", []):
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name


def test_pods_run_as_a_non_root_user(rendered: list[Obj]) -> None:
    for name, template in pod_specs(rendered):
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, name


def _rollout_argv(container: Obj) -> list[str] | None:
    """The `rollout` arguments a container runs (the image's entrypoint is `rollout`)."""
    if container.get("command"):
        return None  # a shell or another program (Postgres, the init wait loop)
    return [
        str(a).replace("$(POD_IP)", "10.0.0.7").replace("$(MONITOR_TOKEN)", "t")
        for a in container.get("args", [])
    ]


def _parse(argv: list[str]) -> None:
    """Parse `rollout ARGV` with the real CLI (types, required options), without running it."""
    command: Any = typer.main.get_command(app)
    context = command.make_context("rollout", list(argv))
    while hasattr(command, "resolve_command"):  # a group: descend into its subcommand
        name, command, rest = command.resolve_command(
            context, [*getattr(context, "_protected_args", []), *context.args]
        )
        assert command is not None, argv
        context = command.make_context(str(name), rest, parent=context)


def test_roles_run_real_cli_commands(rendered: list[Obj]) -> None:
    seen = set()
    for _name, template in pod_specs(rendered):
        for container in template["spec"]["containers"]:
            argv = _rollout_argv(container)
            if argv is None or not argv:
                continue  # the Ray images run KubeRay's `ray start`
            seen.add(argv[0])
            _parse(argv)
    assert {"gateway", "runner", "bridge", "up", "preset"} <= seen


def test_gpu_requests_follow_the_preset() -> None:
    for name in PRESETS:
        preset = yaml.safe_load((CHART / "files" / "presets" / f"{name}.yaml").read_text())
        cluster = find(render({"preset": name}), "RayCluster", "rollout")
        worker = cluster["spec"]["workerGroupSpecs"][0]
        resources = worker["template"]["spec"]["containers"][0]["resources"]
        role_gpus = preset.get("gpus")
        if role_gpus is None:
            role_gpus = 1 if str(preset.get("device", "cpu")).startswith("cuda") else 0
        whole = -(-int(role_gpus * 2 * 100) // 100)  # trainer and inference, rounded up
        assert worker["rayStartParams"]["num-gpus"] == str(whole), name
        assert resources["limits"].get("nvidia.com/gpu") == (whole or None), name
        assert cluster["metadata"]["annotations"]["rollout/role-gpus"] == str(role_gpus), name


def test_a_gpu_preset_requests_gpus() -> None:
    assert "gpu-tiny" in PRESETS
    cluster = find(render({"preset": "gpu-tiny"}), "RayCluster", "rollout")
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_presets_are_shipped_and_loaded_by_a_job() -> None:
    objects = render()
    config = find(objects, "ConfigMap", "-presets")
    assert sorted(config["data"]) == [f"{name}.yaml" for name in PRESETS]
    for name in PRESETS:
        assert (
            config["data"][f"{name}.yaml"]
            == (CHART / "files" / "presets" / f"{name}.yaml").read_text()
        )
    job = find(objects, "Job", "-presets-1")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["preset", "load", "/presets", "--cluster"]
    assert {"name": "presets", "mountPath": "/presets", "readOnly": True} in container[
        "volumeMounts"
    ]


def test_optional_roles_render_only_when_enabled() -> None:
    names = {o["metadata"]["name"] for o in render() if o["kind"] == "Deployment"}
    assert names == {f"demo-rollout-{r}" for r in ("gateway", "runner", "bridge", "launcher")}
    names = {o["metadata"]["name"] for o in render(EVERYTHING) if o["kind"] == "Deployment"}
    assert {"demo-rollout-evaluator", "demo-rollout-monitor"} <= names


def test_external_database_and_s3_blobs() -> None:
    objects = render(EVERYTHING)
    assert not [o for o in objects if o["kind"] == "StatefulSet"]
    runner = find(objects, "Deployment", "-runner")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in runner["env"]}
    assert env["ROLLOUT_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "ledger-url",
        "key": "url",
    }
    assert env["ROLLOUT_BLOB_URL"]["value"] == "s3://checkpoints/rollout"
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3-credentials"
    info = find(objects, "ConfigMap", "-cluster")["data"]
    assert info["databaseSecret"] == "ledger-url" and info["postgresService"] == ""


def test_only_gateway_and_monitor_accept_traffic_from_outside() -> None:
    objects = render(EVERYTHING)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    release = {"app.kubernetes.io/name": "rollout", "app.kubernetes.io/instance": "demo"}
    internal = find(objects, "NetworkPolicy", "-internal")["spec"]
    assert internal["podSelector"]["matchLabels"] == release
    assert internal["ingress"] == [{"from": [{"podSelector": {"matchLabels": release}}]}]
    open_to = {}
    for policy in policies:
        selector = policy["spec"]["podSelector"]["matchLabels"]
        for rule in policy["spec"]["ingress"]:
            if "from" not in rule:  # from anywhere
                open_to[selector["app.kubernetes.io/component"]] = rule["ports"][0]["port"]
    assert open_to == {"gateway": 8000, "monitor": 8080}
    # Every pod carries the release's labels, so the internal policy covers it.
    for name, template in pod_specs(objects):
        assert release.items() <= template["metadata"]["labels"].items(), name


def test_a_missing_preset_fails_the_render() -> None:
    with pytest.raises(helm.HelmError, match=r"no files/presets/nope\.yaml"):
        render({"preset": "nope"})


def _break(chart: Path, template: str, old: str, new: str) -> None:
    path = chart / "templates" / template
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


VALIDATION = kubernetes_validate.ValidationError
BROKEN = {
    # An unknown field in a Deployment's pod spec (a typo of `containers`).
    "unknown-field": ("_role.tpl", "      containers:\n", "      container:\n", VALIDATION),
    # A field of the wrong type in a Service.
    "wrong-type": ("_role.tpl", "      port: {{ .port }}", "      port: [{{ .port }}]", VALIDATION),
    # An unknown field in the RayCluster.
    "raycluster-unknown-field": (
        "raycluster.yaml",
        "  rayVersion:",
        "  rayVersoin:",
        jsonschema.ValidationError,
    ),
    # A template that does not parse.
    "template-syntax": ("roles.yaml", "evaluator.enabled }}", "evaluator.enabled", helm.HelmError),
}


@pytest.mark.parametrize(("template", "old", "new", "error"), BROKEN.values(), ids=list(BROKEN))
def test_a_broken_template_fails(
    tmp_path: Path, template: str, old: str, new: str, error: type[Exception]
) -> None:
    chart = copy_chart(tmp_path)
    _break(chart, template, old, new)
    with pytest.raises(error):
        for obj in render(chart=chart):
            validate(obj)


def test_lint_reports_a_broken_chart(tmp_path: Path) -> None:
    chart = copy_chart(tmp_path)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: rollout\n")  # no version
    assert lint(chart)

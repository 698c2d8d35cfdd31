"""`--cluster`: the ledger of the rollout release in the cluster of the current kube context.

The Helm chart writes a ConfigMap labelled `app.kubernetes.io/component=cluster-info` naming the
Secret that holds its database URL and, for the bundled Postgres, its Service. From outside the
cluster, `cluster_ledger()` reads both with `kubectl` (current context and namespace), opens a
`kubectl port-forward` to the bundled Postgres on a free local port and yields the URL rewritten
to it; an external database's URL is used as it is. Inside a pod of the release (the presets
Job), the pod's own `ROLLOUT_DATABASE_URL` is the cluster's ledger.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from rollout.errors import RolloutError
from rollout.net.server import free_port
from rollout.settings import get_settings

CLUSTER_INFO_SELECTOR = "app.kubernetes.io/component=cluster-info"


class ClusterError(RolloutError):
    """The cluster's ledger cannot be reached (no kubectl, no release, a failed port-forward)."""


def _kubectl(kubectl: str, *args: str) -> str:
    result = subprocess.run(
        [kubectl, *args], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"kubectl {' '.join(args)} failed: {detail[-1] if detail else '?'}")
    return result.stdout


def _in_cluster() -> str | None:
    url = get_settings().database_url
    return url if os.environ.get("KUBERNETES_SERVICE_HOST") and url else None


@contextmanager
def cluster_ledger() -> Iterator[str]:
    """The database URL of the cluster's ledger, reachable from here while the block runs.

    Raises:
        ClusterError: one line saying what is missing (kubectl, a release, the port-forward).
    """
    inside = _in_cluster()
    if inside is not None:
        yield inside
        return
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ClusterError(
            "--cluster needs kubectl on PATH with a kube context for the cluster (or run the "
            "command in a pod of the release); kubectl was not found"
        )
    found = json.loads(
        _kubectl(kubectl, "get", "configmap", "-l", CLUSTER_INFO_SELECTOR, "-o", "json")
    )
    items = found.get("items") or []
    if not items:
        raise ClusterError(
            "no rollout release in the current namespace of the kube context "
            "(no ConfigMap labelled " + CLUSTER_INFO_SELECTOR + "); install deploy/chart/rollout"
        )
    info = items[0].get("data") or {}
    encoded = _kubectl(
        kubectl,
        "get",
        "secret",
        info["databaseSecret"],
        "-o",
        "jsonpath={.data." + info["databaseKey"].replace(".", "\\.") + "}",
    )
    url = base64.b64decode(encoded.strip()).decode()
    service = info.get("postgresService") or ""
    if not service:
        yield url  # an external database: reachable as it is
        return
    port = free_port()
    forward = subprocess.Popen(
        [kubectl, "port-forward", f"svc/{service}", f"{port}:5432"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_port(port, forward)
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
        yield urlunsplit(parts._replace(netloc=netloc))
    finally:
        forward.terminate()
        try:
            forward.wait(10)
        except subprocess.TimeoutExpired:
            forward.kill()


def _wait_for_port(port: int, forward: subprocess.Popen[str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if forward.poll() is not None:
            error = (forward.stderr.read() if forward.stderr else "").strip().splitlines()
            raise ClusterError(f"kubectl port-forward failed: {error[-1] if error else '?'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise ClusterError(f"kubectl port-forward did not open port {port} within {timeout:.0f} s")

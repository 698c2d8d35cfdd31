"""A stand-in for kubectl, for the tests of `--cluster` (no Kubernetes cluster runs here).

`fake_kubectl(folder, url)` writes a `kubectl` into `folder` (put it first on PATH) that
answers the two reads `--cluster` makes from a release's objects (its `cluster-info` ConfigMap
and its database Secret, holding the in-cluster URL of the database at `url`) and serves
`kubectl port-forward svc/...` with a TCP relay to that database: the commands under test run
their real `rollout.launch.cluster` code against a real Postgres.
"""

from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FAKE_KUBECTL = textwrap.dedent(
    """\
    #!{python}
    import asyncio, base64, json, sys
    args = sys.argv[1:]
    if args[:2] == ["get", "configmap"]:
        data = {{"databaseSecret": "demo-rollout-ledger", "databaseKey": "database-url",
                 "postgresService": "demo-rollout-postgres"}}
        print(json.dumps({{"items": [{{"data": data}}]}}))
    elif args[:3] == ["get", "secret", "demo-rollout-ledger"]:
        print(base64.b64encode({url!r}.encode()).decode())
    elif args[0] == "port-forward" and args[1] == "svc/demo-rollout-postgres":
        local = int(args[2].split(":")[0])
        async def pipe(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()
        async def relay(reader, writer):
            if {host!r}.startswith("/"):  # a Unix socket folder, as the embedded Postgres listens
                up = await asyncio.open_unix_connection({host!r} + "/.s.PGSQL.5432")
            else:
                up = await asyncio.open_connection({host!r}, {port})
            up_reader, up_writer = up
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        async def main():
            server = await asyncio.start_server(relay, "127.0.0.1", local)
            await server.serve_forever()
        asyncio.run(main())
    else:
        sys.exit("unexpected kubectl " + " ".join(args))
    """
)


def fake_kubectl(folder: Path, url: str) -> Path:
    """Write the fake `kubectl` for the database at `url` into `folder`; returns `folder`."""
    parts = urlsplit(url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    host, port = (socket_dir, 0) if socket_dir.startswith("/") else (parts.hostname, parts.port)
    # The release's secret holds the in-cluster URL: only the port-forward makes it reachable.
    credentials = parts.netloc.rpartition("@")[0]
    in_cluster = f"postgresql://{credentials}@demo-rollout-postgres:5432{parts.path}"
    folder.mkdir(parents=True, exist_ok=True)
    kubectl = folder / "kubectl"
    kubectl.write_text(
        FAKE_KUBECTL.format(python=sys.executable, url=in_cluster, host=host, port=port or 5432)
    )
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    return folder

"""A run spread over hosts: every role on a network stack of its own, reaching the others by TCP.

The hosts are network namespaces on one bridge (`tests.hosts`), made once for the module and
removed afterwards, even when a test fails. PostgreSQL runs on `db` (reached by
`ROLLOUT_DATABASE_URL`, nothing embedded), SeaweedFS serves S3 on `blobs` (`ROLLOUT_BLOB_URL`
is `s3://...`: every checkpoint goes through it), and each other host runs `rollout up --role
...` with those two URLs and a state folder of its own, as docs/deploy.md's "Several machines"
recipe says: the trainer and the bridge on `trainer`, the inference server and the gateway on
`inference`, runners on `runner1` and `runner2`.

- The README's parity run reaches the preset's target this way, and every checkpoint the
  inference host loaded came from the S3 store.
- Host loss: mid-run, every process of `runner2` is SIGKILLed (its claims expire and its seats
  are played again by `runner1`), then every process of `trainer` (its lease expires and a
  trainer started there again takes over). The run finishes and the chaos test's ledger
  invariants hold (`tests.launch.run_invariants`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest

from tests.environments.minecraft_world import check_built
from tests.hosts import (
    Host,
    Network,
    PostgresServer,
    S3Server,
    network_unavailable,
    postgres_server,
    seaweedfs,
    shared_folder,
)
from tests.launch.off_policy import (
    STEP_BUDGET,
    check_off_policy,
    collapsed,
    collapsed_so_far,
    reward_curve,
)
from tests.launch.run_invariants import check_ledger, held_seats

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable())),
]

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "rollout"
SEED = 7
PARITY = "parity.environment:environment"
ROLES = {
    "trainer": ("trainer", "bridge"),
    "inference": ("inference", "gateway"),
    "runner1": ("runner",),
    "runner2": ("runner",),
}
"""Each role host and the roles its `rollout up --role ...` starts."""
LAST_STEP = "SELECT coalesce(max(step), 0) FROM train_steps WHERE run_id = %s"


@dataclass
class Cluster:
    network: Network
    postgres: PostgresServer
    s3: S3Server
    database_url: str
    blob_url: str

    def env(self, host: Host) -> dict[str, str]:
        """The environment of a process on `host`: the shared database and blob URLs, the S3
        credentials, and a state folder of the host's own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUT_")}
        env.update(self.s3.environ)
        env.update(
            ROLLOUT_DATABASE_URL=self.database_url,
            ROLLOUT_BLOB_URL=self.blob_url,
            ROLLOUT_STATE_DIR=str(host.state_dir),
            PYTHONUNBUFFERED="1",
        )
        return env

    def rollout(self, host: Host, *args: str, timeout: float = 300) -> str:
        """Run `rollout ARGS` on `host` to its end; its stdout (it must succeed)."""
        result = host.run(
            [sys.executable, "-m", "rollout.cli", *args], env=self.env(host), timeout=timeout
        )
        assert result.returncode == 0, f"rollout {' '.join(args)}: {result.stderr[-3000:]}"
        return result.stdout

    def up(self, name: str, run: str) -> subprocess.Popen[bytes]:
        """`rollout up --role ... --run RUN --until-finished` on host `name`."""
        host = self.network.host(name)
        roles = [arg for role in ROLES[name] for arg in ("--role", role)]
        return host.popen(
            [sys.executable, "-m", "rollout.cli", "up", *roles, "--run", run, "--until-finished"],
            env=self.env(host),
            log=host.root / f"up-{run}.log",
        )

    @contextlib.contextmanager
    def running(self, run: str) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
        """`rollout up` for `run` on every role host (`ROLES`), by host name; on a failure the
        logs are printed; afterwards whatever is left on those hosts is stopped."""
        try:
            yield {name: self.up(name, run) for name in ROLES}
        except BaseException:
            self.explain()
            raise
        finally:
            for name in ROLES:
                self.network.host(name).stop(grace=10)

    def query(self, sql: LiteralString, *params: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(sql, params).fetchall()

    def explain(self) -> None:
        """Print the end of every log of every host (the folders are removed afterwards)."""
        for host in self.network.hosts.values():
            for log in sorted(host.root.rglob("*.log")):
                lines = log.read_text(errors="replace").splitlines()
                print(f"--- {host.name}: {log.relative_to(host.root)} (last 30 of {len(lines)})")
                print("\n".join(lines[-30:]))


@pytest.fixture(scope="module")
def cluster(pg_server_url: str) -> Iterator[Cluster]:
    """Postgres on `db`, SeaweedFS on `blobs`, the role hosts made (nothing running on them).
    `pg_server_url`: the session's embedded Postgres has made its system user (as root)."""
    del pg_server_url
    root = shared_folder("rollout-test-hosts-")
    network = Network(root)
    try:
        postgres = postgres_server(network.host("db"), root / "db-data")
        s3 = seaweedfs(network.host("blobs"), root / "blobs-data")
        s3.make_bucket(BUCKET)
        with psycopg.connect(postgres.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE rollout")
        for name in ROLES:
            network.host(name)
        yield Cluster(
            network, postgres, s3, postgres.database_url("rollout"), f"s3://{BUCKET}/rollout"
        )
    finally:
        network.close()
        shutil.rmtree(root, ignore_errors=True)


def _create(cluster: Cluster, name: str, *options: str) -> str:
    """`rollout train --create-only` on the trainer host (it builds the model folder there, on
    the filesystem every host shares); the run's id."""
    import json

    out = cluster.rollout(
        cluster.network.host("trainer"),
        "train", PARITY, "--preset", "cpu-tiny", "--name", name, "--create-only", "--json",
        *options,
    )  # fmt: skip
    return json.loads(out)["run_id"]


def _wait_for(
    cluster: Cluster,
    what: str,
    done: object,
    ups: dict[str, subprocess.Popen[bytes]],
    timeout: float,
    poll: float = 0.5,
) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        for name, process in ups.items():
            code = process.poll()
            assert code in (None, 0), f"rollout up on {name} exited {code} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(poll)


def _finished(cluster: Cluster, run_id: str) -> bool:
    rows = cluster.query(
        "SELECT value FROM current_settings WHERE run_id = %s AND key = 'finished'", run_id
    )
    return bool(rows) and rows[0][0] is True


def _stop(ups: dict[str, subprocess.Popen[bytes]], timeout: float = 60) -> dict[str, int]:
    """Each `rollout up`'s exit code (it exits by itself once its run finished)."""
    codes = {}
    for name, process in ups.items():
        try:
            codes[name] = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            codes[name] = process.wait()
    return codes


def _machines(cluster: Cluster) -> list[dict[str, object]]:
    """The monitor's machines page (its JSON), read from the cluster's ledger."""
    from rollout.monitor.store import MonitorStore

    async def read() -> list[dict[str, object]]:
        store = await MonitorStore.open(cluster.database_url, max_size=1)
        try:
            return (await store.machines())["items"]
        finally:
            await store.close()

    return asyncio.run(read())


def _train_spread(
    cluster: Cluster, name: str, *options: str
) -> tuple[str, list[float], list[bool]]:
    """Train the parity run `name` across the hosts to its end: its id, each RL step's reward and
    whether it trained nothing (`optim/skipped`), in step order."""
    run_id = _create(cluster, name, "--steps", str(STEP_BUDGET), *options)
    with cluster.running(name) as ups:
        _wait_for(
            cluster,
            "finished or collapsed run",
            lambda: _finished(cluster, run_id) or collapsed_so_far(cluster.database_url, name),
            ups,
            timeout=900,
        )
        if not _finished(cluster, run_id):  # the recipe's known collapse: stopped there
            cluster.rollout(cluster.network.host("trainer"), "runs", "stop", name)
        codes = _stop(ups)
    assert codes == dict.fromkeys(ROLES, 0), codes
    rows = cluster.query(
        "SELECT (metrics->>'reward')::float8,"
        " coalesce((metrics->>'optim/skipped')::float8, 0) >= 1"
        " FROM train_steps WHERE run_id = %s AND step > 0 ORDER BY step",
        run_id,
    )
    return run_id, [float(reward) for reward, _ in rows], [bool(skip) for _, skip in rows]


@pytest.mark.timeout(2100)
def test_the_parity_run_reaches_its_target_across_hosts(cluster: Cluster) -> None:
    run_id, rewards, skipped = _train_spread(cluster, "spread")
    if sum(rewards[-3:]) / 3 < 0.9 and collapsed(skipped):
        # The recipe's known collapse (`collapsed`), a draw of the run: once more, another seed.
        print(f"seed 0 collapsed ({reward_curve(rewards)}); training seed 1")
        run_id, rewards, skipped = _train_spread(cluster, "spread-seed1", "--set", "seed=1")
    # The preset's target: the mean reward of the last three steps, before the step budget.
    assert 3 <= len(rewards) < STEP_BUDGET, reward_curve(rewards)
    assert sum(rewards[-3:]) / 3 >= 0.9, reward_curve(rewards)
    # Asynchronous, as on one machine: episodes played while the trainer stepped, some turns
    # were trained off-policy, none began beyond the preset's max_lag (1).
    check_off_policy(cluster.database_url, run_id, steps=len(rewards), max_lag=1)
    # The machines page shows every role on its own host, the run's as finished; the servers
    # advertised addresses that the other hosts reach.
    machines = [m for m in _machines(cluster) if m["run_id"] in (run_id, None)]
    where = {(m["role"], m["host"]) for m in machines}
    for host, roles in ROLES.items():
        assert {(role, host) for role in (*roles, "supervisor")} <= where, where
    assert {m["state"] for m in machines if m["run_id"] == run_id} == {"finished"}, machines
    inference = cluster.network.host("inference").address
    settings = dict(
        cluster.query(
            "SELECT key, value #>> '{}' FROM current_settings WHERE run_id = %s"
            " AND key IN ('inference_url', 'gateway_url')",
            run_id,
        )
    )
    assert all(url.startswith(f"http://{inference}:") for url in settings.values()), settings
    # Every checkpoint the inference host loaded came from the S3 store (no host has a blob
    # folder of its own); the newest is still there (retention deleted the older ones' files).
    loaded = cluster.query(
        "SELECT DISTINCT a.version, s.uris->>'local' FROM serving_acks a JOIN serving s"
        " ON s.run_id = a.run_id AND s.version = a.version"
        " WHERE a.run_id = %s AND a.server LIKE %s ORDER BY 1",
        run_id,
        f"http://{inference}:%",
    )
    assert loaded and loaded[0][0] == 0 and len(loaded) >= 2, loaded
    s3 = cluster.s3.filesystem()
    keys = [key for _, key in loaded]  # keys of the store that ROLLOUT_BLOB_URL names
    assert not [key for key in keys if key.startswith(("/", "file:"))], keys
    assert s3.exists(f"{cluster.blob_url.removeprefix('s3://')}/{keys[-1]}/.rollout-complete")
    assert not [h.name for h in cluster.network.hosts.values() if (h.state_dir / "blobs").exists()]


STEPS = 6
GROUPS = 2


@pytest.mark.timeout(900)
def test_a_lost_runner_host_then_a_lost_trainer_host_lose_nothing(cluster: Cluster) -> None:
    run_id = _create(
        cluster, "lossy", "--steps", str(STEPS), "--set", "stop_at_reward=2",
        "--set", "warmup_steps=2", "--set", f"groups_per_step={GROUPS}",
        "--set", "runner_concurrency=4",  # each runner host plays some seats of every step
    )  # fmt: skip
    runner2, trainer = cluster.network.host("runner2"), cluster.network.host("trainer")

    def step() -> int:
        return int(cluster.query(LAST_STEP, run_id)[0][0])

    with cluster.running("lossy") as ups:
        _wait_for(cluster, "step 1", lambda: step() >= 1, ups, timeout=600)

        # Lose the host while it plays: a seat takes well under a second here and the runners
        # idle between steps at the lag gate, so look for a moment when it holds some every
        # 50 ms (every 0.5 s, CI twice saw none within 300 s), and stop looking if the run ends.
        def runner2_plays() -> bool:
            assert step() < STEPS, "the run ended before the runner2 host was seen holding a seat"
            return bool(held_seats(cluster.database_url, run_id, time.time(), host="runner2"))

        _wait_for(cluster, "a seat held on the runner2 host", runner2_plays, ups, timeout=300,
                  poll=0.05)  # fmt: skip
        before = time.time()
        assert runner2.kill_all()  # the host is lost: its runners, its supervisor
        ups.pop("runner2")
        held = held_seats(cluster.database_url, run_id, before, host="runner2")
        assert held, "the lost runner host held no seat"
        lost_at = step()
        _wait_for(cluster, "a step after the runner host's loss", lambda: step() > lost_at,
                  ups, timeout=300)  # fmt: skip
        assert step() < STEPS, "the run ended before its trainer's host could be lost"
        assert trainer.kill_all()
        ups["trainer"] = cluster.up("trainer", "lossy")  # the machine comes back
        _wait_for(cluster, "finished run", lambda: _finished(cluster, run_id), ups, timeout=600)
        codes = _stop(ups)
    assert codes == dict.fromkeys(("trainer", "inference", "runner1"), 0), codes
    check_ledger(
        cluster.database_url, run_id, steps=STEPS, groups=GROUPS, trainer_killed=True, held=held
    )


PLAYERS = ("runner1", "runner2", "runner3", "runner4")
"""The hosts whose runners play the four agents of one minecraft_team episode."""
MINECRAFT_PACKAGES = ROOT / "environments" / "minecraft_team" / "node_modules" / "flying-squid"
# A runner process that plays one seat of the run and exits.
ONE_SEAT = """
import asyncio, sys
from rollout.ledger import Ledger
from rollout.runners.runner import Runner, default_runner_id

async def main():
    ledger = await Ledger.connect(sys.argv[1], migrate=False)
    runner = Runner(ledger, sys.argv[2], runner_id=default_runner_id(), run_id=sys.argv[3],
                    concurrency=1, lease_seconds=30.0, idle_wait=0.2)
    await runner.run(asyncio.Event(), max_seats=1)

asyncio.run(main())
"""


@pytest.mark.skipif(
    shutil.which("node") is None or not MINECRAFT_PACKAGES.is_dir(),
    reason="needs node and `npm ci` in environments/minecraft_team (.ci/run does it)",
)
@pytest.mark.timeout(600)
async def test_four_agents_on_four_hosts_build_in_one_world_on_a_fifth(cluster: Cluster) -> None:
    from minecraft_team.environment import builder_script

    from rollout.gateway.app import create_app
    from rollout.inference.scripted import ScriptedBackend
    from rollout.ledger import EpisodeSpec, Ledger
    from rollout.models import default_tokenizer_dir
    from rollout.net.server import AppServer
    from rollout.rendering import HFRenderer

    world = cluster.network.host("world")
    serve = world.popen(
        [sys.executable, "-m", "rollout.cli", "sandboxes", "serve",
         "minecraft_team.environment:environment"],
        env=cluster.env(world), log=world.root / "sandboxes-serve.log",
    )  # fmt: skip
    ledger = await Ledger.connect(cluster.database_url, migrate=False)
    folder = default_tokenizer_dir()
    # The scripted builder behind a real gateway, on the test's own address on the bridge.
    builder = ScriptedBackend.from_model_dir(folder, builder_script)
    app = create_app(ledger, HFRenderer(folder), builder, model_name="scripted")
    gateway = await AppServer(app, host=cluster.network.gateway).start()
    players: list[subprocess.Popen[bytes]] = []
    try:

        async def served() -> list:
            return [r for r in await ledger.list_sandboxes(pool="minecraft") if r.state == "idle"]

        deadline = time.monotonic() + 180
        while not await served():
            assert serve.poll() is None, "rollout sandboxes serve exited"
            assert time.monotonic() < deadline, "no served Minecraft instance within 180 s"
            await asyncio.sleep(0.5)
        [instance] = await served()
        assert instance.host == "world" and instance.details["host"] == world.address
        run = await ledger.create_run("team", "minecraft_team.environment:environment", {})
        [episode] = await ledger.add_episodes(
            run.run_id, [EpisodeSpec(0, 0, {"reward": "team"}, seed=SEED, agents=4)]
        )
        for name in PLAYERS:
            host = cluster.network.host(name)
            players.append(host.popen(
                [sys.executable, "-c", ONE_SEAT, cluster.database_url, f"{gateway.url}/v1",
                 run.run_id],
                env=cluster.env(host), log=host.root / "minecraft-seat.log",
            ))  # fmt: skip
        # Once the episode holds the world, its keeper is paused, so that the world the episode
        # leaves can be read (it would replace a used instance at once).
        deadline = time.monotonic() + 180
        while (await ledger.sandbox(instance.instance_id)).episode_id is None:
            assert time.monotonic() < deadline, "the served instance was not claimed in 180 s"
            await asyncio.sleep(0.2)
        serve.send_signal(signal.SIGSTOP)
        for name, process in zip(PLAYERS, players, strict=True):
            code = await asyncio.to_thread(process.wait, 600)
            log = cluster.network.host(name).root / "minecraft-seat.log"
            assert code == 0, log.read_text()[-3000:]
        record = await ledger.episode(episode)
        ends = sorted(record.ends, key=lambda end: end.agent)
        assert [end.status for end in ends] == ["completed"] * 4, [e.error for e in ends]
        assert all(end.metrics["actions"] == 3 and end.metrics["team_built"] == 1 for end in ends)
        claimers = {
            row[0]
            for row in cluster.query(
                "SELECT DISTINCT runner FROM seat_claims WHERE episode_id = %s", episode
            )
        }
        assert {claimer.split("-")[1] for claimer in claimers} == set(PLAYERS), claimers
        assert (await ledger.sandbox(instance.instance_id)).host == "world"  # none started
        assert [r.instance_id for r in await ledger.list_sandboxes(pool="minecraft")] == [
            instance.instance_id
        ]
        # The world, read from its server on the fifth host: each agent's spot holds the block
        # it placed, on its marker; the cells beside them are untouched.
        await check_built(world.address, instance.details["control_port"], SEED)
    except BaseException:
        cluster.explain()
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            serve.send_signal(signal.SIGCONT)
        for process in players:
            if process.poll() is None:
                process.kill()
        await gateway.stop()
        await ledger.close()
        world.stop(grace=15)


def _ray_start(cluster: Cluster, name: str, *options: str) -> None:
    """`ray start` on host `name` (a head, or a worker joining one); it returns once the node
    runs, its processes staying on the host (stopped with it)."""
    host = cluster.network.host(name)
    result = host.run(
        [str(Path(sys.executable).parent / "ray"), "start",
         f"--node-ip-address={host.address}", "--num-cpus=4", "--disable-usage-stats",
         f"--temp-dir={cluster.network.root / 'ray'}", *options],
        env={**cluster.env(host), "RAY_AUTH_MODE": "disabled"},
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"ray start on {name}: {result.stderr[-3000:]}"


def _ray_nodes(cluster: Cluster, address: str, count: int, timeout: float = 120) -> None:
    """Wait until the Ray cluster at `address` counts `count` live nodes: a node that `ray start`
    has just started may not be registered yet, and `SPREAD` places only on registered nodes."""
    host = cluster.network.host("rayhead")
    probe = (
        f"import ray; ray.init(address={address!r}, logging_level='ERROR');"
        " print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    deadline = time.monotonic() + timeout
    alive = ""
    while time.monotonic() < deadline:
        result = host.run(
            [sys.executable, "-c", probe],
            env={**cluster.env(host), "RAY_AUTH_MODE": "disabled"},
            timeout=120,
        )
        alive = (result.stdout.strip().splitlines() or [result.stderr[-2000:]])[-1]
        if result.returncode == 0 and alive == str(count):
            return
        time.sleep(1)
    raise AssertionError(f"the Ray cluster at {address} never had {count} live nodes: {alive}")


def _role_pids(role: str, database_url: str) -> list[int]:
    """Processes whose environment names this role and this ledger (Ray's workers, on any host:
    the hosts share this machine's process ids)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            f"ROLLOUT_ROLE={role}".encode() in environ
            and f"ROLLOUT_DATABASE_URL={database_url}".encode() in environ
        ):
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(900)
def test_the_ray_launcher_spreads_the_run_over_a_head_and_a_worker_and_restarts_its_trainer(
    cluster: Cluster,
) -> None:
    """The run's roles are Ray actors on two hosts; a SIGKILLed trainer actor is restarted by
    Ray, takes the lease with a higher epoch, and the run finishes with every version once."""
    steps = 6
    head, worker = cluster.network.host("rayhead"), cluster.network.host("rayworker")
    address = f"{head.address}:6379"
    run_id = _create(
        cluster, "rayed", "--steps", str(steps), "--set", "stop_at_reward=null",
        "--set", "groups_per_step=2", "--set", "warmup_steps=2",
    )  # fmt: skip
    trainer = "trainer-rayed"
    try:
        _ray_start(cluster, "rayhead", "--head", "--port=6379", "--include-dashboard=false")
        _ray_start(cluster, "rayworker", f"--address={address}")
        _ray_nodes(cluster, address, 2)
        launcher = {"launcher": head.popen(
            [sys.executable, "-m", "rollout.cli", "up", "--launcher", "ray", "--ray-address",
             address, "--run", "rayed", "--until-finished"],
            env={**cluster.env(head), "RAY_AUTH_MODE": "disabled"},
            log=head.root / "up-rayed.log",
        )}  # fmt: skip
        step = lambda: int(cluster.query(LAST_STEP, run_id)[0][0])  # noqa: E731
        _wait_for(cluster, "step 2", lambda: step() >= 2, launcher, timeout=600)
        [pid] = _role_pids(trainer, cluster.database_url)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        _wait_for(cluster, "a restarted trainer actor",
                  lambda: [p for p in _role_pids(trainer, cluster.database_url) if p != pid],
                  launcher, timeout=300)  # fmt: skip
        _wait_for(cluster, "finished run", lambda: _finished(cluster, run_id), launcher,
                  timeout=600)  # fmt: skip
        assert _stop(launcher) == {"launcher": 0}
        # No actor left behind: Ray ends a stopped launcher's actors itself, a few seconds later
        # on a loaded machine (one was still exiting at load 15).
        deadline = time.monotonic() + 60
        while (left := _role_pids(trainer, cluster.database_url)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, left
    except BaseException:
        cluster.explain()
        raise
    finally:
        worker.stop(grace=10)
        head.stop(grace=10)
    versions = [v for (v,) in cluster.query(
        "SELECT version FROM checkpoints WHERE run_id = %s ORDER BY version", run_id)]  # fmt: skip
    assert versions == list(range(steps + 1))  # no step lost, none taken twice
    rows = cluster.query(
        "SELECT lease_epoch, extract(epoch FROM created_at)::float8 FROM train_steps"
        " WHERE run_id = %s ORDER BY step",
        run_id,
    )
    epochs = [epoch for epoch, _ in rows]
    assert epochs == sorted(epochs)  # the killed trainer never wrote after its successor
    after = [epoch for epoch, at in rows if at > killed_at]
    assert after and min(after) > epochs[0]  # the restarted actor took over with a new epoch
    # Ray placed the run's roles on both hosts (SPREAD), each reaching the others over TCP.
    hosts = {host for (host,) in cluster.query(
        "SELECT DISTINCT host FROM processes WHERE run_id = %s", run_id)}  # fmt: skip
    assert hosts == {"rayhead", "rayworker"}, hosts

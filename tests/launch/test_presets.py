"""`rollout preset load|list|show` and `--preset NAME` resolving stored presets first."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from rollout.launch.presets import resolve_preset
from rollout.ledger import Ledger
from tests.cli_helpers import rollout
from tests.launch.kubectl import fake_kubectl

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "rollout" / "files" / "presets"


@pytest.fixture
def ledger_env(monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path) -> str:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return database_url


def test_load_then_list_shows_every_shipped_preset(
    capsys: pytest.CaptureFixture[str], ledger_env: str
) -> None:
    names = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    assert "cpu-tiny" in names
    code, out, err = rollout(capsys, "preset", "load", str(SHIPPED))
    assert code == 0, err
    assert out.split() == [w for name in names for w in ("stored", name)]
    code, out, err = rollout(capsys, "preset", "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [p["name"] for p in listed] == names
    code, out, _ = rollout(capsys, "preset", "list")
    assert all(name in out for name in names)
    # Loading again stores nothing new.
    code, out, _ = rollout(capsys, "preset", "load", str(SHIPPED), "--json")
    assert code == 0 and json.loads(out) == [{"name": n, "stored": False} for n in names]
    code, out, _ = rollout(capsys, "preset", "show", "cpu-tiny")
    assert code == 0 and out == (SHIPPED / "cpu-tiny.yaml").read_text()
    code, out, _ = rollout(capsys, "preset", "show", "cpu-tiny", "--json")
    assert json.loads(out)["content_hash"] == listed[names.index("cpu-tiny")]["content_hash"]


def test_a_broken_preset_is_one_line_naming_file_and_field(
    capsys: pytest.CaptureFixture[str], ledger_env: str, tmp_path: Path
) -> None:
    folder = tmp_path / "presets"
    folder.mkdir()
    shutil.copy(SHIPPED / "cpu-tiny.yaml", folder / "cpu-tiny.yaml")
    (folder / "broken.yaml").write_text("name: broken\nlearning_rate: -1\n")
    code, out, err = rollout(capsys, "preset", "load", str(folder))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "broken.yaml" in err and "learning_rate" in err and "-1" in err
    # Nothing was stored: every file is checked first.
    code, out, _ = rollout(capsys, "preset", "list", "--json")
    assert json.loads(out) == []
    (folder / "broken.yaml").write_text("name: other\n")
    code, _, err = rollout(capsys, "preset", "load", str(folder))
    assert code == 2 and "broken.yaml: name: 'other' differs" in err
    (folder / "broken.yaml").write_text("steps: [1\n")
    code, _, err = rollout(capsys, "preset", "load", str(folder))
    assert code == 2 and "broken.yaml: not valid YAML" in err and len(err.strip().splitlines()) == 1
    code, _, err = rollout(capsys, "preset", "show", "nope")
    assert code == 2 and "no preset 'nope' is stored" in err


def test_preset_name_resolves_stored_presets_first(ledger_env: str, tmp_path: Path) -> None:
    async def go() -> None:
        assert (await resolve_preset("cpu-tiny")).steps == 300  # built-in
        body = (SHIPPED / "cpu-tiny.yaml").read_text().replace("steps: 300", "steps: 7")
        ledger = await Ledger.connect()
        try:
            assert await ledger.store_preset("cpu-tiny", body, source="test")
            assert not await ledger.store_preset("cpu-tiny", body, source="test")
        finally:
            await ledger.close()
        assert (await resolve_preset("cpu-tiny")).steps == 7  # stored wins
        path = tmp_path / "mine.yaml"
        path.write_text("steps: 3\n")
        assert (await resolve_preset(str(path))).steps == 3  # a path is a path

    asyncio.run(go())


def test_cluster_without_kubectl_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], ledger_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    code, _, err = rollout(capsys, "preset", "list", "--cluster")
    assert code == 2 and "--cluster needs kubectl on PATH" in err
    assert len(err.strip().splitlines()) == 1


def test_cluster_port_forwards_to_the_release_ledger(
    capsys: pytest.CaptureFixture[str],
    ledger_env: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bin_dir = fake_kubectl(tmp_path / "bin", ledger_env)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, out, err = rollout(capsys, "preset", "load", str(SHIPPED), "--cluster", "--json")
    assert code == 0, err
    assert {p["name"] for p in json.loads(out)} == {p.stem for p in SHIPPED.glob("*.yaml")}
    code, out, err = rollout(capsys, "preset", "list", "--cluster", "--json")
    assert code == 0 and "cpu-tiny" in {p["name"] for p in json.loads(out)}


def test_inside_a_pod_cluster_means_the_pods_ledger(
    capsys: pytest.CaptureFixture[str], ledger_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("PATH", "/nonexistent")  # no kubectl in the image
    code, out, err = rollout(capsys, "preset", "load", str(SHIPPED), "--cluster", "--json")
    assert code == 0, err
    assert yaml.safe_load(out)

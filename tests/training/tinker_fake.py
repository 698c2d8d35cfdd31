"""A fake of Tinker's hosted service behind the SDK's own interfaces and types.

Tinker cannot be reached from tests, so `FakeService` implements the methods rollout calls on
`tinker.ServiceClient`, `TrainingClient` and `SamplingClient`, taking and returning the REAL
`tinker.types` (`Datum`, `ModelInput`, `AdamParams`, `ForwardBackwardOutput`, `SampleResponse`,
`SampledSequence`, `SaveWeightsResponse`, ...). Its model is a context-free unigram policy
(`logits`, one per token id) trained by Adam with the exact gradients of Tinker's
`cross_entropy`, `importance_sampling` and `ppo` losses, so learning is real and checkable.

It checks what it receives, as Tinker would: every `Datum` has `target_tokens` as long as its
input, `importance_sampling` gets `logprobs` and `advantages` of that length, `cross_entropy`
gets `weights`; and it keeps every `Datum` it was sent (`received`) for tests to inspect.

Across processes (`rollout train` runs the trainer and the inference role apart), the fake
keeps its state on disk: `disk_service()` is the factory `ROLLOUT_TINKER_SERVICE` names
(`tests.training.tinker_fake:disk_service`); it reads the folder from `ROLLOUT_TINKER_FAKE_DIR`,
saves each `tinker://RUN/KIND/NAME` path's weights as `RUN/KIND/NAME.npz` there (`DiskStore`),
so a sampler in another process loads what the trainer saved; it appends every `Datum` it is
sent to `received.jsonl` and every sampling client it creates to `samplers.jsonl`
(`read_lines` reads them back). The base model's policy is `base_logits.npy` in the folder when
a test put one there (else uniform).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
import uuid
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tinker
from tinker import types

FAKE_DIR_VAR = "ROLLOUT_TINKER_FAKE_DIR"
"""The folder `disk_service()` keeps the fake's state in."""
DISK_VOCAB = 64
"""The vocabulary of `disk_service()`'s policy: cpu-tiny's model has 64 token ids."""
RECEIVED = "received.jsonl"
"""One line per `Datum` a disk-backed fake was sent."""
SAMPLERS = "samplers.jsonl"
"""One line per sampling client a disk-backed fake created (its `model_path` or `base_model`)."""
BASE_LOGITS = "base_logits.npy"
"""The base model's logits of a disk-backed fake, when present."""


class Done:
    """An already finished SDK future (`APIFuture.result()`)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> Any:
        return self.value


@dataclass
class _Weights:
    logits: np.ndarray
    m: np.ndarray
    v: np.ndarray
    t: int = 0

    def copy(self) -> _Weights:
        return _Weights(self.logits.copy(), self.m.copy(), self.v.copy(), self.t)


def _logp(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - math.log(float(np.exp(shifted).sum()))


class DiskStore(MutableMapping[str, _Weights]):
    """Saved weights by `tinker://` path, as `.npz` files under `root` (shared by processes).

    A file is written beside its final name and renamed into place, so a reader in another
    process sees all of it or nothing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, path: str) -> Path:
        assert path.startswith("tinker://") and ".." not in path, path
        return self.root / f"{path.removeprefix('tinker://')}.npz"

    def __getitem__(self, path: str) -> _Weights:
        file = self._file(path)
        if not file.is_file():
            raise KeyError(path)
        with np.load(file) as data:
            return _Weights(data["logits"], data["m"], data["v"], int(data["t"]))

    def __setitem__(self, path: str, weights: _Weights) -> None:
        file = self._file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            np.savez(out, logits=weights.logits, m=weights.m, v=weights.v, t=weights.t)
        os.replace(staging, file)

    def __delitem__(self, path: str) -> None:
        try:
            self._file(path).unlink()
        except FileNotFoundError:
            raise KeyError(path) from None

    def __iter__(self) -> Iterator[str]:
        for file in sorted(self.root.glob("*/*/*.npz")):
            yield f"tinker://{file.relative_to(self.root).with_suffix('').as_posix()}"

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass
class FakeService:
    """`tinker.ServiceClient` as rollout uses it."""

    vocab: int = 32
    stored: MutableMapping[str, _Weights] = field(default_factory=dict)
    prefix: str = "fake-run-"
    """The first part of the paths it makes (`tinker://PREFIX<n>/KIND/NAME`)."""
    log: Path | None = None
    """The folder whose `received.jsonl` and `samplers.jsonl` it appends to (None: none)."""
    base: np.ndarray | None = None
    """The base model's logits (None: zeros, a uniform policy)."""
    clients: list[FakeTrainingClient] = field(default_factory=list)
    samplers: list[FakeSamplingClient] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None, **_: Any
    ) -> Done:
        assert isinstance(base_model, str) and rank > 0
        zeros = np.zeros(self.vocab)
        client = FakeTrainingClient(self, _Weights(self._base(), zeros.copy(), zeros.copy()))
        self.clients.append(client)
        return Done(client)

    def create_training_client_from_state_with_optimizer(self, path: str, **_: Any) -> Done:
        client = FakeTrainingClient(self, self.stored[path].copy())
        self.clients.append(client)
        return Done(client)

    def create_training_client_from_state(self, path: str, **_: Any) -> Done:
        weights = self.stored[path].copy()
        zeros = np.zeros(self.vocab)
        client = FakeTrainingClient(self, _Weights(weights.logits, zeros.copy(), zeros.copy()))
        self.clients.append(client)
        return Done(client)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None, **_: Any
    ) -> Done:
        """A future of the client, as the SDK answers (`BackcompatSamplingClientFuture`)."""
        if model_path is not None:
            assert model_path.startswith("tinker://") and "/sampler_weights/" in model_path
            client = FakeSamplingClient(self.stored[model_path].logits.copy())
        else:
            assert base_model is not None
            client = FakeSamplingClient(self._base())
        self.samplers.append(client)
        self.append(SAMPLERS, {"model_path": model_path, "base_model": base_model})
        return Done(client)

    def _base(self) -> np.ndarray:
        return np.zeros(self.vocab) if self.base is None else self.base.astype(float).copy()

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append `record` to the file `name` of the `log` folder, if there is one."""
        if self.log is not None:
            with (self.log / name).open("a") as out:
                out.write(json.dumps(record) + "\n")

    def path(self, kind: str, name: str) -> str:
        return f"tinker://{self.prefix}{next(self._ids)}/{kind}/{name}"


def disk_service() -> FakeService:
    """A fake whose state lives in the folder `ROLLOUT_TINKER_FAKE_DIR` names (see the module
    docstring): the factory a run's roles get through `ROLLOUT_TINKER_SERVICE`."""
    root = os.environ.get(FAKE_DIR_VAR)
    if not root:
        raise RuntimeError(f"{FAKE_DIR_VAR} is not set")
    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / BASE_LOGITS
    return FakeService(
        vocab=DISK_VOCAB,
        stored=DiskStore(folder),
        prefix=f"fake-{uuid.uuid4().hex[:8]}-",
        log=folder,
        base=np.load(base) if base.is_file() else None,
    )


def read_lines(folder: Path, name: str) -> list[dict[str, Any]]:
    """The records a disk-backed fake in `folder` appended to `name`: for `RECEIVED` one per
    `Datum`, with `call` (`forward` or `forward_backward`), `loss_fn`, the sequence's `tokens`
    (input plus the last target) and its `loss_fn_inputs` as lists; for `SAMPLERS` one per
    sampling client, with its `model_path` and `base_model`."""
    file = folder / name
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line]


@dataclass
class FakeTrainingClient:
    """`tinker.TrainingClient`: forward, forward_backward, optim_step, save_*."""

    service: FakeService
    weights: _Weights
    received: list[tuple[str, types.Datum]] = field(default_factory=list)
    configs: list[dict[str, Any]] = field(default_factory=list)
    grad: np.ndarray | None = None

    def _check(self, datum: types.Datum, loss_fn: str) -> dict[str, np.ndarray]:
        assert isinstance(datum, types.Datum) and isinstance(datum.model_input, types.ModelInput)
        n = datum.model_input.length
        inputs = {k: np.asarray(v.to_numpy()) for k, v in datum.loss_fn_inputs.items()}
        required = {
            "cross_entropy": {"target_tokens", "weights"},
            "importance_sampling": {"target_tokens", "logprobs", "advantages"},
            "ppo": {"target_tokens", "logprobs", "advantages"},
        }[loss_fn]
        assert set(inputs) == required, (loss_fn, sorted(inputs))
        for key, value in inputs.items():
            assert value.shape == (n,), (key, value.shape, n)
        assert inputs["target_tokens"].dtype.kind == "i"
        # The input is the sequence without its last token; the targets, without its first.
        assert datum.model_input.to_ints()[1:] == inputs["target_tokens"].tolist()[:-1]
        return inputs

    def _run(
        self,
        data: list[types.Datum],
        loss_fn: str,
        backward: bool,
        config: Any = None,
    ) -> Done:
        logp = _logp(self.weights.logits)
        p = np.exp(logp)
        grad = np.zeros_like(self.weights.logits)
        outputs: list[dict[str, types.TensorData]] = []
        loss = 0.0
        for datum in data:
            inputs = self._check(datum, loss_fn)
            self.received.append((loss_fn, datum))
            self._log(datum, loss_fn, inputs, "forward_backward" if backward else "forward")
            targets = inputs["target_tokens"]
            token_logp = logp[targets]
            if loss_fn == "cross_entropy":
                coef = inputs["weights"]  # loss = -sum w * logp
                loss += float(-(coef * token_logp).sum())
            elif loss_fn == "ppo":  # loss = -sum min(ratio * A, clip(ratio) * A)
                config = dict(config or {})
                low = config.get("clip_low_threshold", 0.8)
                high = config.get("clip_high_threshold", 1.2)
                ratio = np.exp(token_logp - inputs["logprobs"])
                advantages = inputs["advantages"]
                unclipped = ratio * advantages
                clipped = np.clip(ratio, low, high) * advantages
                loss += float(-np.minimum(unclipped, clipped).sum())
                coef = np.where(clipped < unclipped, 0.0, unclipped)
                self.configs.append(config)
            else:
                ratio = np.exp(token_logp - inputs["logprobs"])
                coef = ratio * inputs["advantages"]  # loss = -sum ratio * A
                loss += float(-coef.sum())
            for token, c in zip(targets.tolist(), coef.tolist(), strict=True):
                grad -= c * (np.eye(len(p))[token] - p)
            outputs.append({"logprobs": types.TensorData.from_numpy(token_logp.astype(np.float32))})
        if backward:
            self.grad = grad if self.grad is None else self.grad + grad
        return Done(
            types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord",
                loss_fn_outputs=outputs,
                metrics={"loss:sum": loss},
            )
        )

    def _log(
        self, datum: types.Datum, loss_fn: str, inputs: dict[str, np.ndarray], call: str
    ) -> None:
        if self.service.log is None:
            return
        record = {
            "call": call,
            "loss_fn": loss_fn,
            "tokens": [*datum.model_input.to_ints(), int(inputs["target_tokens"][-1])],
            "loss_fn_inputs": {k: v.tolist() for k, v in inputs.items()},
        }
        self.service.append(RECEIVED, record)

    def forward(self, data: list[types.Datum], loss_fn: str, **_: Any) -> Done:
        return self._run(data, loss_fn, backward=False)

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None
    ) -> Done:
        return self._run(data, loss_fn, backward=True, config=loss_fn_config)

    def optim_step(self, params: types.AdamParams | None = None, **_: Any) -> Done:
        assert isinstance(params, types.AdamParams)
        if self.grad is not None:
            w, g = self.weights, self.grad
            w.t += 1
            w.m = params.beta1 * w.m + (1 - params.beta1) * g
            w.v = params.beta2 * w.v + (1 - params.beta2) * g * g
            m_hat = w.m / (1 - params.beta1**w.t)
            v_hat = w.v / (1 - params.beta2**w.t)
            w.logits = w.logits - params.learning_rate * m_hat / (np.sqrt(v_hat) + params.eps)
        self.grad = None
        return Done(types.OptimStepResponse())

    def save_state(self, name: str, **_: Any) -> Done:
        path = self.service.path("weights", name)
        self.service.stored[path] = self.weights.copy()
        return Done(types.SaveWeightsResponse(path=path))

    def save_weights_for_sampler(self, name: str, **_: Any) -> Done:
        path = self.service.path("sampler_weights", name)
        self.service.stored[path] = self.weights.copy()
        return Done(types.SaveWeightsForSamplerResponse(path=path))


@dataclass
class FakeSamplingClient:
    """`tinker.SamplingClient`: `sample_async` from the unigram policy (no top-k logprobs)."""

    logits: np.ndarray
    requests: list[tuple[types.ModelInput, types.SamplingParams]] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)
    """HTTP statuses to fail the next calls with, in order (429: `tinker.RateLimitError`)."""

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        **_: Any,
    ) -> types.SampleResponse:
        assert isinstance(prompt, types.ModelInput) and num_samples == 1
        assert isinstance(sampling_params, types.SamplingParams)
        if self.failures:
            raise _status_error(self.failures.pop(0))
        self.requests.append((prompt, sampling_params))
        logp = _logp(self.logits / max(sampling_params.temperature, 1e-6))
        rng = np.random.default_rng(sampling_params.seed)
        stops = (
            set(sampling_params.stop or []) if not isinstance(sampling_params.stop, str) else set()
        )
        tokens: list[int] = []
        values: list[float] = []
        reason = "length"
        for _position in range(sampling_params.max_tokens or 16):
            token = int(rng.choice(len(logp), p=np.exp(logp)))
            tokens.append(token)
            values.append(float(logp[token]))
            if token in stops:
                reason = "stop"
                break
        sequence = types.SampledSequence(
            stop_reason=reason,  # type: ignore[arg-type]
            sequence_id=f"seq-{len(self.requests)}",
            tokens_np=np.array(tokens, dtype=np.int32),
            logprobs_np=np.array(values, dtype=np.float32),
        )
        return types.SampleResponse(sequences=[sequence])


def _status_error(status: int) -> tinker.APIStatusError:
    """The SDK's own error for an HTTP `status` answer."""
    request = httpx.Request("POST", "https://tinker.invalid/api/v1/asample")
    response = httpx.Response(status, request=request)
    kind = {429: tinker.RateLimitError, 400: tinker.BadRequestError}.get(
        status, tinker.InternalServerError
    )
    return kind(f"fake {status}", response=response, body=None)

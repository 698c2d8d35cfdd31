# syntax=docker/dockerfile:1
# The image every role of the platform runs (`rollout gateway|runner|bridge|up|...`, and the
# Ray head and workers of the Helm chart's RayCluster). Built from a checkout:
#
#   docker build -t rollout:0.1.0 .                                   # CPU PyTorch (default)
#   docker build -t rollout:0.1.0-cuda --build-arg TORCH_INDEX=https://pypi.org/simple .
#
# Two stages: `build` resolves the locked dependencies with uv into /opt/venv; the runtime
# stage copies only that environment and runs as an unprivileged user.

ARG PYTHON_IMAGE=python:3.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
COPY --from=ghcr.io/astral-sh/uv:0.8 /uv /uvx /bin/
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
# Where PyTorch comes from: the CPU wheels by default (small); PyPI's default wheels for CUDA.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /src
RUN uv venv /opt/venv
# Dependencies first, from the lock file alone, so this layer is reused while only sources
# change. torch is installed separately from TORCH_INDEX at the locked version.
COPY pyproject.toml uv.lock README.md ./
COPY packages/rolloutlib/pyproject.toml packages/rolloutlib/README.md packages/rolloutlib/
COPY environments/pyproject.toml environments/
RUN uv export --frozen --no-dev --extra cluster --no-emit-workspace --no-hashes \
        --no-emit-package torch -o /tmp/requirements.txt \
 && torch="$(uv export --frozen --no-dev --no-hashes | grep '^torch==' | cut -d' ' -f1)" \
 && uv pip install --index-url "$TORCH_INDEX" "$torch" \
 && uv pip install -r /tmp/requirements.txt
# The three workspace packages (the platform, the contracts library, the example environments)
# and the shipped presets and eval suites, which the platform's wheel includes.
COPY src/ src/
COPY packages/rolloutlib/rolloutlib/ packages/rolloutlib/rolloutlib/
COPY environments/ environments/
COPY deploy/chart/rollout/files/presets/ deploy/chart/rollout/files/presets/
COPY evals/ evals/
RUN uv pip install --no-deps . ./packages/rolloutlib ./environments

FROM ${PYTHON_IMAGE} AS runtime
RUN useradd --create-home --uid 1000 --user-group rollout \
 && mkdir -p /var/lib/rollout && chown rollout:rollout /var/lib/rollout
COPY --from=build /opt/venv /opt/venv
# On PATH for login shells too: KubeRay starts Ray with `bash -lc`, which resets PATH.
RUN ln -s /opt/venv/bin/rollout /opt/venv/bin/ray /usr/local/bin/
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 \
    ROLLOUT_STATE_DIR=/var/lib/rollout
USER 1000:1000
WORKDIR /home/rollout
ENTRYPOINT ["rollout"]
CMD ["--help"]

"""Runs: a run's configuration and its live settings as typed records, each default written once.

- `config`: `RunConfig` (what a preset holds) and its parts (`ModelInit`, `ModelSource`,
  `VllmOptions`, `TinkerOptions`, `ImportanceConfig`, `EvalSchedule`).
- `presets`: the built-in presets and YAML files (`load_preset`, `parse_config`,
  `presets_dir`).
- `spec`: `RunSpec`, what a run records besides its environment, read with `RunSpec.of(record)`.
- `live`: `RunSettings`, the settings a run follows and people change while it trains
  (`max_lag`, `paused`, ...), their keys, and `check_setting`/`parse_max_lag`.
- `architectures`: the architectures of the tiny models (`Arch`, `ARCH_NAMES`).
- `errors`: `RunError` and its subclasses.

This package imports only the platform's first layer (`contracts`, `errors`, `settings`), so
every layer above reads a run the same way. Submodules are imported explicitly
(`from rollout.runs.config import RunConfig`).
"""

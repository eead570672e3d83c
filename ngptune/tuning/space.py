"""One trial's point of the search space: sampling, the untuned default, and the checks of a
combination before anything is launched (DESIGN.md §5).

A parameter is *active* in a trial when its ``when`` conditions hold for the values sampled
before it (file order) and, for an NCCL variable, when the trial's ranks talk through NCCL
(several CUDA ranks); inactive parameters are not sampled at all, so Optuna's samplers see them
as absent (TPE and random samplers handle such conditional spaces).

The default trial (trial 0) samples nothing of its own: it takes each active trainer parameter at
the base config's value when the parameter can take that value, leaves the others at the base
config, and sets no NCCL variable (NCCL's own choice). It is enqueued with those values, so it
appears in the parameter plots where it can.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from ngptune.tuning import nccl
from ngptune.tuning.specs import ParamSpec, StudySpec
from trainer.contract import ConfigError, TrainConfig, apply_overrides, check_world_size, config_to_dict, interconnect_env

__all__ = [
    "check_combination",
    "conditions_met",
    "default_params",
    "sample",
    "split_values",
    "trial_config",
]


def conditions_met(param: ParamSpec, values: Mapping[str, Any]) -> bool:
    """Whether every ``when`` condition of ``param`` holds for the values sampled so far."""
    for key, allowed in param.when:
        if key not in values:
            return False
        value = values[key]
        if not any(type(value) is type(a) and value == a for a in allowed):
            return False
    return True


def _active(param: ParamSpec, values: Mapping[str, Any], nccl_active: bool) -> bool:
    if param.is_nccl and not nccl_active:
        return False
    return conditions_met(param, values)


def _suggest(trial, param: ParamSpec) -> Any:
    if param.kind == "categorical":
        return trial.suggest_categorical(param.name, list(param.choices))
    if param.kind == "int":
        return trial.suggest_int(param.name, int(param.low), int(param.high), step=int(param.step or 1), log=param.log)
    return trial.suggest_float(param.name, float(param.low), float(param.high), step=param.step, log=param.log)


def sample(trial, spec: StudySpec, *, nccl_active: bool, only: Container[str] | None = None) -> dict[str, Any]:
    """Sample the active parameters of ``spec`` through an Optuna ``trial``, in file order.

    Args:
        trial: an ``optuna.Trial`` (values fixed by ``enqueue_trial`` or a retried trial's stored
            parameters come back unchanged).
        spec: the study.
        nccl_active: whether NCCL parameters are active (several CUDA ranks on NCCL).
        only: sample only these parameter names (the default trial), or None for all.

    Returns:
        parameter name → value, active parameters only.
    """
    values: dict[str, Any] = {}
    for param in spec.params:
        if only is not None and param.name not in only:
            continue
        if _active(param, values, nccl_active):
            values[param.name] = _suggest(trial, param)
    return values


def default_params(spec: StudySpec, base_cfg: TrainConfig) -> dict[str, Any]:
    """The untuned default's parameter values: each active trainer parameter at its base-config
    value where the parameter can take it (see the module docstring); no NCCL variable."""
    base = config_to_dict(base_cfg)
    values: dict[str, Any] = {}
    for param in spec.params:
        if param.is_nccl or not conditions_met(param, values):
            continue
        block, _, key = param.name.partition(".")
        value = base[block][key]
        if param.contains(value):
            values[param.name] = value
    return values


def split_values(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Sampled values → (trainer settings by dotted key, NCCL environment with string values)."""
    trainer = {k: v for k, v in values.items() if not nccl.is_nccl_name(k)}
    env = {k: str(v) for k, v in values.items() if nccl.is_nccl_name(k)}
    return trainer, env


def trial_config(base_cfg: TrainConfig, settings: Mapping[str, Any], scene: str) -> TrainConfig:
    """The trial's full trainer config: base (with fixed settings and budget) + sampled settings
    + the scene.

    Raises:
        ConfigError: the combination is invalid (names the dotted key).
    """
    return apply_overrides(base_cfg, {**settings, "data.scene": scene})


def check_combination(cfg: TrainConfig, nccl_env: Mapping[str, str], nproc_per_node: int, nccl_active: bool) -> None:
    """Checks of a trial's settings against each other and the world size, before launch.

    Raises:
        ConfigError: naming the key: ``parallel.num_subgrids`` below the world size in subgrid
            mode (:func:`trainer.contract.check_world_size`, the trial's one check of the world-size rules),
            ``distributed.emulate_interconnect`` without NCCL, ``NCCL_MIN_NCHANNELS`` above
            ``NCCL_MAX_NCHANNELS``.
    """
    check_world_size(cfg, nproc_per_node)
    interconnect_env(cfg.distributed.emulate_interconnect, "nccl" if nccl_active else "gloo")
    if nccl_active and nccl_env.get("NCCL_ALGO") == "Tree":
        # sweep trials run on one node; NCCL builds its trees between nodes, and forcing Tree
        # among the GPUs of one host fails at the first all-reduce (ncclInvalidUsage, seen with
        # NCCL 2.28.9 on 2×H200 in every such trial of the first nccl study)
        raise ConfigError("NCCL_ALGO: 'Tree' needs more than one node (NCCL builds trees between nodes); "
                          "every trial of this sweep runs on one node")
    low, high = nccl_env.get("NCCL_MIN_NCHANNELS"), nccl_env.get("NCCL_MAX_NCHANNELS")
    if low is not None and high is not None and int(low) > int(high):
        raise ConfigError(f"NCCL_MIN_NCHANNELS: expected at most NCCL_MAX_NCHANNELS ({high}), got {low}")

"""What a single-process snapshot holds of a trainer, and how it is restored: the model, occupancy
grid, optimiser and loss scale, the random states of every generator, the counters (step, batch
sizing, training time) and the step's own state (``trainer_state["fixed_step"]``). The file is
written and read by :mod:`trainer.train.snapshot`; the payload's layout is in its docstring.

Random states are those of a step boundary: a prefetched input (:mod:`trainer.train.prefetch`)
is dropped and its draws rewound first, so a resumed run draws the rays the uninterrupted one
draws. The checks here (:func:`check_finest_resolution`, :func:`check_scene_model`,
:func:`check_hash_grid`, :func:`warn_config_differences`) apply
to the distributed checkpoints too.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterable

import torch

from trainer.contract.config import TrainConfig, config_differences, config_to_dict, is_int
from trainer.contract.errors import SnapshotError
from trainer.contract.metrics import truncate_metrics_after
from trainer.contract.runstatus import fitted_warning
from trainer.train.snapshot import load_snapshot, load_state_checked

__all__ = ["ConfigDifferenceWarning", "HASH_GRID_KEYS", "check_finest_resolution", "check_hash_grid", "check_scene_model",
           "hash_grid_state", "stored_hash_grid", "load_snapshot_into", "restore_counters", "rng_state", "set_rng_state",
           "snapshot_payload", "warm_start_from", "warn_config_differences"]


def check_finest_resolution(path: Path, trainer_state: Any, finest_resolution: int | None, saved_config: Any = None,
                            cfg: TrainConfig | None = None) -> None:
    """Refuse a snapshot or checkpoint whose hash grid was built with another finest resolution.

    The resolution is derived from the scene's views unless ``encoding.max_resolution`` is set
    (:meth:`~trainer.contract.config.EncodingConfig.finest_resolution`), and it changes every level's
    resolution without changing any tensor's shape, so the shapes alone cannot catch it.

    Args:
        path: the snapshot or checkpoint folder (named in the error).
        trainer_state: its ``trainer_state`` entry (``finest_resolution`` absent in older ones:
            not checked).
        finest_resolution: this trainer's N_max (None with ``encoding.per_level_scale``).
        saved_config, cfg: the config it was written with (``{block: {key: value}}``) and this
            run's; when they differ in other training settings too, the message asks for its
            run's config.json (the override alone would only meet the next difference).

    Raises:
        SnapshotError: the two differ; the message names both and what to load it with.
    """
    stored = trainer_state.get("finest_resolution") if isinstance(trainer_state, dict) else None
    if stored is None or finest_resolution is None or int(stored) == finest_resolution:
        return
    cure = _cure_text(path, f"--set encoding.max_resolution={int(stored)}", saved_config, cfg,
                      ("encoding.max_resolution",))
    raise SnapshotError(
        f"{path}: its hash grid was trained with a finest resolution of {int(stored)}, this config and "
        f"scene give {finest_resolution} (encoding.max_resolution, else derived from the training views); {cure}"
    )


def _cure_text(path: Path, flags: str, saved_config: Any, cfg: TrainConfig | None, keys: tuple[str, ...]) -> str:
    """What loads the model at ``path`` refused for the settings ``keys``: ``flags`` (the ``--set``
    overrides of them), or, when ``cfg`` differs from ``saved_config`` in other training settings
    too, its run's config.json (the overrides alone would only meet the next difference), by its
    path when the model lies in its run folder (``RUN/snapshots/step_N.pt``, ``RUN/checkpoints/step_N``)."""
    others = [line for line in (config_differences(saved_config, cfg) if cfg is not None else [])
              if line.partition(":")[0] not in keys]
    if others:
        beside = Path(path).parent.parent / "config.json"
        config = str(beside) if beside.is_file() else "its run's config.json"
        return (f"it was trained with other settings too ({'; '.join(others[:3])}{'; ...' if len(others) > 3 else ''}): "
                f"pass {config} as --config, without a flag or --set that changes these")
    return f"load it with {flags}"


HASH_GRID_KEYS = ("n_features_per_level", "log2_hashmap_size")
"""The ``encoding`` keys of the hash grid's F and log2 T (null: chosen by the scene model)."""


def hash_grid_state(hash_grid: tuple[int, int]) -> dict[str, int]:
    """``trainer_state["hash_grid"]`` of a snapshot or checkpoint: the F and log2 T the grid was
    built with (``trainer.hash_grid``), so a config whose values are null loads it as trained."""
    return dict(zip(HASH_GRID_KEYS, (int(v) for v in hash_grid)))


def stored_hash_grid(trainer_state: Any, saved_config: Any = None) -> tuple[int, int] | None:
    """(F, log2 T) a snapshot or checkpoint was trained with: its ``trainer_state["hash_grid"]``,
    else (written before that entry) the integers of the ``encoding`` block it was written with;
    None when neither gives both."""
    grid = trainer_state.get("hash_grid") if isinstance(trainer_state, dict) else None
    if not isinstance(grid, dict):
        grid = saved_config.get("encoding") if isinstance(saved_config, dict) else None
    values = tuple(grid.get(key) for key in HASH_GRID_KEYS) if isinstance(grid, dict) else (None, None)
    return (int(values[0]), int(values[1])) if all(is_int(v) for v in values) else None


def check_hash_grid(path: Path, trainer_state: Any, saved_config: Any, hash_grid: tuple[int, int],
                    cfg: TrainConfig | None = None) -> None:
    """Refuse a snapshot or checkpoint whose hash grid has another F or T than this trainer's
    (``hash_grid``: ``trainer.hash_grid``), before the tensors' shapes would: with
    ``encoding.n_features_per_level`` and ``encoding.log2_hashmap_size`` null the scene model
    chooses them, so a config that leaves them out may build another grid than the run trained.

    ``cfg``: this run's config; when it differs from ``saved_config`` in other training settings
    too, the message asks for its run's config.json instead of the ``--set`` flags.

    Raises:
        SnapshotError: they differ; the message names both and what loads it.
    """
    stored = stored_hash_grid(trainer_state, saved_config)
    if stored is None or stored == tuple(hash_grid):
        return
    flags = " ".join(f"--set encoding.{key}={value}" for key, value in zip(HASH_GRID_KEYS, stored))
    cure = _cure_text(path, flags, saved_config, cfg, tuple(f"encoding.{key}" for key in HASH_GRID_KEYS))
    raise SnapshotError(
        f"{path}: its hash grid was trained with F={stored[0]}, T=2^{stored[1]}, this config and scene give "
        f"F={hash_grid[0]}, T=2^{hash_grid[1]} (encoding.n_features_per_level and encoding.log2_hashmap_size; "
        f"null: chosen by the scene model); {cure}"
    )


def check_scene_model(path: Path, trainer_state: Any, scene_model: str, saved_config: Any = None,
                      cfg: TrainConfig | None = None) -> None:
    """Refuse a snapshot or checkpoint trained with another scene model (``training.scene_model``,
    :mod:`trainer.render.scene_model`): the field's domain and the occupancy grid's levels differ.

    Args:
        path: the snapshot or checkpoint folder (named in the error).
        trainer_state: its ``trainer_state`` entry (``scene_model`` absent: written before the
            unbounded model existed, a box model).
        scene_model: this trainer's scene model.
        saved_config, cfg: the config it was written with and this run's; when they differ in
            other training settings too, the message asks for its run's config.json.

    Raises:
        SnapshotError: the two differ; the message names both and what loads it.
    """
    stored = trainer_state.get("scene_model", "box") if isinstance(trainer_state, dict) else "box"
    if stored == scene_model:
        return
    cure = _cure_text(path, f"--set training.scene_model={stored}", saved_config, cfg, ("training.scene_model",))
    raise SnapshotError(
        f"{path}: trained with the scene model {stored!r}, this config and scene give {scene_model!r} "
        f"(training.scene_model); {cure}"
    )


class ConfigDifferenceWarning(UserWarning):
    """A run resumes a model with training settings other than the ones it was trained with."""


def warn_config_differences(path: Path, saved: Any, cfg: TrainConfig, trainer_state: Any = None,
                            hash_grid: tuple[int, int] | None = None, resolved: dict[str, Any] | None = None) -> None:
    """Warn (:class:`ConfigDifferenceWarning`, in lines under 80 columns:
    :func:`~trainer.contract.runstatus.fitted_warning`) when a run resumes ``path`` with training
    settings other than the ones it was written with
    (:func:`trainer.contract.config.config_differences`): legal, but usually a forgotten
    ``--config``. A null hash-grid F or T against the value it resolved to is no difference: with
    ``trainer_state`` and this trainer's ``hash_grid`` given, those keys are left out when the grid
    it was trained with is this one (:func:`stored_hash_grid`). Any other null setting against
    the value it resolves to here (``resolved``: the trainer's ``derived_settings()``) is no
    difference either, and a differing one names that value."""
    if not isinstance(saved, dict):
        return
    lines = config_differences(saved, cfg, resolved)
    if hash_grid is not None and stored_hash_grid(trainer_state, saved) == tuple(hash_grid):
        lines = [line for line in lines if not line.startswith(tuple(f"encoding.{key}:" for key in HASH_GRID_KEYS))]
    if lines:
        more = f" (and {len(lines) - 6} more)" if len(lines) > 6 else ""
        warnings.warn(fitted_warning(f"{path}: resuming with settings other than it was trained with: "
                                     f"{'; '.join(lines[:6])}{more}; pass its run's config.json as --config to "
                                     "continue the same training"), ConfigDifferenceWarning, stacklevel=2)


def rng_state(trainer: Any, **extra: torch.Tensor) -> dict[str, Any]:
    """The random states of this process: torch CPU, the step generator, ``extra`` (by name),
    torch CUDA (on a GPU) and the sampler's (``sampler_<name>``), at a step boundary (a pending
    prefetched input is dropped first and its draws rewound)."""
    trainer.inputs.rewind()
    rng: dict[str, Any] = {"torch_cpu": torch.get_rng_state(), "generator": trainer.generator.get_state(), **extra}
    if trainer.device.type == "cuda":
        rng["torch_cuda"] = torch.cuda.get_rng_state(trainer.device)
    for name, value in trainer.sampler.rng_state().items():
        rng[f"sampler_{name}"] = value
    return rng


def set_rng_state(trainer: Any, rng: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (extra entries are left to the caller)."""
    trainer.inputs.drop()
    torch.set_rng_state(rng["torch_cpu"])
    trainer.generator.set_state(rng["generator"])
    if "torch_cuda" in rng and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(rng["torch_cuda"], trainer.device)
    trainer.sampler.set_rng_state({k[len("sampler_"):]: v for k, v in rng.items() if k.startswith("sampler_")})


def restore_counters(trainer: Any, step: Any, state: dict[str, Any], ema: float | None,
                     kept_pending: Iterable[Any] = ()) -> None:
    """Step, batch sizing (rays per step, samples-per-ray average, None: unset; kept counts
    still to be sized on) and training time of a resume; the weight average starts again from
    the loaded weights (it is not in snapshots)."""
    trainer.optim.restart_weight_average()
    trainer.step = int(step)
    trainer.batch_sizing.restore(state["n_rays"], ema, kept_pending)
    trainer.train_time_s = float(state["train_time_s"])


def snapshot_payload(trainer: Any) -> dict[str, Any]:
    """The snapshot of ``trainer`` (:mod:`trainer.train.snapshot`'s layout)."""
    rng = rng_state(trainer)
    sizing = trainer.batch_sizing.state()
    trainer_state = {
        "n_rays": sizing["n_rays"],
        "samples_per_ray_ema": sizing["samples_per_ray_ema"],
        "train_time_s": trainer.train_time_s,
        "kept_pending": sizing["kept_pending"],
        "finest_resolution": trainer.finest_resolution,
        "scene_model": trainer.scene_model,
        "hash_grid": hash_grid_state(trainer.hash_grid),
    }
    step_state = trainer.stepper.state_dict()
    if step_state:
        trainer_state["fixed_step"] = step_state
    return {
        "step": trainer.step,
        "config": config_to_dict(trainer.cfg),
        "model": trainer.field.state_dict(),
        "occupancy": trainer.grid.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "rng": rng,
        "trainer_state": trainer_state,
    }


def _load_model_and_grid(trainer: Any, path: Path, payload: dict[str, Any]) -> None:
    """The checks of a snapshot against this trainer, then its model and occupancy grid."""
    check_finest_resolution(path, payload.get("trainer_state"), trainer.finest_resolution, payload.get("config"),
                            trainer.cfg)
    check_scene_model(path, payload.get("trainer_state"), trainer.scene_model, payload.get("config"), trainer.cfg)
    check_hash_grid(path, payload.get("trainer_state"), payload.get("config"), trainer.hash_grid, trainer.cfg)
    # after the refusals, which name the differences themselves
    warn_config_differences(path, payload.get("config"), trainer.cfg, payload.get("trainer_state"), trainer.hash_grid,
                            trainer.derived_settings())
    trainer.stepper.forget_graph()  # the tensors a captured step reads are about to be replaced
    load_state_checked(trainer.field, payload["model"], "model", path)
    load_state_checked(trainer.grid, payload["occupancy"], "occupancy grid", path)


def load_snapshot_into(trainer: Any, path: Path) -> None:
    """Restore a snapshot written from :func:`snapshot_payload` into ``trainer``; a trainer with a
    run directory forgets the metrics records of steps after the snapshot's.

    Raises:
        SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
    """
    payload = load_snapshot(path)
    _load_model_and_grid(trainer, path, payload)
    try:
        trainer.optimizer.load_state_dict(payload["optimizer"])
    except (ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise SnapshotError(f"{path}: optimiser state does not match this config ({exc})") from None
    if trainer.scaler.is_enabled() and payload["scaler"]:
        trainer.scaler.load_state_dict(payload["scaler"])  # an fp32 snapshot resumed in fp16 starts a fresh scaler
    try:
        set_rng_state(trainer, payload["rng"])
        state = payload["trainer_state"]
        ema = float(state["samples_per_ray_ema"])
        # (kept_pending is absent in older snapshots)
        restore_counters(trainer, payload["step"], state, None if ema < 0 else ema, state.get("kept_pending", []))
        if "fixed_step" in state:
            trainer.stepper.load_state_dict(state["fixed_step"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise SnapshotError(f"{path}: random-number or trainer state is unusable ({type(exc).__name__}: {exc})") from None
    if trainer.run_dir is not None:  # resuming into the run it came from: forget the lost steps
        truncate_metrics_after(trainer.run_dir.metrics_path(trainer.rank), trainer.step)


def warm_start_from(trainer: Any, path: Path) -> int:
    """Start ``trainer`` from another run's snapshot: its model and occupancy grid, with a fresh
    optimiser, learning-rate schedule, step counter and random state (a neighbouring time step of
    a sequence, or any scene trained with the same config).

    Returns:
        The snapshot's step.

    Raises:
        SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
    """
    payload = load_snapshot(path)
    _load_model_and_grid(trainer, path, payload)
    trainer.optim.restart_weight_average()
    return int(payload["step"])

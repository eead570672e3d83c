"""A trained model, from a run folder, a snapshot file or a distributed checkpoint folder.

What is accepted, and which config builds the model:

* a run folder (``RUN_DIR``): its newest single-process snapshot (``snapshots/step_N.pt``, else a
  ``final.pt`` in its root: :meth:`~trainer.rundir.RunDir.model_snapshot`) or its newest complete
  distributed checkpoint (``checkpoints/step_N/``), whichever has the higher step;
  the model is built from the run's ``config.json`` (so a snapshot copied in from another run is
  refused, naming the entry whose shape differs);
* a snapshot file: the config stored in it;
* a checkpoint folder (or a ``checkpoints`` folder): the config stored in its ``meta.json``.

Single-process snapshots load into :class:`~trainer.train.loop.Trainer`; distributed checkpoints
into the trainer of their ``parallel.mode`` as one process owning everything (data parallel: the
replicated model; subgrid: every box, rendered with the same segment compositing as in training).
Optimiser state is not needed and not loaded. Weights are the trained ones (a weight average of
``optimizer.ema_decay`` is not stored in snapshots).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from trainer.contract.config import TrainConfig, apply_overrides, config_from_dict, is_int
from trainer.contract.errors import ConfigError, SceneError, SnapshotError
from trainer.contract.formats import held_scene
from trainer.contract.rundir import RunDir
from trainer.contract.textlines import counted

__all__ = ["LoadedModel", "ModelSource", "check_model_path", "find_model_source", "inference_device", "load_model",
           "locate_model", "model_config", "precision_autocast", "run_state_note", "trained_skipped_frames",
           "unfinished_state"]


@dataclasses.dataclass
class LoadedModel:
    """A trainer holding a trained field and occupancy grid, ready to render.

    Attributes:
        trainer: a :class:`~trainer.train.loop.Trainer` (or a distributed trainer of one rank).
        source: the snapshot file or checkpoint folder the weights came from.
        step: the training step of those weights.
        mode: ``"single"``, ``"data"`` or ``"subgrid"``.
        notes: what the loading chose for the user to know (a CUDA-trained model on the CPU).
    """

    trainer: Any
    source: Path
    step: int
    mode: str
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def scene(self) -> Any:
        return self.trainer.scene

    @property
    def device(self) -> torch.device:
        return self.trainer.device

    def close(self) -> None:
        self.trainer.close()


def check_model_path(path: Path) -> None:
    """Refuse a model path that does not exist, or a scene folder given for a run (the command
    line calls this before it makes any output folder beside the model).

    Raises:
        SnapshotError: one line naming the path.
    """
    if not Path(path).exists():
        raise SnapshotError(f"{path}: no such file or folder (expected a run folder, a snapshot file or a "
                            "checkpoint folder)")
    if Path(path).is_file() and Path(path).suffix.lower() in (".json", ".npy"):
        scene = held_scene(path)
        if scene is not None:
            raise SnapshotError(f"{path}: the file of {scene.with_article}, not a model: train it first (ngptune "
                                f"train --scene {path} --out RUN), then give RUN")
    run = RunDir(path)
    if Path(path).is_dir() and not run.status_path.is_file() and not run.config_path.is_file():
        scene = held_scene(path)
        if scene is not None:
            raise SnapshotError(f"{path}: {scene.with_article}, not a run: train it first (ngptune train --scene "
                                f"{path} --out RUN), then give RUN")


def find_model_source(path: Path) -> tuple[str, Path, Path | None]:
    """``(kind, source, run_config)``: ``kind`` is ``"snapshot"`` or ``"checkpoint"``, ``source``
    the file or folder to load, ``run_config`` the run's ``config.json`` when ``path`` is a run
    folder (else None).

    Raises:
        SnapshotError: ``path`` does not exist or is a scene folder (:func:`check_model_path`),
            or is a folder without any snapshot or complete checkpoint (names it; its ``remedies``: where a model
            would be, what the run's status says, how a run keeps one).
    """
    from trainer.parallel.checkpoint import latest_checkpoint

    path = Path(path)
    check_model_path(path)
    if path.is_file():
        return "snapshot", path, None
    run = RunDir(path)
    checkpoint = latest_checkpoint(path)
    snapshot = run.model_snapshot()
    config = run.config_path if run.config_path.is_file() else None
    if checkpoint is None and snapshot is None:
        raise SnapshotError(f"{path}: no trained model in this folder", remedies=_no_model_remedies(path))
    if checkpoint is not None and (snapshot is None or _checkpoint_step(checkpoint) >= _snapshot_step(run, snapshot)):
        in_run = config if checkpoint.parent.parent == path else None
        return "checkpoint", checkpoint, in_run
    return "snapshot", snapshot, config


def _no_model_remedies(path: Path) -> list[str]:
    """What to look for and do when run folder ``path`` holds no model: where a model would be,
    what its ``status.json`` says of the run when it did not finish, and how a run keeps one, or,
    for a folder of runs (``train-many``'s), a few of them to give instead; each a short statement
    (a line of its own on the console)."""
    lines = ["looked for snapshots/step_N.pt, final.pt and a complete checkpoints/step_N/"]
    runs = sorted(p.parent.name for p in Path(path).glob("*/status.json"))
    if runs:  # a folder of runs (train-many's --out): each job's folder holds its model
        shown = ", ".join(str(Path(path) / name) for name in runs[:3]) + (" ..." if len(runs) > 3 else "")
        return lines + [f"this folder holds {counted(len(runs), 'run')}; give one of them: {shown}"]
    state = unfinished_state(path)
    if state == "still training":
        lines.append(f"{RunDir(path).status_path} says the run is still training")
    elif state is not None:
        lines.append(f"{RunDir(path).status_path} says the run did not finish before it kept one: {state}")
    return lines + ["train the run to its end: a finished run keeps its model here",
                    "or press Ctrl-C once: a one-process run keeps the model of its last step",
                    "or train with --snapshot-every N: a model is kept every N steps"]


def _snapshot_step(run: RunDir, snapshot: Path) -> int:
    """The step of a run's snapshot: from its name in ``snapshots/``, else from the file."""
    for step, path in run.snapshots():
        if path == snapshot:
            return step
    from trainer.train.snapshot import load_snapshot

    return int(load_snapshot(snapshot)["step"])


def _checkpoint_step(folder: Path) -> int:
    from trainer.parallel.checkpoint import load_meta

    return int(load_meta(folder)["step"])


def _config_from(saved: Any, where: Path) -> TrainConfig:
    if not isinstance(saved, dict):
        raise SnapshotError(f"{where}: holds no config to build the model from")
    try:
        return config_from_dict(saved, source=str(where))
    except ConfigError as exc:
        raise SnapshotError(f"{where}: its stored config is not valid here ({exc})") from None


def _read_run_config(path: Path) -> TrainConfig:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: unreadable run config ({exc})") from None
    return _config_from(saved, path)


def _inference_config(cfg: TrainConfig, device: str | None, cpu_fallback: bool, notes: list[str]) -> TrainConfig:
    """The run's config as one rendering process: no training images decoded, one rank, no
    injected faults; a CUDA run on a machine without CUDA renders on the CPU when
    ``cpu_fallback`` (a line in ``notes`` says so)."""
    overrides: dict[str, Any] = {
        "data.placement": "stream", "distributed.world_size": None, "faults.ranks": [],
        "faults.data_delay_ms": 0.0, "faults.compute_slowdown": 1.0, "faults.oom_at_step": None,
        "faults.crash_at_step": None, "faults.hang_at_step": None,
    }
    if device is not None:
        overrides["training.device"] = device
    elif cfg.training.device.startswith("cuda") and not torch.cuda.is_available():
        if not cpu_fallback:
            raise ConfigError(f"training.device: the run's {cfg.training.device!r} needs a CUDA device and this "
                              "machine has none; give --device cpu")
        overrides["training.device"] = "cpu"
        notes.append(f"the model trained on {cfg.training.device} and this machine has no CUDA device: rendering on "
                     "the CPU, much more slowly")
    return apply_overrides(cfg, overrides)


def _trained_scene_model(cfg: TrainConfig, trainer_state: Any) -> TrainConfig:
    """The run's config with ``training.scene_model`` "auto" replaced by the model the snapshot was
    trained with (``trainer_state["scene_model"]``; absent: a box model, written before the
    unbounded model existed), so a model renders as it trained whatever ``auto`` picks today."""
    if cfg.training.scene_model != "auto" or not isinstance(trainer_state, dict):
        return cfg
    return apply_overrides(cfg, {"training.scene_model": str(trainer_state.get("scene_model", "box"))})


def _trained_hash_grid(cfg: TrainConfig, trainer_state: Any) -> TrainConfig:
    """The run's config with a null ``encoding.n_features_per_level`` or
    ``encoding.log2_hashmap_size`` replaced by the value the model was trained with
    (``trainer_state["hash_grid"]``, :func:`trainer.train.snapshot_state.stored_hash_grid`), and a
    derived finest resolution (``encoding.max_resolution`` and ``per_level_scale`` null) by the one
    it trained with (``trainer_state["finest_resolution"]``), so a model renders as it trained
    whatever the scene model would choose today or the scene given (another size, a scene that
    moved) would derive."""
    from trainer.train.snapshot_state import HASH_GRID_KEYS, stored_hash_grid

    pinned: dict[str, int] = {}
    stored = stored_hash_grid(trainer_state)
    if stored is not None:
        pinned.update({f"encoding.{key}": value for key, value in zip(HASH_GRID_KEYS, stored)
                       if getattr(cfg.encoding, key) is None})
    finest = trainer_state.get("finest_resolution") if isinstance(trainer_state, dict) else None
    if is_int(finest) and cfg.encoding.max_resolution is None and cfg.encoding.per_level_scale is None:
        pinned["encoding.max_resolution"] = int(finest)
    return apply_overrides(cfg, pinned) if pinned else cfg


def trained_skipped_frames(path: Path) -> int | None:
    """How many frames the run that ``path`` (a run folder, or a snapshot or checkpoint in one)
    comes from left out for missing image files: its ``status.json``'s ``skipped_frames`` (0 when
    the run recorded none), None when no run folder with a status is found."""
    from trainer.contract.runstatus import SKIPPED_FRAMES_KEY

    path = Path(path)
    for folder in (path, path.parent, path.parent.parent) if path.is_dir() else (path.parent, path.parent.parent):
        run = RunDir(folder)
        if run.status_path.is_file():
            status = run.read_status() or {}
            return int(status.get(SKIPPED_FRAMES_KEY, 0))
    return None


def _load_scene(cfg: TrainConfig, scene_path: Path | None, trained_skips: int | None = None) -> Any:
    """The run's scene (or ``scene_path``); the loader's warning about frames skipped for missing
    image files is left unsaid when the run skipped as many (``trained_skips``: the user was told
    when it trained), every other warning passes."""
    from trainer.data import SkippedFramesWarning, load_scene

    if scene_path is None:
        from trainer.data.demo import demo_scene_path

        scene_path = Path(cfg.data.scene) if cfg.data.scene else demo_scene_path()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scene = load_scene(Path(scene_path), downscale=cfg.data.downscale, min_downscale=cfg.data.min_downscale,
                               holdout_every=cfg.data.holdout_every, aabb_scale=cfg.data.aabb_scale)
    except SceneError as exc:
        raise SceneError(f"{exc} (the run's scene, data.scene; give another place with --scene)") from None
    for warning in caught:
        if issubclass(warning.category, SkippedFramesWarning) and trained_skips == len(scene.skipped):
            continue
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return scene


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model is and what it was trained with, found without loading its scene or building it
    (a command's first line is printed from it before the slow part begins).

    Attributes:
        kind: ``"snapshot"`` or ``"checkpoint"``.
        source: the snapshot file or checkpoint folder the weights come from.
        step: the training step of those weights.
        cfg: the config the model was trained with (the run's ``config.json`` when ``path`` is a run
            folder, else the one stored with the weights).
        payload: a checkpoint's ``meta.json``; the snapshot's contents when finding the step or
            config needed them (else None: :func:`load_model` reads the file).
        notes: what the user should know about the run the model comes from (its ``status.json``
            says it is still running, or is stale: :func:`run_state_note`).
    """

    kind: str
    source: Path
    step: int
    cfg: TrainConfig
    payload: dict | None = None
    notes: tuple[str, ...] = ()


def unfinished_state(path: Path) -> str | None:
    """How the run in folder ``path`` did not finish, from its ``status.json``: ``stale: process
    PID no longer exists, killed before it could write its end``, ``still training``, ``failed:
    <reason>``, ``interrupted: <reason>``, ``diverged: <reason>``; None for a completed run, a
    folder without a status, or a file. No bracket of its own (a reason may hold one): the lines
    that show it put it after a colon, never inside a bracket."""
    from trainer.contract.runstatus import COMPLETED, REASON_KEY, RUNNING, stale_pid, state_of, state_text

    status = RunDir(path).read_status() if Path(path).is_dir() else None
    state = state_of(status)
    if state in (None, COMPLETED):
        return None
    if state == RUNNING:
        if stale_pid(status) is not None:
            return f"{state_text(status)}, killed before it could write its end"
        return "still training"
    if status.get("interrupted_during") == "evaluation":
        return f"{state} during its final evaluation, after training"
    reason = status.get(REASON_KEY)
    return f"{state}: {reason}" if reason else str(state)


def run_state_note(path: Path, model: str) -> str | None:
    """A line on the model ``model`` (its words: ``snapshot FILE (step N)``) of a run folder whose
    ``status.json`` says it did not finish (:func:`unfinished_state`): stale (its process no longer
    exists: killed without writing its end), still training, failed, interrupted or diverged; None
    for any other folder or state."""
    state = unfinished_state(path)
    if state is None:
        return None
    status_path = RunDir(path).status_path
    if state == "still training":
        return f"{status_path}: the run is still training; using its newest {model} so far"
    return f"{status_path}: the run did not finish: {state}; using its newest complete {model}"


def locate_model(path: Path) -> ModelSource:
    """The model at ``path`` (as :func:`load_model` takes it): its file or folder, step and config,
    without loading the scene or building the model.

    Raises:
        SnapshotError: as :func:`find_model_source`; a truncated snapshot; no readable config.
    """
    from trainer.train.snapshot import load_snapshot

    kind, source, run_config = find_model_source(Path(path))
    skipped = None  # a newer snapshot of the run folder that does not load
    if kind == "checkpoint":
        from trainer.parallel.checkpoint import load_meta

        payload = load_meta(source)
        cfg = _read_run_config(run_config) if run_config else _config_from(payload.get("config"), source / "meta.json")
        step = int(payload["step"])
    else:
        named = [step for step, snap in RunDir(Path(path)).snapshots() if snap == source] if run_config else []
        if named:  # a run folder: its newest snapshot that loads (a killed save may have left one broken)
            source, step, payload, skipped = _newest_loadable(RunDir(Path(path)), named[0])
        else:
            payload = load_snapshot(source)
            step = int(payload["step"])
        cfg = _read_run_config(run_config) if run_config else _config_from(payload.get("config"), source)
    notes = [skipped] if skipped is not None else []
    note = run_state_note(Path(path), f"{kind} {source} (step {step})")
    notes += [note] if note is not None else []
    return ModelSource(kind, source, step, cfg, payload, tuple(notes))


def _newest_loadable(run: RunDir, newest_step: int) -> tuple[Path, int, dict, str | None]:
    """``(snapshot, step, contents, note)`` of the newest snapshot of ``run`` up to step
    ``newest_step`` that loads; ``note`` names the newer ones that did not (None when the newest
    loaded).

    Raises:
        SnapshotError: the newest one's error, when none of them loads.
    """
    from trainer.train.snapshot import load_snapshot

    failed: list[SnapshotError] = []
    for step, snapshot in reversed([(s, p) for s, p in run.snapshots() if s <= newest_step]):
        try:
            payload = load_snapshot(snapshot)
        except SnapshotError as exc:
            failed.append(exc)
            continue
        note = None if not failed else (
            f"{failed[0]}; using the newest snapshot that loads, {snapshot} (step {step})"
            + (f", after {len(failed)} that do not" if len(failed) > 1 else ""))
        return snapshot, step, payload, note
    raise failed[0]


def model_config(path: Path) -> TrainConfig:
    """The config the model at ``path`` (as :func:`load_model` takes it) was trained with, without
    building the model (a launcher's opening line: device, threads).

    Raises:
        SnapshotError: as :func:`find_model_source`, or no readable config.
    """
    return locate_model(path).cfg


def inference_device(cfg: TrainConfig, device: str | None = None) -> torch.device:
    """The device :func:`load_model` puts the model of ``cfg`` on: ``device``, else the run's
    ``training.device`` (``auto``: CUDA when there is one).

    Raises:
        ConfigError: the run trained on CUDA, ``device`` is None and this machine has no CUDA
            (names ``training.device``; :func:`load_model` raises the same).
    """
    from trainer.train.build import resolve_device

    return resolve_device(_inference_config(cfg, device, False, []).training.device)


def load_model(path: Path, scene_path: Path | None = None, device: str | None = None,
               cpu_fallback: bool = False, located: ModelSource | None = None) -> LoadedModel:
    """Load a trained model for rendering (module docstring).

    Args:
        path: a run folder, a snapshot file or a checkpoint folder.
        scene_path: the scene (default: the run's ``data.scene``, or the demo scene).
        device: ``"cpu"``, ``"cuda"``, ... (default: the run's ``training.device``).
        cpu_fallback: with ``device`` None, a model trained on CUDA loads on the CPU of a machine
            without CUDA (``LoadedModel.notes`` says so) instead of raising.
        located: :func:`locate_model` of ``path`` when the caller has it already (not found again).

    Raises:
        SnapshotError: no model found, a truncated or corrupt file, a snapshot of another config
            (names the entry and both shapes).
        SceneError: the scene cannot be loaded.
        ConfigError: the run trained on CUDA, ``device`` is None, this machine has no CUDA and
            ``cpu_fallback`` is False.
    """
    from trainer.train.snapshot import load_snapshot, load_state_checked

    found = located if located is not None else locate_model(Path(path))
    source, notes = found.source, list(found.notes)
    cfg = _inference_config(found.cfg, device, cpu_fallback, notes)
    if found.kind == "snapshot":
        payload = found.payload if found.payload is not None else load_snapshot(source)
        cfg = _trained_hash_grid(_trained_scene_model(cfg, payload.get("trainer_state")), payload.get("trainer_state"))
        from trainer.train.loop import Trainer
        from trainer.train.snapshot_state import check_finest_resolution, check_hash_grid, check_scene_model

        trainer = Trainer(cfg, _load_scene(cfg, scene_path, trained_skipped_frames(path)), None)
        check_finest_resolution(source, payload.get("trainer_state"), trainer.finest_resolution)
        check_scene_model(source, payload.get("trainer_state"), trainer.scene_model)
        check_hash_grid(source, payload.get("trainer_state"), payload.get("config"), trainer.hash_grid)
        load_state_checked(trainer.field, payload["model"], "model", source)
        load_state_checked(trainer.grid, payload["occupancy"], "occupancy grid", source)
        trainer.step = int(payload["step"])
        mode = "single"
    else:
        from trainer.parallel.build import build_distributed_trainer
        from trainer.train.snapshot_state import ConfigDifferenceWarning

        meta = found.payload if found.payload is not None else {}
        cfg = _trained_hash_grid(_trained_scene_model(cfg, meta.get("trainer_state")), meta.get("trainer_state"))
        trainer = build_distributed_trainer(cfg, _load_scene(cfg, scene_path, trained_skipped_frames(path)), None)
        with warnings.catch_warnings():  # the placement and world size differ on purpose
            warnings.filterwarnings("ignore", category=ConfigDifferenceWarning)
            trainer.load_checkpoint(source)
        mode = trainer.mode
    trainer.field.eval()
    return LoadedModel(trainer=trainer, source=source, step=int(trainer.step), mode=mode, notes=notes)


def precision_autocast(trainer: Any) -> Any:
    """``torch.autocast`` for the run's ``training.precision`` (:func:`trainer.train.precision.autocast`)."""
    from trainer.train.precision import autocast

    return autocast(trainer.device, trainer.cfg.training.precision)

"""What a run checks before it trains, and where it resumes from: the scene and the ``--out``
folder, a distributed job or one process, the snapshot or checkpoint to continue, the step it
must reach."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from trainer.contract.config import TrainConfig
from trainer.contract.errors import ConfigError, SceneError, SnapshotError
from trainer.contract.formats import check_scene_found, held_scene
from trainer.contract.runstatus import fitted_warning
from trainer.contract.rundir import RunDir, checkpoint_step, latest_checkpoint
from trainer.run.settings import scene_path_of

__all__ = ["check_before_start", "check_n_steps_reach", "distributed_env", "has_checkpoint", "named_resume_step",
           "resume_path", "resume_source"]


def check_before_start(cfg: TrainConfig, out: Path | None, resume: Path | None) -> None:
    """What the process that starts a job checks before it writes anything: the scene exists,
    a ``--resume`` path exists, and an ``--out`` folder that already holds a run is refused unless ``--resume`` continues it
    (two runs never mix their metrics in one folder). Workers do not check the folder: they share
    it and may be restarted into it.

    Raises:
        SceneError: the scene path does not exist, or holds no scene (of ``data.format``:
            :func:`~trainer.contract.formats.check_scene_found`).
        SnapshotError: the ``--resume`` path does not exist, or is a folder without a snapshot or
            a complete checkpoint (a scene folder is named so).
        ConfigError: ``--out`` holds a run (names the folder and what is in it).
    """
    scene_path = scene_path_of(cfg)
    if not scene_path.exists():
        raise SceneError(f"--scene {scene_path}: scene path does not exist")
    check_scene_found(scene_path, cfg.data.format)  # a folder of no scene (a capture's images/), before the run folder
    if resume is not None and not Path(resume).exists():
        raise SnapshotError(f"--resume {resume}: no such file or folder (expected a snapshot file, a run folder or a "
                            "checkpoint folder)")
    if resume is not None and Path(resume).is_dir() and RunDir(resume).model_snapshot() is None \
            and latest_checkpoint(Path(resume)) is None:
        scene = held_scene(resume)
        what = f"{scene.with_article}, not a run" if scene is not None else \
            "no snapshot or complete checkpoint in this folder"
        raise SnapshotError(f"--resume {resume}: {what} (expected a snapshot file, a run folder or a checkpoint "
                            "folder)")
    named = named_resume_step(resume) if resume is not None else None
    if named is not None:  # the step its name says, before the run folder is written (the load checks again)
        check_n_steps_reach(cfg, *named)
    if out is None or resume is not None:
        return
    run_dir = RunDir(out)
    reason = run_dir.existing_run()
    if reason is None or failed_before_training(run_dir):
        return
    snapshot = run_dir.latest_snapshot()
    if snapshot is not None:
        how = f"choose a new folder, or continue that run with --resume {snapshot}"
    elif has_checkpoint(run_dir):
        how = f"choose a new folder, or continue that run with --resume {out}"
    else:
        how = "choose a new folder (it has no snapshot or checkpoint to resume from)"
    raise ConfigError(f"--out {out}: already holds a run ({reason}); {how}")


def failed_before_training(run_dir: RunDir) -> bool:
    """Whether the folder holds only a run that failed before its first metrics record (a scene
    or config the loader refused): no records, snapshot or checkpoint, so a new run may use it
    (the corrected command again, as its error asked)."""
    status = run_dir.read_status() or {}
    return (status.get("state") == "failed" and not run_dir.metrics_path(0).is_file()
            and run_dir.model_snapshot() is None and not has_checkpoint(run_dir))


def has_checkpoint(run_dir: RunDir) -> bool:
    """Whether the run directory holds a complete checkpoint (half-written ``.partial`` folders
    of killed writes do not count)."""
    from trainer.parallel.checkpoint import list_checkpoints

    return bool(list_checkpoints(run_dir.checkpoints_dir))


def distributed_env(cfg: TrainConfig, args: argparse.Namespace):
    """The :class:`DistEnv` when this process should run the distributed trainer, else None."""
    from trainer.parallel.dist_env import detect_dist_env

    env = detect_dist_env(cfg)
    if env.is_distributed or (args.resume is not None and Path(args.resume).is_dir()):
        return env  # (a folder: sharded checkpoints, resumed on one process, or their absence reported there)
    return None


def resume_path(resume: Path | None, out: Path | None = None) -> Path | None:
    """``--resume`` as given, except a single-process run's folder (snapshots or a ``final.pt``,
    no checkpoints): its newest snapshot whose archive is sound (``snapshots/``, then ``final.pt``:
    :meth:`~trainer.contract.rundir.RunDir.model_snapshot`). Newer ones that are not (a save
    killed, a file damaged) are skipped with a warning naming them; resumed into the same folder
    (``out``), each is kept as ``<name>.damaged`` so the run does not write over it. None sound:
    the newest, whose load names its problem."""
    if resume is None or not Path(resume).is_dir():
        return resume
    run = RunDir(resume)
    snapshot = run.model_snapshot()
    if snapshot is None or latest_checkpoint(Path(resume)) is not None:
        return resume
    from trainer.train.snapshot import archive_problem

    candidates = [path for _, path in reversed(run.snapshots())]
    if run.root_snapshot_path.is_file():
        candidates.append(run.root_snapshot_path)
    skipped: list[tuple[Path, str]] = []
    for candidate in candidates:
        problem = archive_problem(candidate)
        if problem is None:
            if skipped:
                _say_skipped(resume, out, skipped, candidate)
            return candidate
        skipped.append((candidate, problem))
    return snapshot


def _say_skipped(resume: Path, out: Path | None, skipped: list[tuple[Path, str]], chosen: Path) -> None:
    """Warn of the snapshots a resume skipped; in the resumed folder itself, move each aside to
    ``<name>.damaged`` first (the run would write its own snapshot of that step over it)."""
    same_folder = out is not None and Path(out).resolve() == Path(resume).resolve()
    names = []
    for path, problem in skipped:
        kept = ""
        if same_folder and path.parent == RunDir(resume).snapshots_dir and (path.is_file() or path.is_symlink()):
            aside = path.with_name(path.name + ".damaged")
            path.rename(aside)
            kept = f", kept as {aside.name}"
        names.append(f"{path} ({problem}{kept})")
    warnings.warn(fitted_warning(f"--resume {resume}: skipping {'; '.join(names)}; resuming from {chosen}, the "
                                 "newest sound snapshot"), stacklevel=3)


def named_resume_step(resume: Path) -> tuple[int, str] | None:
    """The step a ``--resume`` path resumes at as its name says, and what it is (as
    :func:`check_n_steps_reach` names it): a folder's newest complete checkpoint
    (``checkpoints/step_<N>``) or else its newest snapshot (``snapshots/step_<N>.pt``), or a
    snapshot file named ``step_<N>.pt``; None where no name says (``final.pt``, a missing path)."""
    resume = Path(resume)
    if resume.is_dir():
        checkpoint = latest_checkpoint(resume)
        step = checkpoint_step(checkpoint) if checkpoint is not None else None
        if step is not None:
            return step, f"checkpoint {checkpoint}"
        snapshot = RunDir(resume).latest_snapshot()
        return (RunDir.snapshot_step(snapshot), f"snapshot {snapshot}") if snapshot is not None else None
    step = RunDir.snapshot_step(resume) if resume.is_file() else None
    return (step, f"snapshot {resume}") if step is not None else None


def check_n_steps_reach(cfg: TrainConfig, resumed_step: int, source: str) -> None:
    """A resumed run must not stop before the step it resumed at.

    Raises:
        ConfigError: ``training.n_steps`` below ``resumed_step`` (``source`` names the snapshot or
            checkpoint, e.g. ``"snapshot runs/x/snapshots/step_0000300.pt"``).
    """
    if resumed_step > cfg.training.n_steps:
        raise ConfigError(f"training.n_steps: {cfg.training.n_steps} is below step {resumed_step} of the "
                          f"{source}; give --n-steps {resumed_step} or more")


def resume_source(resume: Path | None, run_dir: RunDir) -> Path | None:
    """Where a distributed run resumes from: ``--resume``, except after a restart by the elastic
    agent (``--max-restarts``), where the run directory's own newest complete checkpoint wins when
    it is at least as far as ``--resume`` (the restart must not redo the steps since then)."""
    from trainer.parallel.dist_env import restart_count

    if restart_count() == 0:
        return resume
    own = latest_checkpoint(run_dir.root)
    if own is None:
        return resume
    if resume is None:
        return run_dir.root
    source = latest_checkpoint(resume)
    source_step = checkpoint_step(source) if source is not None else None
    own_step = checkpoint_step(own)
    if source_step is None or (own_step is not None and own_step >= source_step):
        return own
    return resume

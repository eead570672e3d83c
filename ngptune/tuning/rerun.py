"""Confirmation re-runs as trainer launches: a trial's configuration with a new seed and without
the pruner's evaluation marks (:meth:`~ngptune.tuning.specs.StudySpec.rerun_overrides`), trained with
the trial's budget on the same ranks (:mod:`ngptune.tuning.confirm` decides on the results)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ngptune.tuning import nccl
from ngptune.tuning.confirm import ConfirmRun
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.objectives import TargetNotReached, objective_value, trial_quality
from ngptune.tuning.specs import StudySpec
from ngptune.tuning.trial import TrialLaunch, run_trial, trial_argv
from trainer.contract import apply_overrides, atomic_write_text, dump_config, free_path, load_config

__all__ = ["MODEL_SUFFIXES", "RerunLauncher", "keep_earlier_attempt"]


@dataclasses.dataclass(frozen=True)
class RerunLauncher:
    """``launch(label, trial, index, seed)`` for :func:`ngptune.tuning.confirm.confirm_study`.

    Attributes:
        spec: the study; objective: the objective judged; study_dir: where re-runs are written
            (``confirm/trial<N>-run<index>/`` with its config and launch log beside it; what an
            earlier attempt left there, a re-run that failed or was stopped, is moved to
            ``confirm/earlier/trial<N>-run<index>-<attempt>/`` first, its logs and records kept and
            its model files removed);
        nproc_per_node, nccl_active, poll_s: as for the trials.
    """

    spec: StudySpec
    objective: str
    study_dir: StudyDir
    nproc_per_node: int
    nccl_active: bool
    poll_s: float = 0.5

    def __call__(self, label: str, trial: Any, index: int, seed: int) -> ConfirmRun:
        cfg = apply_overrides(load_config(Path(trial.user_attrs["config_path"])), self.spec.rerun_overrides(seed))
        config_path = self.study_dir.confirm_config_path(trial.number, index)
        run_dir = self.study_dir.confirm_run_dir(trial.number, index)
        keep_earlier_attempt(self.study_dir, trial.number, index)
        config_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(config_path, dump_config(cfg) + "\n")
        nccl_env = dict(trial.user_attrs.get("nccl_env") or nccl.FORCED)
        launch = TrialLaunch(
            argv=trial_argv(config_path, run_dir, self.nproc_per_node, evaluate=True),
            env=nccl.trial_env(os.environ, nccl_env, nccl_active=self.nccl_active),
            run_dir=run_dir,
            log_path=self.study_dir.confirm_log_path(trial.number, index),
            world_size=self.nproc_per_node,
            timeout_s=self.spec.budget.trial_timeout_s,
            poll_s=self.poll_s,
        )
        run = run_trial(launch, None)
        quality = trial_quality(run.records, run.status or {})
        target = next((o.target_db for o in self.spec.objectives if o.name == self.objective), None)
        reason = run.reason or ""
        value = None
        if run.outcome == "completed":
            try:
                value = objective_value(self.objective, run.records, run.status or {}, target_db=target)
            except TargetNotReached as exc:
                reason = str(exc)
        return ConfirmRun(label, trial.number, index, seed, value, quality, run.outcome, reason)


MODEL_SUFFIXES = (".pt", ".pth", ".distcp")
"""Files of an earlier attempt's run folder that are not kept (snapshots and checkpoints)."""


def keep_earlier_attempt(study_dir: StudyDir, trial: int, index: int) -> Path | None:
    """Move what an earlier attempt at re-run ``index`` of ``trial`` left (its run folder and launch
    log) to :meth:`~ngptune.tuning.layout.StudyDir.earlier_attempt_dir`, without its model files;
    None when it left nothing."""
    run_dir, log = study_dir.confirm_run_dir(trial, index), study_dir.confirm_log_path(trial, index)
    if not run_dir.exists() and not log.exists():
        return None
    aside = free_path(lambda attempt: study_dir.earlier_attempt_dir(trial, index, attempt))
    aside.mkdir(parents=True)
    if log.exists():
        log.rename(aside / log.name)
    if run_dir.exists():
        for path in list(run_dir.rglob("*")):
            if path.suffix in MODEL_SUFFIXES and path.is_file():
                path.unlink()
        run_dir.rename(aside / "run")
    return aside

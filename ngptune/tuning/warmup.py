"""A throw-away trainer launch that fills the kernel cache before the first trial.

The first training process on a fresh host compiles its kernels (Triton, CUDA graphs) inside its
first steps. A trial with a seconds budget pays that compilation from its budget: on a fresh H200
the default trial (trial 0, the first to run) made 53 steps in its 6 s against 347–377 in its own
re-runs. The trainer reports its start-up (``startup_s`` in ``status.json`` and the first metrics
record; ``startup_s`` is a column of its metrics schema) and excludes it from the training clock;
with a trainer that does not, until a run of the study shows that report, the sweep launches the default configuration once for a few steps (:data:`WARMUP_STEPS` past the
occupancy warm-up, no evaluation) before trial 0, in ``OUT/warmup/``, on the GPUs of the first
trial slot. The kernel cache is on disk, shared by every device of the host, so one launch serves
every slot.

It is needed only where a clock decides: trials on CUDA with a ``budget.seconds`` or a time
objective. A step budget's PSNR does not depend on how long the first step took, and on a CPU
there is no kernel to compile. A study whose runs report ``startup_s`` (study attribute
:data:`STARTUP_REPORTED_ATTR`) is not warmed again.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

from ngptune.tuning import nccl
from ngptune.tuning.concurrency import TrialSlots
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.objectives import TRAINER_REPORTS_STARTUP, startup_s
from ngptune.tuning.specs import StudySpec
from ngptune.tuning.trial import TrialLaunch, TrialRun, run_trial, trial_argv
from trainer.contract import TrainConfig, apply_overrides, atomic_write_text, dump_config

__all__ = ["STARTUP_REPORTED_ATTR", "WARMUP_STEPS", "needs_warm_up", "warm_kernel_cache", "warmup_config"]

#: Study attribute: true once a run of the study reported ``startup_s`` (no warm-up needed).
STARTUP_REPORTED_ATTR = "trainer_reports_startup"
#: Steps of the warm-up launch after the occupancy warm-up (so the grid update kernels run too).
WARMUP_STEPS = 8
#: The warm-up's wall-clock limit (s): it is killed past this; a sweep does not wait longer for it.
WARMUP_TIMEOUT_S = 600.0


def needs_warm_up(spec: StudySpec, study, uses_cuda: bool, *,
                  trainer_reports_startup: bool = TRAINER_REPORTS_STARTUP) -> bool:
    """Whether the sweep warms the kernel cache before trial 0 (see the module docstring): trials
    on CUDA, a seconds budget or a time objective, the default trial not yet completed, a trainer
    whose metrics schema does not declare ``startup_s`` and no run of the study that reported it."""
    clocked = spec.budget.seconds is not None or any(o.name == "time_to_psnr_s" for o in spec.objectives)
    if trainer_reports_startup or not (uses_cuda and clocked) or study.user_attrs.get(STARTUP_REPORTED_ATTR) is True:
        return False
    trials = study.get_trials(deepcopy=False)
    if any((t.user_attrs.get("quality") or {}).get("startup_s") is not None for t in trials):
        return False
    return not any(t.user_attrs.get("is_default") is True and t.state.name == "COMPLETE" for t in trials)


def warmup_config(base_cfg: TrainConfig, default_values: dict[str, Any], scene: str) -> TrainConfig:
    """The default trial's config trained for :data:`WARMUP_STEPS` steps after the occupancy
    warm-up, with no time budget and no periodic evaluation."""
    steps = base_cfg.training.occupancy_warmup_steps + WARMUP_STEPS
    return apply_overrides(base_cfg, {**default_values, "data.scene": scene, "training.n_steps": steps,
                                      "training.time_budget_s": None, "training.eval_every": 0})


def warm_kernel_cache(study, *, cfg: TrainConfig, study_dir: StudyDir, nproc_per_node: int, nccl_active: bool,
                      slots: TrialSlots, poll_s: float = 0.5) -> TrialRun | None:
    """Run the warm-up launch of ``cfg`` (:func:`warmup_config`) on the first free trial slot and
    record in ``study`` whether the trainer reported its start-up. Its outcome does not matter to
    the sweep (a failure shows again in trial 0, with its log); returns its :class:`TrialRun`, or
    None when the sweep stopped before a slot was free."""
    run_dir = study_dir.warmup_dir
    if run_dir.exists():
        shutil.rmtree(run_dir)
    config_path = study_dir.warmup_config_path
    config_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, dump_config(cfg) + "\n")
    launch = TrialLaunch(
        argv=trial_argv(config_path, run_dir, nproc_per_node, evaluate=False),
        env=nccl.trial_env(os.environ, dict(nccl.FORCED), nccl_active=nccl_active),
        run_dir=run_dir,
        log_path=study_dir.warmup_log_path,
        world_size=nproc_per_node,
        timeout_s=WARMUP_TIMEOUT_S,
        poll_s=poll_s,
    )
    slot = slots.pool.claim(stop=slots.stop)
    if slot is None:
        return None
    leftover: list[int] = []
    try:
        run = run_trial(dataclasses.replace(launch, env=slot.env(launch.env)), None)
        leftover = run.leftover_pids
    finally:
        slots.pool.release(slot, leftover)
    if startup_s(run.records, run.status or {}) is not None:
        study.set_user_attr(STARTUP_REPORTED_ATTR, True)
    return run

"""Trials side by side: how many run at once, on which GPUs (:mod:`ngptune.scheduling.slots`).

``--gpus-per-trial G`` (default: every visible GPU) and ``--concurrent-trials N|auto`` (auto:
visible GPUs × K // G; default 1) give each running trial a disjoint set of G GPUs through
``CUDA_VISIBLE_DEVICES``. ``--trials-per-gpu K`` (default 1) lets K trials share one GPU; the
throughput of such trials depends on their neighbours, so a study with an objective that depends on
how fast a trial trains (:attr:`~ngptune.tuning.objectives.ObjectiveDef.timing_sensitive`) refuses
it unless ``--allow-shared-gpu`` is given, and the report says so. On a host without GPUs a
slot is a set of processes and the default stays one trial at a time.
"""

from __future__ import annotations

import dataclasses
import threading

from ngptune.scheduling.slots import SlotPool, slots_per_node, visible_gpus
from ngptune.tuning.objectives import OBJECTIVES
from ngptune.tuning.study import StudySpec
from trainer.contract import ConfigError

__all__ = ["TrialSlots", "plan_trial_slots"]


@dataclasses.dataclass
class TrialSlots:
    """The sweep's slot pool and how many trials it runs at once.

    Attributes:
        pool: the :class:`SlotPool` (``gpus_per_slot`` 0 on a host without GPUs).
        concurrent: trials at once (Optuna's ``n_jobs``).
        trials_per_gpu: trials that may share one GPU.
        stop: set to stop trials waiting for a slot (the sweep is ending).
    """

    pool: SlotPool
    concurrent: int
    trials_per_gpu: int
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)


def plan_trial_slots(spec: StudySpec, *, nproc: int, uses_cuda: bool, gpus_per_trial: int | None,
                     concurrent_trials: int | str | None, trials_per_gpu: int = 1,
                     allow_shared_gpu: bool = False) -> TrialSlots:
    """Check the concurrency flags against the visible GPUs and the study; build the pool.

    Args:
        spec: the study (its objectives decide whether GPUs may be shared).
        nproc: ranks per trial; with CUDA each rank needs a GPU of the trial's set.
        uses_cuda: whether the trials' ranks run on CUDA.
        gpus_per_trial, concurrent_trials, trials_per_gpu, allow_shared_gpu: the flags.

    Raises:
        ConfigError: one line naming the flag: ``--gpus-per-trial`` 0 or more than the visible GPUs,
            ``--concurrent-trials`` needing more GPUs than exist, ranks that do not fit the trial's
            GPUs, or ``--trials-per-gpu`` > 1 with a timing-sensitive objective.
    """
    gpus = visible_gpus()
    if trials_per_gpu < 1:
        raise ConfigError(f"--trials-per-gpu: expected an integer >= 1, got {trials_per_gpu}")
    if gpus_per_trial is not None and gpus_per_trial < 1:
        raise ConfigError(f"--gpus-per-trial: expected an integer >= 1, got {gpus_per_trial}")
    if gpus_per_trial is not None and gpus_per_trial > len(gpus):
        raise ConfigError(f"--gpus-per-trial {gpus_per_trial}: only {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} "
                          "visible")
    per_trial = gpus_per_trial or len(gpus)
    if uses_cuda and gpus and nproc > per_trial:
        raise ConfigError(f"--gpus-per-trial {per_trial}: each trial runs {nproc} CUDA ranks (--nproc-per-node), "
                          f"one GPU each; give --gpus-per-trial {nproc} or fewer ranks")
    shared_objectives = [o.name for o in spec.objectives if OBJECTIVES[o.name].timing_sensitive]
    if trials_per_gpu > 1 and shared_objectives and not allow_shared_gpu:
        raise ConfigError(f"--trials-per-gpu {trials_per_gpu}: {spec.path} optimises {', '.join(shared_objectives)}, "
                          "which trials sharing a GPU distort; add --allow-shared-gpu to accept that")
    fit = slots_per_node(len(gpus), max(per_trial, 1), trials_per_gpu)
    if concurrent_trials is None:
        concurrent = 1
    elif concurrent_trials == "auto":
        concurrent = fit
    else:
        concurrent = int(concurrent_trials)
        if concurrent < 1:
            raise ConfigError(f"--concurrent-trials: expected an integer >= 1 or auto, got {concurrent}")
        if gpus and concurrent > fit:
            raise ConfigError(f"--concurrent-trials {concurrent}: trials of {per_trial} GPU{'s' if per_trial > 1 else ''} "
                              f"need {concurrent * per_trial} GPUs, {len(gpus)} visible"
                              + (f" (x{trials_per_gpu} trials per GPU)" if trials_per_gpu > 1 else ""))
    pool = SlotPool(gpus, per_trial, per_gpu=trials_per_gpu, capacity=concurrent, flag="--gpus-per-trial")
    return TrialSlots(pool=pool, concurrent=concurrent, trials_per_gpu=trials_per_gpu)

"""Trials side by side: how many run at once, on which GPUs or cores (:mod:`ngptune.scheduling.slots`).

Bounded by the host and by the study, never by the flags alone:

* GPU host: ``--gpus-per-trial G`` (default: every visible GPU) and ``--concurrent-trials N|auto``
  (auto: visible GPUs × K // G; default 1) give each running trial a disjoint set of G GPUs
  through ``CUDA_VISIBLE_DEVICES``; more than fit is refused. ``--trials-per-gpu K`` lets K trials
  share one GPU. A trial with a step budget trains its N steps whatever its neighbours do, so
  sharing is fair for it: a study with ``budget.steps`` packs :data:`STEP_BUDGET_TRIALS_PER_GPU`
  trials per GPU by default (with as many at once as fit).
* CPU host (no GPU): a trial takes ``--nproc-per-node`` ranks × ``training.cpu_threads`` threads
  (0: every core, the trainer's ``cores // ranks`` rule on an idle host, fewer where other work keeps
  cores busy: :mod:`trainer.contract.threads`); at most ``cores // that`` trials run at
  once (at least one), and more ranks than cores are refused. ``--concurrent-trials`` above the
  bound runs the bound, and says so (:attr:`TrialSlots.note`). On a CPU host trials never share cores.
* Never more trials at once than the study still has to run (:meth:`TrialSlots.at_once`).

The seconds, throughput and time of trials sharing a GPU depend on their neighbours: a study with a
``budget.seconds`` or a timing-sensitive objective
(:attr:`~ngptune.tuning.objectives.ObjectiveDef.timing_sensitive`: the throughputs, time to a PSNR
target, PSNR at a budget of seconds) refuses K > 1 unless ``--allow-shared-gpu`` is given, and the
report says so.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from ngptune.scheduling.slots import SlotPool, slots_per_node, visible_gpus
from ngptune.tuning.objectives import OBJECTIVES
from ngptune.tuning.packing import STEP_BUDGET_TRIALS_PER_GPU, STEP_BUDGET_TRIALS_PER_GPU_ENV
from ngptune.tuning.study import StudySpec
from trainer.contract import ConfigError, available_cores

__all__ = ["STEP_BUDGET_TRIALS_PER_GPU", "STEP_BUDGET_TRIALS_PER_GPU_ENV", "TrialSlots", "default_trials_per_gpu",
           "host_cores", "plan_trial_slots", "shared_gpu_distorts"]


def default_trials_per_gpu(spec: StudySpec, n_gpus: int) -> int:
    """Trials per GPU without ``--trials-per-gpu``: :data:`STEP_BUDGET_TRIALS_PER_GPU` (or
    ``$NGPTUNE_STEP_BUDGET_TRIALS_PER_GPU``) for a step-budget study with no throughput or time
    objective on a host with GPUs, else 1.

    Raises:
        ConfigError: the environment variable is not an integer >= 1.
    """
    if not n_gpus or spec.budget.steps is None or shared_gpu_distorts(spec):
        return 1
    text = os.environ.get(STEP_BUDGET_TRIALS_PER_GPU_ENV)
    if text is None:
        return STEP_BUDGET_TRIALS_PER_GPU
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"{STEP_BUDGET_TRIALS_PER_GPU_ENV}: expected an integer >= 1, got {text!r}")
    return int(text)


def shared_gpu_distorts(spec: StudySpec) -> list[str]:
    """What a neighbour on the same GPU distorts: the study's objectives that depend on how fast a
    trial trains (:attr:`~ngptune.tuning.objectives.ObjectiveDef.timing_sensitive`) and a
    ``budget.seconds`` (the steps a trial makes in its seconds)."""
    distorted = [o.name for o in spec.objectives if OBJECTIVES[o.name].timing_sensitive]
    if spec.budget.seconds is not None:
        distorted.append(f"budget.seconds = {spec.budget.seconds:g}")
    return distorted


def host_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1: the contract's
    :func:`~trainer.contract.available_cores`, the count the trainer's thread rule divides."""
    return available_cores()


@dataclasses.dataclass
class TrialSlots:
    """The sweep's slot pool and how many trials it runs at once.

    Attributes:
        pool: the :class:`SlotPool` (``gpus_per_slot`` 0 on a host without GPUs).
        concurrent: trials at once (Optuna's ``n_jobs``).
        trials_per_gpu: trials that may share one GPU.
        stop: set to stop trials waiting for a slot (the sweep is ending).
        note: one line when the host bound lowered ``--concurrent-trials``, else None.
    """

    pool: SlotPool
    concurrent: int
    trials_per_gpu: int
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    note: str | None = None

    def at_once(self, still_to_run: int) -> int:
        """Trials to run side by side when the study needs ``still_to_run`` more (Optuna starts
        ``n_jobs`` trials at once, whether or not the study needs them): at least 1."""
        return max(1, min(self.concurrent, still_to_run))


def plan_trial_slots(spec: StudySpec, *, nproc: int, uses_cuda: bool, gpus_per_trial: int | None,
                     concurrent_trials: int | str | None, trials_per_gpu: int | None = 1,
                     allow_shared_gpu: bool = False, cpu_threads: int | None = None) -> TrialSlots:
    """Check the concurrency flags against the host and the study; build the pool.

    Args:
        spec: the study (its objectives decide whether GPUs may be shared).
        nproc: ranks per trial; with CUDA each rank needs a GPU of the trial's set, on a CPU a core.
        uses_cuda: whether the trials' ranks run on CUDA.
        gpus_per_trial, concurrent_trials, trials_per_gpu, allow_shared_gpu: the flags
            (``trials_per_gpu`` None: :func:`default_trials_per_gpu`, with as many trials at once
            as fit when ``concurrent_trials`` is None too).
        cpu_threads: ``training.cpu_threads`` of the trials (None: the study's base config's).

    Raises:
        ConfigError: one line naming the flag: ``--gpus-per-trial`` 0 or more than the visible GPUs,
            ``--concurrent-trials`` needing more GPUs than exist, ranks that do not fit the trial's
            GPUs or the host's cores, ``--trials-per-gpu`` > 1 with a seconds budget or a
            timing-sensitive objective, or on a host without GPUs.
    """
    gpus = visible_gpus()
    packed_by_default = trials_per_gpu is None and default_trials_per_gpu(spec, len(gpus)) > 1
    if trials_per_gpu is None:
        trials_per_gpu = default_trials_per_gpu(spec, len(gpus))
    if trials_per_gpu < 1:
        raise ConfigError(f"--trials-per-gpu: expected an integer >= 1, got {trials_per_gpu}")
    if gpus_per_trial is not None and gpus_per_trial < 1:
        raise ConfigError(f"--gpus-per-trial: expected an integer >= 1, got {gpus_per_trial}")
    if gpus_per_trial is not None and gpus_per_trial > len(gpus):
        raise ConfigError(f"--gpus-per-trial {gpus_per_trial}: only {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} "
                          "visible")
    if isinstance(concurrent_trials, int) and concurrent_trials < 1:
        raise ConfigError(f"--concurrent-trials: expected an integer >= 1 or auto, got {concurrent_trials}")
    if not gpus:
        if cpu_threads is None:
            cpu_threads = spec.base_config().training.cpu_threads
        return _cpu_slots(nproc, concurrent_trials, trials_per_gpu, cpu_threads)
    per_trial = gpus_per_trial or len(gpus)
    if uses_cuda and nproc > len(gpus):
        raise ConfigError(f"--nproc-per-node {nproc}: this host has {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}; "
                          f"each CUDA rank needs one of its own (give --nproc-per-node {len(gpus)} or fewer)")
    if uses_cuda and nproc > per_trial:
        raise ConfigError(f"--gpus-per-trial {per_trial}: each trial runs {nproc} CUDA ranks (--nproc-per-node), "
                          f"one GPU each; give --gpus-per-trial {nproc} or fewer ranks")
    distorted = shared_gpu_distorts(spec)
    if trials_per_gpu > 1 and distorted and not allow_shared_gpu:
        raise ConfigError(f"--trials-per-gpu {trials_per_gpu}: {spec.path} has {', '.join(distorted)}, "
                          "which trials sharing a GPU distort (a step budget does not); add --allow-shared-gpu "
                          "to accept that")
    fit = slots_per_node(len(gpus), max(per_trial, 1), trials_per_gpu)
    if concurrent_trials is None:
        concurrent = fit if packed_by_default else 1
    elif concurrent_trials == "auto":
        concurrent = fit
    else:
        concurrent = int(concurrent_trials)
        if concurrent > fit:
            raise ConfigError(f"--concurrent-trials {concurrent}: trials of {per_trial} GPU{'s' if per_trial > 1 else ''} "
                              f"need {concurrent * per_trial} GPUs, {len(gpus)} visible"
                              + (f" (x{trials_per_gpu} trials per GPU)" if trials_per_gpu > 1 else ""))
    pool = SlotPool(gpus, per_trial, per_gpu=trials_per_gpu, capacity=concurrent, flag="--gpus-per-trial")
    return TrialSlots(pool=pool, concurrent=concurrent, trials_per_gpu=trials_per_gpu)


def _cpu_slots(nproc: int, concurrent_trials: int | str | None, trials_per_gpu: int, cpu_threads: int) -> TrialSlots:
    """The slots of a host without GPUs: as many trials as its cores hold without sharing one
    (see the module docstring)."""
    cores = host_cores()
    plural = "s" if cores != 1 else ""
    if trials_per_gpu > 1:
        raise ConfigError(f"--trials-per-gpu {trials_per_gpu}: this host has no GPU; trials on a CPU never share "
                          f"cores (--concurrent-trials runs up to {cores} core{plural}' worth side by side)")
    if nproc > cores:
        raise ConfigError(f"--nproc-per-node {nproc}: this host has {cores} CPU core{plural} and no GPU; each gloo "
                          f"rank needs a core of its own (give --nproc-per-node {cores} or fewer)")
    threads = cpu_threads if cpu_threads >= 1 else max(1, cores // nproc)  # 0: the trainer's rule, idle host
    per_trial = nproc * threads
    fit = max(1, cores // per_trial)
    asked = fit if concurrent_trials == "auto" else int(concurrent_trials or 1)
    concurrent = min(asked, fit)
    note = None
    if asked > fit:
        note = (f"--concurrent-trials {asked}: {fit} trial{'s' if fit != 1 else ''} at a time on this host's {cores} "
                f"CPU core{plural} (each trial runs {nproc} rank{'s' if nproc != 1 else ''} × {threads} "
                f"thread{'s' if threads != 1 else ''}, training.cpu_threads); more would share cores and slow each other")
    pool = SlotPool([], 0, capacity=concurrent, flag="--gpus-per-trial")
    return TrialSlots(pool=pool, concurrent=concurrent, trials_per_gpu=1, note=note)

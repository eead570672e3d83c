"""The sweep: an Optuna study whose trials are launches of the distributed trainer (DESIGN.md §5).

One worker (``ngptune sweep``) runs this loop; several workers may share a study. Before it, the
trials' concurrency is bounded by the host (:mod:`ngptune.tuning.concurrency`) and the host is
checked once (:mod:`ngptune.tuning.preflight`).

1. Open the storage (:mod:`ngptune.tuning.storage`, which also does steps 2 and 3): by default an Optuna journal file in the study folder
   (:class:`optuna.storages.JournalStorage` with a ``JournalFileBackend``; several workers on one
   machine append to it under its lock), or ``--storage URL`` for an RDB (PostgreSQL) shared by
   workers on many machines, with heartbeats (a worker that dies leaves a trial whose heartbeat
   stops; the next worker to start a trial marks it failed and enqueues a retry,
   :class:`optuna.storages.RetryHeartbeatStaleTrialCallback`).
2. Create the study or load it (resume). The worker that creates it records what defines its
   trials (a fingerprint of base config, fixed settings, scene, world size, space, objectives),
   the objective names, and enqueues trial 0, the untuned default (:mod:`ngptune.tuning.space`;
   user attribute ``untuned``, copied by its retries; ``is_default`` is true on the one of them
   that ran to its end). A worker that loads it refuses a study made from a different definition.
3. Recover trials of dead workers: on the journal file (no heartbeats) a RUNNING trial whose
   worker process (same host) is gone is marked failed and retried; a trial failed because its
   sweep was interrupted (Ctrl-C, SIGTERM) is retried once at the next start; so are trials that
   failed for the host's reasons and a default that did not complete (:mod:`ngptune.tuning.retries`,
   also after each trial). Retries are new trials with the same parameters
   (``system_attrs["retry_history"]``); the failed original no longer counts towards the trial target.
4. Run trials until the study holds ``trials`` finished ones (completed, pruned or failed; not
   counting retried ones) and no waiting one, or until ``--timeout``. Several workers may
   overshoot the target by at most one trial each.
5. Confirm (:mod:`ngptune.tuning.confirm`): re-run the best and the default K times each;
   recommend the best only when it still beats the default. ``--no-confirm`` launches no re-run:
   re-runs of the same pair recorded by an earlier sweep still decide, else the verdict is
   ``unconfirmed`` (and replaces a recorded verdict of another pair, whose runs stay recorded).
6. Write ``best_config.json`` (the recommended configuration), ``best_config.confirmation.json``
   (the evidence), ``best_env.sh`` (:mod:`ngptune.tuning.outputs`), ``report.html``
   (:mod:`ngptune.reporting.study_report`), ``trials.csv`` and a terminal summary
   (:mod:`ngptune.reporting.study_summary`).

Each trial (:class:`ngptune.tuning.trial_objective.TrialObjective`) samples its settings, checks the combination (an invalid one is
pruned before launch), writes its config, launches ``python -m trainer --nproc-per-node N`` as its own
process tree (:mod:`ngptune.tuning.trial`) on a slot of GPUs claimed for it
(:mod:`ngptune.tuning.concurrency`; ``--concurrent-trials`` trials run side by side), reports intermediate values to the pruner while it
runs, and records the user attributes the report reads (``outcome``, ``reason``, ``log_path``,
``run_dir``, ``config_path``, ``duration_s``, ``is_default``, ``settings``, ``nccl_env``,
``nccl_applied``, ``nccl_active``, ``emulated_interconnect``, ``objectives``, ``phase_ms``,
``quality``, ``diagnoses``, ``diagnoses_note``, ``gpus``, ``gpus_held_unix_s``,
``trials_per_gpu``, ``derived_settings``: the values the run chose for the config's null settings,
from its ``status.json``); the worker records the sampler, the pruner and itself as study attributes
(:mod:`ngptune.tuning.provenance`). Every trial runs the final evaluation on the
held-out views, so every completed trial has a PSNR (``quality``:
:func:`ngptune.tuning.objectives.trial_quality`) whatever the objectives. One bad trial never
stops the study.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from ngptune.console import make_console, print_lines
from ngptune.errors import TrialFailed
from ngptune.processes import cuda_device_count
from ngptune.reporting.nccl_text import nccl_inactive_reason

from ngptune.tuning import nccl
from ngptune.tuning.concurrency import TrialSlots, host_cores, plan_trial_slots
from ngptune.tuning.preflight import check_host
from ngptune.tuning.provenance import record_worker, sampling_changes
from ngptune.tuning.retries import MAX_INFRA_RETRIES, TrialRetries, default_not_completed
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.lines import confirmation_heading, rerun_line, study_heading
from ngptune.tuning.confirm import (
    CONFIRMATION_ATTR, DEFAULT_REPEATS_CPU, DEFAULT_REPEATS_GPU, MIN_REPEATS, Verdict, confirm_study, failed_runs,
    no_candidate,
    pending,
    primary_objective, recorded_extent, recorded_repeats, reused_runs, unconfirmed, verdict_runs,
)
from ngptune.tuning.objectives import OBJECTIVES, throughput_only_warning
from ngptune.tuning.outputs import (
    candidate_trial, representative_trial, write_best_config, write_best_env, write_confirmation,
)
from ngptune.tuning.rerun import RerunLauncher
from ngptune.tuning.storage import (
    SweepError, masked_url, open_storage, open_study, recover_trials, session_seed, setup_lock, study_lock, study_progress,
    worker_id,
)
from ngptune.tuning.study import DEMO_SCENE, STUDY_NAME_RULE, StudySpec, is_study_name, load_study
from ngptune.tuning.trial_objective import TrialObjective
from ngptune.tuning.space import trial_config
from trainer.contract import (
    CPU_FRIENDLY_SAMPLES_PER_STEP, ConfigError, RunDir, TrainConfig, choose_backend, dump_config, handlers_replaced,
    listed, quantity_text,
)

__all__ = ["SweepError", "SweepOptions", "SweepResult", "SweepTerminated", "default_nproc_per_node",
           "gpu_sized_study_warning", "nccl_is_active", "run_sweep", "sigterm_as_interrupt"]
# SweepError lives with the storage (ngptune.tuning.storage), which raises it too.



@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """The command line of ``ngptune sweep``.

    Attributes:
        study_path: the study file.
        scene: scene path replacing the study's, or None.
        trials: finished trials to aim at (None: the study file's ``study.trials``).
        timeout_s: stop starting trials after this many seconds (None: ``study.timeout_s``).
        storage: an RDB URL (``postgresql+psycopg2://...``, ``sqlite:///...``), or None for the
            journal file in the study folder.
        study_name: the Optuna study name (None: ``study.name``).
        nproc_per_node: ranks per trial (None: every GPU, or 2 gloo ranks on a CPU-only machine).
        out_dir: the study folder (None: ``reports/<study-name>``).
        poll_s: seconds between looks at a running trial.
        data_settings: ``data.*`` settings from ``--format`` / ``--camera-convention`` /
            ``--aabb-scale``, added to the study's fixed settings (they override the file's).
        gpus_per_trial, concurrent_trials, trials_per_gpu, allow_shared_gpu: trials side by side
            (:mod:`ngptune.tuning.concurrency`).
        confirm: re-run best and default before recommending (``--no-confirm``: False).
        confirm_repeats: re-runs of each (None: 3); the pairs already recorded if more.
    """

    study_path: Path
    scene: Path | None = None
    trials: int | None = None
    timeout_s: float | None = None
    storage: str | None = None
    study_name: str | None = None
    nproc_per_node: int | None = None
    out_dir: Path | None = None
    poll_s: float = 0.5
    data_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    gpus_per_trial: int | None = None
    concurrent_trials: int | str | None = None
    trials_per_gpu: int | None = None
    allow_shared_gpu: bool = False
    confirm: bool = True
    confirm_repeats: int | None = None


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep worker did: its study, folder, best trial and report (None when not written)."""

    study_name: str
    out_dir: Path
    n_trials: int
    best_number: int | None
    report_path: Path | None
    best_config_path: Path | None
    verdict: Verdict | None = None


def default_nproc_per_node() -> int:
    """Every visible GPU, or 2 ranks (gloo) on a machine without one (1 on a single core)."""
    return cuda_device_count() or min(2, host_cores())


def gpu_sized_study_warning(spec: StudySpec, base_cfg: TrainConfig, n_gpus: int) -> str | None:
    """The warning for a study whose base config trains more samples per step than a CPU trains
    in well under a second (:data:`trainer.contract.CPU_FRIENDLY_SAMPLES_PER_STEP`), about to run
    on a host without GPUs; else None."""
    samples = base_cfg.training.target_samples_per_step
    if n_gpus > 0 or samples <= CPU_FRIENDLY_SAMPLES_PER_STEP:
        return None
    return (f"{spec.path}: its trials train {samples:,} samples per step, a study sized for a GPU: on a CPU each "
            "step takes seconds and each trial minutes of start-up and evaluation; studies/demo.toml is the CPU study")


def nccl_is_active(cfg: TrainConfig, nproc_per_node: int) -> bool:
    """Whether the trials' ranks talk through NCCL: several ranks on CUDA tensors (a CUDA device
    present and ``training.device`` not ``cpu``), and the backend they choose from
    ``distributed.backend`` (:func:`trainer.contract.choose_backend`) is NCCL."""
    on_cuda = cfg.training.device != "cpu" and cuda_device_count() > 0
    return nproc_per_node >= 2 and on_cuda and choose_backend(cfg.distributed.backend, on_cuda) == "nccl"


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


class _DropFailedTrialLogs(logging.Filter):
    """Optuna logs a failed trial with its traceback; the sweep prints its own one-line outcome."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Trial ")


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logger = logging.getLogger("optuna.study._optimize")
    dropper = _DropFailedTrialLogs()
    logger.addFilter(dropper)
    try:
        yield
    finally:
        logger.removeFilter(dropper)
        optuna.logging.set_verbosity(verbosity)


class SweepTerminated(KeyboardInterrupt):
    """SIGTERM reached the sweep (``timeout``, ``docker stop``, a scheduler): it stops as after
    Ctrl-C (the running trial stopped and retried at the next start), and exits 143."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`SweepTerminated`, a KeyboardInterrupt, in the main thread (so a
    stopped sweep stops its trial); outside the main thread nothing changes."""
    def handler(signum, frame):
        raise SweepTerminated(f"signal {signum}")

    with handlers_replaced({signal.SIGTERM: handler}):
        yield


def _scene_path(spec: StudySpec) -> str:
    if spec.scene != DEMO_SCENE:
        return spec.scene
    from ngptune.processes import demo_scene_path

    return str(demo_scene_path())


def run_sweep(options: SweepOptions, console: Console | None = None) -> SweepResult:
    """Run one sweep worker (see the module docstring).

    Returns:
        The :class:`SweepResult`.

    Raises:
        ConfigError: invalid study file (names the file and the dotted key) or settings.
        SweepError: storage or study problems (names them).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the running trial was stopped and marked
            interrupted (a re-run of the same command retries it).
    """
    console = console or make_console(soft_wrap=True)  # message lines stay whole in piped logs
    spec = load_study(options.study_path, scene=options.scene)
    if options.data_settings:
        spec = dataclasses.replace(spec, settings={**spec.settings, **options.data_settings})
    nproc = options.nproc_per_node or _ranks_on_gpus(options.gpus_per_trial) or default_nproc_per_node()
    if nproc < 1:
        raise ConfigError(f"--nproc-per-node: expected an integer >= 1, got {nproc}")
    base_cfg = spec.base_config()
    nccl_active = nccl_is_active(base_cfg, nproc)
    if not nccl_active:
        _check_no_emulation(spec, base_cfg)
        _check_some_param_active(spec)
    name = options.study_name or spec.name
    if not is_study_name(name):
        raise ConfigError(f"--study-name: expected {STUDY_NAME_RULE}, got {name!r}")
    study_dir = StudyDir(options.out_dir or Path("reports") / name)
    _check_not_foreign(study_dir)
    slots = plan_trial_slots(spec, nproc=nproc, uses_cuda=_uses_cuda(base_cfg), gpus_per_trial=options.gpus_per_trial,
                             concurrent_trials=options.concurrent_trials, trials_per_gpu=options.trials_per_gpu,
                             allow_shared_gpu=options.allow_shared_gpu)
    check_host(dump_config(trial_config(base_cfg, {}, _scene_path(spec))),  # once, before any trial
               nccl.trial_env(os.environ, {}, nccl_active=nccl_active))
    with _quiet_optuna():
        return _run(options, spec, nproc, base_cfg, nccl_active, name, study_dir, console, slots)


def _uses_cuda(cfg: TrainConfig) -> bool:
    return cfg.training.device != "cpu" and cuda_device_count() > 0


def _ranks_on_gpus(gpus_per_trial: int | None) -> int | None:
    """One rank per GPU of the trial's set on a CUDA host (None: no set given, or no CUDA)."""
    return gpus_per_trial if gpus_per_trial and cuda_device_count() > 0 else None


def _check_some_param_active(spec: StudySpec) -> None:
    """Refuse a study whose every parameter is an NCCL variable when NCCL is inactive (gloo): each
    trial would run the same settings.

    Raises:
        ConfigError: naming the study file and the parameters.
    """
    if spec.params and all(nccl.is_nccl_name(p.name) for p in spec.params):
        names = ", ".join(p.name for p in spec.params)
        raise ConfigError(f"{spec.path}: params: every parameter ({names}) is an NCCL variable, inactive on this "
                          "host (gloo backend: no CUDA ranks); tune trainer settings too, or run where NCCL is used")


def _check_no_emulation(spec: StudySpec, base_cfg: TrainConfig) -> None:
    """Refuse ``distributed.emulate_interconnect`` other than ``none`` on gloo, fixed or among a
    parameter's choices (every such trial would be pruned as an invalid combination).

    Raises:
        ConfigError: naming the study file, the setting or parameter, and the values.
    """
    key = "distributed.emulate_interconnect"
    gloo = "NCCL (several CUDA ranks); this sweep uses gloo"
    if base_cfg.distributed.emulate_interconnect != "none":
        raise ConfigError(f"{spec.path}: settings.{key}: {base_cfg.distributed.emulate_interconnect!r} needs {gloo}")
    for param in spec.params:
        emulated = [str(c) for c in param.choices if c != "none"] if param.name == key else []
        if emulated:
            raise ConfigError(f"{spec.path}: params.{key}: choices {', '.join(emulated)} need {gloo}; "
                              'keep only "none" or remove the parameter')


def _check_not_foreign(study_dir: StudyDir) -> None:
    """Refuse an output folder that holds a training run or a profile (the sweep would write its
    report, CSV and best config over theirs).

    Raises:
        SweepError: naming the folder and what it holds.
    """
    from ngptune.profiling.collect import ProfileDir

    root = study_dir.root
    held = RunDir(root).existing_run()
    if held is None and ProfileDir(root).sources_path.is_file():
        held = "a profile (sources.json)"
    elif held is not None:
        held = f"a training run: {held}"
    if held is not None:
        raise SweepError(f"--out {root}: holds {held}; a sweep needs its own folder")


def _run(options: SweepOptions, spec: StudySpec, nproc: int, base_cfg: TrainConfig, nccl_active: bool, name: str,
         study_dir: StudyDir, console: Console, slots: TrialSlots) -> SweepResult:
    trials_target = options.trials or spec.trials
    if not spec.params:
        trials_target = 1
        print_lines(console, ["warning:", f"{spec.path}: params: the search space is empty; running one trial of "
                                          "the default settings instead of identical repeats"],
                    marks=[("warning:", "yellow")])
    timeout_s = options.timeout_s or spec.timeout_s
    scene = _scene_path(spec)
    storage = open_storage(options.storage, study_dir)
    is_rdb = options.storage is not None
    storage_text = masked_url(options.storage) if is_rdb else str(study_dir.journal_path)
    definition = spec.definition(scene, nproc)
    fingerprint = spec.fingerprint(scene, nproc)
    attrs = {"study_file": str(spec.path), "scene": scene, "nproc_per_node": nproc, "nccl_active": nccl_active,
             "storage": storage_text}

    with setup_lock(study_dir, enabled=not is_rdb):
        study, created, added_settings, kept_defaults = open_study(storage, name, spec, fingerprint, attrs, study_dir,
                                                                   base_cfg, is_rdb, definition=definition)
        if kept_defaults:  # the study began when these were fixed defaults: its trials keep them
            spec = dataclasses.replace(spec, settings={**spec.settings, **kept_defaults})
            base_cfg = spec.base_config()
        seed = spec.sampler.seed if created else session_seed(spec.sampler.seed, len(study.trials))
        changed_sampling = [] if created else sampling_changes(study, spec)
        record_worker(study, spec, worker_id(), concurrent_trials=slots.concurrent, sampler_seed=seed)
        retried = recover_trials(study, check_workers=not is_rdb, retry_interrupted=True)
        retries = TrialRetries()  # failures of the host's making, and a default that did not complete
        retried += retries.after_trials(study) + [n for n in [retries.default_again(study)] if n is not None]
    backend = "NCCL" if nccl_active else f"NCCL parameters inactive: {nccl_inactive_reason(nproc)}"
    _, done = study_progress(study)
    at_once = slots.at_once(trials_target - done)  # never more trials at once than the study still needs
    print_lines(console, study_heading(name, str(spec.path), trials_target, spec.budget.describe(), nproc, backend,
                                       scene, storage_text, resumed=None if created else done, at_once=at_once,
                                       retried=retried),
                marks=[(f"study {name}", "bold")])
    if kept_defaults:
        print_lines(console, ["note:", "the study began when these trainer settings had one default for every scene;",
                              "its trials keep it (the trainer now chooses it from the scene when it is not set):",
                              *listed([f"{key} = {json.dumps(value)}" for key, value in kept_defaults.items()])])
    if changed_sampling and trials_target > done:
        print_lines(console, ["note:", f"{spec.path} changes how this study draws and stops trials:",
                              "; ".join(changed_sampling),
                              f"(the trials so far, {done}, keep their draws and prunings; the report names "
                              "each worker's sampler and pruner)"])
    if added_settings:
        print_lines(console, ["note:", "the study began before these trainer settings existed;", "its trials from now on",
                              "run them at their defaults:", *listed(added_settings)])
    if slots.note:
        print_lines(console, ["note:", slots.note])
    if spec.budget.seconds is not None and cuda_device_count() == 0:
        print_lines(console, [f"warning: {spec.path}: budget.seconds on a CPU: each trial trains as many steps as the "
                              "machine's load leaves it, so the load decides as much as the settings; use budget.steps "
                              "(studies/README.md)"], style="yellow")
    warning = gpu_sized_study_warning(spec, base_cfg, cuda_device_count())
    if warning is not None:
        print_lines(console, [f"warning: {warning}"], style="yellow")
    warning = throughput_only_warning(spec.objective_names)
    if warning is not None:
        print_lines(console, [f"warning: {warning}"], style="yellow")
        study.set_user_attr("objective_warning", warning)
    objective = TrialObjective(spec=spec, base_cfg=base_cfg, scene=scene, nproc_per_node=nproc, nccl_active=nccl_active,
                           study_dir=study_dir, console=console, poll_s=options.poll_s, slots=slots)

    def enough() -> bool:
        waiting, done = study_progress(study)
        return waiting == 0 and done >= trials_target

    def after_trial(study_, frozen) -> None:
        recover_trials(study, check_workers=not is_rdb, retry_interrupted=False)
        with setup_lock(study_dir, enabled=not is_rdb):
            again = retries.after_trials(study)
        if again:
            print_lines(console, [f"trial{'s' if len(again) > 1 else ''}", *listed([str(n) for n in again]),
                                  f"will run again (at most {MAX_INFRA_RETRIES} retries each)"])
        if enough():
            study.stop()

    with sigterm_as_interrupt():
        if not enough():
            try:
                study.optimize(objective, n_trials=None, timeout=timeout_s, callbacks=[after_trial],
                               catch=(TrialFailed,), gc_after_trial=False, show_progress_bar=False,
                               n_jobs=at_once)
            finally:
                slots.stop.set()
        with study_lock(study_dir.confirm_lock_path):  # one worker confirms at a time; the next reuses its runs
            verdict = _confirm(options, study, spec, study_dir, nproc, nccl_active, console)
    return _write_outputs(study, spec, name, study_dir, nccl_active, console, verdict)


def _confirm(options: SweepOptions, study, spec: StudySpec, study_dir: StudyDir, nproc: int, nccl_active: bool,
             console: Console) -> Verdict | None:
    """Re-run the candidate and the default (:mod:`ngptune.tuning.confirm`); None when no trial completed."""
    from ngptune.reporting.study_data import default_trial

    best = representative_trial(study)
    if best is None:
        return None
    name = primary_objective(spec.objective_names)
    direction = OBJECTIVES[name].direction
    default = default_trial(study)
    if default is None or default.state.name != "COMPLETE":
        return unconfirmed(name, direction, default_not_completed(study), best_trial=best.number,
                           default_trial=None if default is None else default.number)
    from optuna.trial import TrialState

    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if running:  # another worker's trial may still become the best
        return pending(name, direction, running)
    candidate = candidate_trial(study, default, spec.objective_names.index(name))
    if candidate is None:
        return no_candidate(name, direction, default.number)
    won = best.number == default.number  # the default won its single run: re-run the runner-up against it
    if not options.confirm:
        record = study.user_attrs.get(CONFIRMATION_ATTR)
        recorded = recorded_repeats(record, name, candidate.number, default.number)
        if recorded >= MIN_REPEATS:  # re-runs of this pair recorded by an earlier sweep decide; none is launched
            print_lines(console, [f"confirmation: --no-confirm; the {recorded} re-runs each of trial {candidate.number} "
                                  f"and default trial {default.number} recorded earlier decide"],
                        marks=[("confirmation", "bold")])
            return confirm_study(study, best=candidate, default=default, repeats=recorded, objective=name,
                                 direction=direction, unit=OBJECTIVES[name].unit,
                                 base_seed=spec.base_config().training.seed, launch=_launch_nothing,
                                 default_won_single_run=won)
        verdict = unconfirmed(name, direction, "confirmation skipped (--no-confirm)", best_trial=candidate.number,
                              default_trial=default.number, recommend="default" if won else "best")
        if isinstance(record, dict):  # the report and the files say this sweep's verdict; the runs stay recorded
            study.set_user_attr(CONFIRMATION_ATTR, {**record, "verdict": verdict.to_dict()})
        return verdict
    asked = options.confirm_repeats or (DEFAULT_REPEATS_GPU if cuda_device_count() > 0 else DEFAULT_REPEATS_CPU)
    # every recorded pair counts: a smaller --confirm-runs never drops evidence an earlier sweep gathered
    repeats = max(asked, recorded_extent(study.user_attrs.get(CONFIRMATION_ATTR), name, candidate.number,
                                         default.number))
    reused = reused_runs(study.user_attrs.get(CONFIRMATION_ATTR), name, candidate.number, default.number, repeats)
    print_lines(console, confirmation_heading(candidate.number, default.number, repeats, spec.budget.describe(), won,
                                              reused, asked=options.confirm_repeats),
                marks=[("confirmation", "bold")])
    launcher = RerunLauncher(spec=spec, objective=name, study_dir=study_dir, nproc_per_node=nproc,
                             nccl_active=nccl_active, poll_s=options.poll_s)

    def shown(run) -> None:
        print_lines(console, rerun_line(run, name), indent="    ")

    return confirm_study(study, best=candidate, default=default, repeats=repeats, objective=name,
                         direction=direction, unit=OBJECTIVES[name].unit, base_seed=spec.base_config().training.seed,
                         launch=launcher, on_run=shown, default_won_single_run=won)


def _launch_nothing(label: str, trial, index: int, seed: int):
    """The launcher of a confirmation taken on recorded re-runs only (``--no-confirm``)."""
    raise SweepError(f"--no-confirm: re-run {index} of trial {trial.number} is not recorded and is not launched")


def _target_missed_hint(study, spec: StudySpec) -> str | None:
    """For a study whose trials all missed their ``time_to_psnr_s`` target: the target, the best
    PSNR any trial reached and what to change; None otherwise."""
    targets = [o.target_db for o in spec.objectives if o.name == "time_to_psnr_s" and o.target_db is not None]
    trials = study.get_trials(deepcopy=False)
    missed = [t for t in trials if str(t.user_attrs.get("reason", "")).startswith("PSNR target")]
    if not targets or not missed:
        return None
    seen = [(t.user_attrs.get("quality", {}).get("psnr_db"), t.number) for t in missed]
    seen = [(p, n) for p, n in seen if isinstance(p, (int, float)) and math.isfinite(p)]
    best = (f"the best PSNR reached was {quantity_text('psnr_db', max(seen)[0])} (trial {max(seen)[1]})" if seen
            else "no PSNR was reached")
    return (f"{len(missed)} of {len(trials)} trials missed the time_to_psnr_s target of {targets[0]:g} dB; {best}: "
            "lower target_db or give the trials a longer budget")


def _recommended_trial(study, verdict: Verdict | None):
    """The trial ``best_config.json`` holds: the verdict's recommendation (the candidate re-run, or
    the default); the representative best without a verdict; None while other workers' trials run."""
    from ngptune.reporting.study_data import default_trial

    if verdict is None:
        return representative_trial(study)
    if verdict.status == "pending":
        return None
    if verdict.recommend == "default":
        return default_trial(study)
    return next((t for t in study.get_trials(deepcopy=False) if t.number == verdict.best_trial), None)


def _write_outputs(study, spec: StudySpec, name: str, study_dir: StudyDir, nccl_active: bool,
                   console: Console, verdict: Verdict | None) -> SweepResult:
    from ngptune.reporting.study_report import print_summary, write_study_report, write_trials_csv

    best = _recommended_trial(study, verdict)
    best_config = None
    if best is not None:
        best_config = write_best_config(best, spec, study_dir, verdict=verdict)
        record = study.user_attrs.get(CONFIRMATION_ATTR)
        runs = [] if verdict is None else verdict_runs(record, verdict)
        failed = [] if verdict is None else failed_runs(record, verdict.objective)
        write_confirmation(verdict, best, study_dir, runs, failed)
        write_best_env(best, name, study_dir, study.user_attrs.get("nproc_per_node"))
    write_trials_csv(study, study_dir.trials_csv_path)
    report = write_study_report(study, study_dir.root, title=f"ngptune sweep: {name}", nccl_active=nccl_active)
    print_summary(study, console, show_recommendation=verdict is None or verdict.status != "pending")
    if best is not None:
        which = "representative of the Pareto front" if len(spec.objectives) > 1 else "best"
        if verdict is not None:
            evidence = {"confirmed": "confirmed by re-runs", "default_better": "confirmed by re-runs",
                        "no_significant_difference": "no significant difference in re-runs"}
            which = (f"recommended ({'the default' if verdict.recommend == 'default' else which}, "
                     f"{evidence.get(verdict.status, 'not confirmed')})")
        print_lines(console, [f"{which}:", f"trial {best.number} → {best_config},", str(study_dir.best_env_path)])
    elif verdict is not None and verdict.status == "pending":
        print_lines(console, [verdict.sentence], style="yellow")
    else:
        print_lines(console, ["no trial completed: no best_config.json"], style="red")
        missed = _target_missed_hint(study, spec)
        if missed:
            print_lines(console, [missed], style="yellow")
    print_lines(console, [f"report: {report};", f"trials: {study_dir.trials_csv_path}"])
    return SweepResult(
        study_name=name,
        out_dir=study_dir.root,
        n_trials=len(study.get_trials(deepcopy=False)),
        best_number=None if best is None else best.number,
        report_path=report,
        best_config_path=best_config,
        verdict=verdict,
    )

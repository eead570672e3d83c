"""``ngptune train-many``: train a sequence of scenes as independent jobs on GPU slots.

Input: a folder of scene folders (trained in natural order: ``0002`` before ``0010``) or a text
file listing scene paths, one a line (relative to the file's folder; ``#`` starts a comment).
Each scene is one job: ``python -m trainer`` (``--nproc-per-node G`` for ``--gpus-per-job G`` > 1)
in its own process tree on a slot of G GPUs claimed from :class:`~ngptune.scheduling.slots.SlotPool`
(every GPU is used: visible GPUs // G jobs at once; one job at a time without GPUs), with the same
config and ``--set`` overrides for all, writing ``OUT/<job>/`` (a run directory, laid out as every
run: the final model in ``snapshots/``, or ``checkpoints/`` for several GPUs) and its log
``OUT/logs/<job>.log``.

``--warm-start previous``: job i starts from job i-1's final snapshot (model and occupancy grid;
fresh optimiser, :meth:`trainer.train.loop.Trainer.warm_start`), so it waits for job i-1; a job
whose predecessor failed starts cold (its ``warm_started_from`` is empty). The snapshot is the one
the predecessor's ``status.json`` names, else its run folder's
(:meth:`trainer.rundir.RunDir.model_snapshot`, which also finds ``final.pt`` in the root, where
train-many kept it before).

An entry that holds no scene (:func:`trainer.contract.check_scene_found`) fails alone, before a
slot or a launch; a source that is itself a scene is refused, and the ``--out`` folder inside a
source folder is not taken for a scene.

Resumable: a job is finished when ``OUT/<job>/job.json`` exists (written atomically after the
trainer reported ``completed``); re-running the same command skips finished jobs (their row keeps
its outcome, ``completed``, and says when it finished and when it was skipped) and reruns the
others: a job Ctrl-C stopped after it kept a model is resumed from it (``--resume OUT/<job>``, the
same training flags; its earlier log kept as ``OUT/logs/<job>.<k>.log``), any other unfinished
folder is moved aside to ``OUT/<job>.unfinished-<k>`` (its log and checkpoints are kept) and the job
trains anew. A killed job never leaves a ``job.json``. ``job.json`` keeps the job's
training flags; a finished job skipped by a run with other flags says both.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ngptune.scheduling.slots import SlotPool, visible_gpus
from ngptune.tuning.trial import TrialLaunch, run_trial
from trainer.contract import (
    ConfigError, RunDir, SceneError, atomic_write_text, check_scene_found, command_stopping_with_parent, free_path,
    held_scene, trainer_argv,
)

__all__ = ["Job", "JobResult", "Plan", "TrainManyInterrupted", "TrainManyOptions", "devices_text", "discover_scenes", "job_names",
           "run_train_many"]

JOB_FILE = "job.json"
#: written in a job's run folder when a run resumes it: a resume that fails (flags that do not fit
#: the model) leaves the job resumable, so that the kept model is not trained over
RESUME_FILE = "resuming.json"


@dataclasses.dataclass(frozen=True)
class TrainManyOptions:
    """The command line of ``ngptune train-many``.

    Attributes:
        source: a folder of scene folders, or a text file of scene paths.
        out_dir: where the jobs' folders, logs and summaries go.
        gpus_per_job: GPUs of each job (None: 1 on a GPU host).
        warm_start: ``"previous"`` or None.
        train_args: training flags passed to every job (``--config``, ``--set``, ``--n-steps``, ...).
    """

    source: Path
    out_dir: Path
    gpus_per_job: int | None = None
    warm_start: str | None = None
    train_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run of ``train-many`` will do, known once its input is checked.

    Attributes:
        jobs: scenes in the sequence (finished ones included: they are skipped).
        gpus: the GPUs its jobs share (none on a host without GPUs).
        gpus_per_job: GPUs of each job on a GPU host.
        at_once: jobs that run side by side.
    """

    jobs: int
    gpus: tuple[int, ...]
    gpus_per_job: int
    at_once: int


@dataclasses.dataclass(frozen=True)
class Job:
    """One scene to train: its index in the sequence, name, scene path and folders."""

    index: int
    name: str
    scene: Path
    run_dir: Path
    log_path: Path

    @property
    def job_path(self) -> Path:
        return self.run_dir / JOB_FILE


@dataclasses.dataclass
class JobResult:
    """A job's row of ``summary.csv``: scene, gpus (``cpu`` on the CPU), steps, train_time_s, psnr_db, status, log
    path, and the run folder, the snapshot it started from, why it failed or was skipped, the
    trained model, when it finished and when a later run skipped it (local ISO times)."""

    scene: str
    gpus: str
    steps: int | None
    train_time_s: float | None
    psnr_db: float | None
    status: str  # completed | failed | interrupted (Ctrl-C stopped it; a job Ctrl-C came before has no row)
    log_path: str
    run_dir: str
    warm_started_from: str
    reason: str = ""
    model: str = ""  # the snapshot or checkpoint folder of the trained model
    finished_at: str = ""
    skipped_at: str = ""  # set when this run found the job finished by an earlier run


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def discover_scenes(source: Path, out_dir: Path | None = None) -> list[Path]:
    """The scenes of ``source`` in order (see the module docstring); a folder's subfolder that is
    ``out_dir`` (the jobs' own output), an earlier run's output (it holds a ``summary.csv``) or
    hidden is not a scene.

    Raises:
        ConfigError: ``source`` missing, empty, a scene itself rather than a folder of scenes,
            ``out_dir`` inside one of its scenes, or two entries naming the same folder (one line
            naming the path and the entries). An entry that holds no scene fails alone, without a
            launch (:func:`run_train_many`).
    """
    source = Path(source)
    out_resolved = Path(out_dir).resolve() if out_dir is not None else None
    if source.is_dir():
        own = held_scene(source)
        if own is not None:
            raise ConfigError(f"{source}: {own.with_article}, not a folder of scenes: train it with "
                              f"`ngptune train --scene {source}`, or give train-many the folder that holds it")
        scenes = sorted((p for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")
                         and p.resolve() != out_resolved and not (p / "summary.csv").is_file()), key=_natural_key)
        what = "scene folders"
    elif source.is_file():
        lines = [line.split("#", 1)[0].strip() for line in source.read_text(encoding="utf-8").splitlines()]
        scenes = [(source.parent / line) for line in lines if line]
        what = "scene paths"
    else:
        raise ConfigError(f"{source}: no such folder or scene list")
    if not scenes:
        raise ConfigError(f"{source}: no {what} to train")
    seen: dict[Path, Path] = {}
    for scene in scenes:
        resolved = scene.resolve()
        if resolved in seen:
            raise ConfigError(f"{source}: entries {seen[resolved]} and {scene} are the same folder {resolved}")
        seen[resolved] = scene
        if out_resolved is not None and out_resolved.is_relative_to(resolved):
            raise ConfigError(f"--out {out_dir}: inside the scene {scene}; choose a folder outside the scenes")
    return scenes


#: names in ``OUT`` that are not a job's folder
RESERVED_NAMES = ("logs", "summary.csv", "summary.html")


def job_names(scenes: list[Path]) -> list[str]:
    """A folder name per scene: its own name, or ``<index>-<name>`` when names repeat or one is
    a name of ``OUT``'s own (:data:`RESERVED_NAMES`)."""
    names = [s.name or "scene" for s in scenes]
    if len(set(names)) == len(names) and not set(names) & set(RESERVED_NAMES):
        return names
    return [f"{i:04d}-{n}" for i, n in enumerate(names)]


def _is_finished(job: Job) -> bool:
    return job.job_path.is_file()


def _move_aside(job: Job) -> None:
    """An unfinished job's folder goes to ``<job>.unfinished-<k>`` (nothing is lost)."""
    if not job.run_dir.exists():
        return
    aside = free_path(lambda k: job.run_dir.with_name(f"{job.run_dir.name}.unfinished-{k}"))
    job.run_dir.rename(aside)
    if job.log_path.is_file():
        shutil.move(str(job.log_path), str(aside / "launch.log"))


def job_argv(job: Job, options: TrainManyOptions, gpus: int, warm_from: Path | None, resume: bool = False) -> list[str]:
    """The job's command: ``python -m trainer [--nproc-per-node G] --scene S --out RUN --quiet
    [--warm-start PREVIOUS | --resume RUN] <training flags>``."""
    argv = trainer_argv(nproc_per_node=gpus if gpus > 1 else None, scene=job.scene, out=job.run_dir, quiet=True,
                        warm_start=None if resume else warm_from, resume=job.run_dir if resume else None,
                        extra=options.train_args)
    return command_stopping_with_parent(argv)


def interrupted_model(job: Job) -> Path | None:
    """The model a job stopped by Ctrl-C kept (its run folder's ``status.json`` says
    ``interrupted``, or an attempt to resume it ended without finishing: :data:`RESUME_FILE`, and
    the folder names or holds a snapshot or checkpoint), which the next run resumes; None for any
    other unfinished job (failed, killed, or stopped before it kept a model), which trains anew."""
    status = RunDir(job.run_dir).read_status()
    if not isinstance(status, dict):
        return None
    if status.get("state") != "interrupted" and not (job.run_dir / RESUME_FILE).is_file():
        return None
    return trained_model(job.run_dir, status)


def _keep_log(job: Job) -> None:
    """The log of the job's interrupted run, before its resume writes a new one: ``<job>.<k>.log``."""
    if job.log_path.is_file():
        job.log_path.rename(free_path(lambda k: job.log_path.with_name(f"{job.log_path.stem}.{k}.log")))


def devices_text(gpus: list[int], train_args: tuple[str, ...] = ()) -> str:
    """The ``gpus`` cell of a job: its GPUs (``0,1``), or ``cpu`` for a job on a slot without GPUs
    or told to train on the CPU (``--device cpu``, ``--set training.device=cpu``)."""
    flags = list(train_args)
    on_cpu = any(a == "--device" and b == "cpu" for a, b in zip(flags, flags[1:])) or "training.device=cpu" in flags
    return "cpu" if on_cpu or not gpus else ",".join(map(str, gpus))


def _result(job: Job, status: dict[str, Any] | None, outcome: str, reason: str, devices: str,
            warm_from: Path | None) -> JobResult:
    status = status or {}
    number = lambda key: status.get(key) if isinstance(status.get(key), (int, float)) else None  # noqa: E731
    model = trained_model(job.run_dir, status) if outcome == "completed" else None
    return JobResult(scene=str(job.scene), gpus=devices, steps=number("step"),
                     train_time_s=number("train_time_s"), psnr_db=number("eval_psnr_db"), status=outcome,
                     log_path=str(job.log_path), run_dir=str(job.run_dir),
                     warm_started_from="" if warm_from is None else str(warm_from), reason=reason,
                     model="" if model is None else str(model),
                     finished_at=_now() if outcome == "completed" else "")


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def trained_model(run_dir: Path, status: dict[str, Any] | None = None) -> Path | None:
    """The trained model of a finished run folder: the snapshot or checkpoint its ``status.json``
    names (``snapshot``, ``checkpoint``) when it exists, else the run folder's newest snapshot
    (:meth:`~trainer.rundir.RunDir.model_snapshot`), else None."""
    run = RunDir(run_dir)
    status = run.read_status() if status is None else status
    for key in ("snapshot", "checkpoint"):
        named = (status or {}).get(key)
        if isinstance(named, str) and Path(named).exists():
            return Path(named)
    return run.model_snapshot()


def _run_job(job: Job, options: TrainManyOptions, pool: SlotPool, warm_from: Path | None, on_start=None,
             on_progress=None, stop: threading.Event | None = None) -> JobResult | None:
    """The job's result, or None when ``stop`` was set before it started."""
    try:
        check_scene_found(job.scene)
    except SceneError as exc:  # fails alone, before a slot, a launch or a run folder
        return dataclasses.replace(_result(job, None, "failed", str(exc), "", None), log_path="")
    slot = pool.claim(stop=stop)
    if slot is None or (stop is not None and stop.is_set()):
        if slot is not None:
            pool.release(slot, [])
        return None
    resume_from = interrupted_model(job)
    if resume_from is None:
        _move_aside(job)
    else:
        _keep_log(job)
        atomic_write_text(job.run_dir / RESUME_FILE, json.dumps({"model": str(resume_from)}) + "\n")
        warm_from = None  # the run continues from its own model
    if on_start is not None:
        on_start(job)
    leftover: list[int] = []
    try:
        n_gpus = max(len(slot.gpus), 1)
        launch = TrialLaunch(argv=job_argv(job, options, len(slot.gpus), warm_from, resume=resume_from is not None),
                             env=slot.env(os.environ),
                             run_dir=job.run_dir, log_path=job.log_path, world_size=n_gpus if len(slot.gpus) > 1 else 1,
                             timeout_s=float("inf"))
        watch = None
        if on_progress is not None:
            def watch(records: list[dict[str, Any]]) -> None:
                on_progress(job, records[-1] if records else None)
        run = run_trial(launch, on_progress=watch, stop=stop)
        leftover = run.leftover_pids
    finally:
        pool.release(slot, leftover)
    completed = run.outcome == "completed" and trained_model(job.run_dir, run.status) is not None
    outcome = "completed" if completed else "interrupted" if run.outcome == "interrupted" else "failed"
    reason = run.reason if run.outcome != "completed" else "" if completed else "the run kept no trained model"
    if resume_from is not None:
        reason = (f"{reason} (resuming from {resume_from}; the next run resumes it again: remove or rename "
                  f"{job.run_dir} to train it anew)" if reason else f"resumed from {resume_from}")
    if outcome == "interrupted":
        kept = trained_model(job.run_dir)
        reason = (f"{reason}; its newest model: {kept}" if kept is not None else f"{reason}; no model was kept")
    result = _result(job, run.status, outcome, reason, devices_text(slot.gpus, options.train_args), warm_from)
    if outcome == "completed":
        record = dict(dataclasses.asdict(result), train_args=list(options.train_args))
        atomic_write_text(job.job_path, json.dumps(record, indent=2) + "\n")
    return result


def _finished_result(job: Job, train_args: tuple[str, ...]) -> JobResult:
    """The row of a job an earlier run finished: its outcome as recorded, when it was skipped, and
    the training flags it ran with when they differ from ``train_args`` (this run's)."""
    found = json.loads(job.job_path.read_text())
    found["status"] = "completed"
    when = f" at {found['finished_at']}" if found.get("finished_at") else ""
    recorded = found.get("train_args")
    other = (f" with other training flags ({' '.join(recorded) or 'none'}; this run's: "
             f"{' '.join(train_args) or 'none'})") if isinstance(recorded, list) and tuple(recorded) != train_args else ""
    found["reason"] = (f"skipped: finished by an earlier run{when}{other} (step {found.get('steps', '?')}); "
                       f"remove {job.job_path} to train it again")
    found["skipped_at"] = _now()
    if not found.get("model"):
        model = trained_model(job.run_dir)
        found["model"] = "" if model is None else str(model)
    return JobResult(**{k: found.get(k, "") for k in JobResult.__dataclass_fields__})


def _warm_start_snapshot(previous: Job) -> Path | None:
    """The finished ``previous`` job's single-process snapshot, or None (a checkpoint folder of a
    several-GPU job cannot warm-start a run)."""
    model = trained_model(previous.run_dir)
    return model if model is not None and model.is_file() else None


def run_train_many(options: TrainManyOptions, *, on_begin=None, on_start=None, on_done=None,
                   on_progress=None) -> list[JobResult]:
    """Train every scene of ``options.source`` (see the module docstring); returns a result per
    scene, in sequence order (``on_begin(plan)`` is called with the :class:`Plan` once the input
    is checked, before any job; ``on_start(job)`` / ``on_done(job, result)`` as jobs start and
    end, ``on_progress(job, record)`` with the job's newest metrics record (None before its
    first) while it trains; these three from worker threads).

    Raises:
        ConfigError: bad source (:func:`discover_scenes`), ``--gpus-per-job`` 0 or above the
            visible GPUs, or ``--warm-start`` other than ``previous``, or with several GPUs per job.
    """
    if options.warm_start not in (None, "previous"):
        raise ConfigError(f"--warm-start: expected 'previous', got {options.warm_start!r}")
    scenes = discover_scenes(options.source, options.out_dir)
    gpus = visible_gpus()
    if options.gpus_per_job is not None and options.gpus_per_job < 1:
        raise ConfigError(f"--gpus-per-job: expected an integer >= 1, got {options.gpus_per_job}")
    if options.gpus_per_job is not None and options.gpus_per_job > len(gpus):
        raise ConfigError(f"--gpus-per-job {options.gpus_per_job}: only {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} visible")
    per_job = options.gpus_per_job or 1
    if options.warm_start and gpus and per_job > 1:
        raise ConfigError(f"--warm-start previous: single-GPU jobs only (--gpus-per-job is {per_job})")
    pool = SlotPool(gpus, per_job, flag="--gpus-per-job")
    out = Path(options.out_dir)
    jobs = [Job(i, name, scene, out / name, out / "logs" / f"{name}.log")
            for i, (name, scene) in enumerate(zip(job_names(scenes), scenes))]
    if on_begin is not None:
        on_begin(Plan(len(jobs), tuple(gpus), per_job, pool.capacity))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    done = [threading.Event() for _ in jobs]
    results: list[JobResult | None] = [None] * len(jobs)

    stopping = threading.Event()  # Ctrl-C: running jobs stop, jobs not started never start

    def work(job: Job) -> JobResult | None:
        try:
            if _is_finished(job):
                result = _finished_result(job, tuple(options.train_args))
            else:
                warm_from = None
                if options.warm_start and job.index > 0:
                    done[job.index - 1].wait()
                    previous = jobs[job.index - 1]
                    warm_from = _warm_start_snapshot(previous) if _is_finished(previous) else None
                result = _run_job(job, options, pool, warm_from, on_start, on_progress, stopping)
            results[job.index] = result
            if on_done is not None and result is not None:
                on_done(job, result)
            return result
        finally:
            done[job.index].set()

    with ThreadPoolExecutor(max_workers=pool.capacity) as executor:  # leaving it waits for every job
        try:
            for future in [executor.submit(work, job) for job in jobs]:  # a job waits only on earlier ones
                future.result()
        except KeyboardInterrupt:
            stopping.set()  # each running job is stopped at its next poll
    ran = [r for r in results if r is not None]
    if stopping.is_set():
        raise TrainManyInterrupted(ran, len(jobs))
    return ran


class TrainManyInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`run_train_many`: ``results`` of the jobs that finished or were
    stopped (in sequence order), of ``jobs`` in all."""

    def __init__(self, results: list[JobResult], jobs: int) -> None:
        super().__init__(f"{len(results)} of {jobs} jobs ran")
        self.results, self.jobs = results, jobs

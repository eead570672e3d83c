"""One training run from its checks to its ``status.json``, the same for one process and for each
rank of a job (:func:`run_training`).

Every run goes through the same stages; where one process and a rank differ, a :class:`Job` says
how:

1. prepare — the run directory (one process: the ``--out`` folder checked, stale temp files
   removed, ``config.json`` written; a rank: ``--out`` required with several ranks, the device of
   its local rank), intra-op threads on a CPU, the opening lines (before the progress display
   starts, so they come first);
2. ``status.json`` written as running (by the process that owns the folder: rank 0);
3. build — the trainer (one process: from a snapshot when resuming, warm-started when asked; a
   rank: the process group joined, the data-parallel or subgrid trainer built, resumed from the
   newest checkpoint — after a restart by the elastic agent its own); the values it chose for the
   config's null settings go into the status (``derived_settings``);
4. train, with progress lines (and ``--view``'s viewer, :mod:`trainer.viewer.live`), until
   ``training.n_steps`` or the time budget (one process: Ctrl-C stops after the step under way and
   keeps a snapshot of it, :mod:`trainer.run.interrupt`);
5. keep the trained model (a rank: its final checkpoint; one process: a snapshot), evaluate
   (:mod:`trainer.run.finish`);
6. end — ``status.json`` completed, failed or interrupted (a rank first waits for its peers).
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any

from trainer.contract.config import TrainConfig, apply_overrides, config_to_dict
from trainer.contract.defaults import cpu_config_warning, default_run_dir
from trainer.contract.errors import ConfigError, LaunchError
from trainer.contract.rundir import RunDir, prepare_output_file
from trainer.contract.textlines import CONSOLE_PREFIX_ENV, fit_lines
from trainer.contract.runstatus import (
    COMPLETED, DERIVED_KEY, RESTART_COUNT_KEY, SKIPPED_FRAMES_KEY, STATE_KEY, TRAIN_START_KEY, failed_fields, fitted_warning,
    is_completed,
)
from trainer.run.checks import (
    check_before_start, check_n_steps_reach, distributed_env, resume_path, resume_source,
)
from trainer.contract.resumption import resume_block
from trainer.contract.signals import signals_held
from trainer.run.finish import finish_status, train_with_progress
from trainer.run.interrupt import StopAfterStep, StoppedAfterStep, TerminatedAfterStep
from trainer.run.progress import TrainProgress
from trainer.run.settings import on_cpu, opening_line, scene_path_of
from trainer.run.status import RunInterrupted, RunStatus, RunTerminated, Terminated, keeping_finite_model
from trainer.viewer.live import start_live_view

__all__ = ["Job", "OneProcess", "Rank", "run_training", "saved_config"]


def _fitted(statement: str) -> str:
    """``statement`` broken at its spaces into lines under 80 columns (the first lines of a run)."""
    return "\n".join(fit_lines([statement]))


def scene_model_text(trainer: Any) -> str:
    """The scene model and the capture it was chosen for, the hash grid's F and T when the scene
    model chose them (``encoding.n_features_per_level`` or ``encoding.log2_hashmap_size`` null),
    the distortion regulariser when it is on (``loss.distortion_weight``, null: on with the
    unbounded model), and the opacity term when it is on or set for images without alpha
    (``loss.alpha_weight``)."""
    line = trainer.scene_choice.line()
    enc, (features, log2_size) = trainer.cfg.encoding, trainer.hash_grid
    why = ([f"F from the {trainer.scene_model} model"] if enc.n_features_per_level is None else []) + (
        ["T = 2^20 / F"] if enc.log2_hashmap_size is None else [])
    if why:
        line += f"; hash grid F={features}, T=2^{log2_size} (not set in the config: {', '.join(why)})"
    if trainer.distortion_weight > 0:
        why = ("loss.distortion_weight null: on with the unbounded model" if trainer.cfg.loss.distortion_weight is None
               else "loss.distortion_weight")
        line += f"; distortion regulariser {trainer.distortion_weight:g} ({why})"
    if trainer.alpha_weight > 0:
        line += f"; opacity term {trainer.alpha_weight:g} (loss.alpha_weight)"
    elif trainer.cfg.loss.alpha_weight > 0:
        line += "; loss.alpha_weight off: the images carry no alpha"
    return line



def saved_config(cfg: Any) -> dict[str, Any]:
    """The run's ``config.json``: ``cfg`` as a dict with ``data.scene`` made absolute, so that the
    command that continues the run (``--config RUN/config.json --resume ...``) works from any
    working directory."""
    saved = config_to_dict(cfg)
    if saved.get("data", {}).get("scene"):
        saved["data"]["scene"] = str(Path(saved["data"]["scene"]).resolve())
    return saved


def write_config_before_build(run_dir: RunDir, cfg: Any, resuming: bool) -> None:
    """The run's ``config.json`` (:func:`saved_config`) before its trainer is built, unless the run
    resumes into a folder that has one: a resume replaces it only once its snapshot or checkpoint
    has loaded (:func:`write_config_after_load`), so a refused resume leaves the config the
    folder's models were trained with."""
    if not resuming or not run_dir.config_path.is_file():
        run_dir.write_json(run_dir.config_path, saved_config(cfg))


def write_config_after_load(run_dir: RunDir, cfg: Any) -> None:
    """A resume has loaded: the folder's ``config.json`` is this run's from here on."""
    run_dir.write_json(run_dir.config_path, saved_config(cfg))


class Job(abc.ABC):
    """How one process's run differs from a rank's (the stages in the module docstring)."""

    cfg: TrainConfig
    run_dir: RunDir
    is_main: bool = True

    @abc.abstractmethod
    def prepare(self) -> TrainProgress:
        """Stage 1; returns the progress display."""

    @abc.abstractmethod
    def status(self) -> RunStatus:
        """The status of stage 2 (not yet written)."""

    @abc.abstractmethod
    def build(self, status: RunStatus, progress: TrainProgress) -> Any:
        """Stage 3: the trainer, resumed or warm-started as asked."""

    def stop_request(self, trainer: Any) -> Any:
        """A context around the training loop: what Ctrl-C does during it (a rank: Python's own
        ``KeyboardInterrupt``, at once)."""
        return contextlib.nullcontext()

    def keep_interrupted_model(self, trainer: Any, status: RunStatus, progress: TrainProgress) -> None:
        """After Ctrl-C or SIGTERM stopped the training between two steps: keep the model of the last step
        (a rank: nothing; its checkpoints are ``--checkpoint-every``'s)."""

    def keep_model(self, trainer: Any, status: RunStatus) -> None:
        """Stage 5's first part: a rank's final checkpoint (one process keeps its snapshot later)."""

    def last_model(self) -> Path | None:
        """The newest model the run directory holds (a diverged run's last finite one), or None."""
        return self.run_dir.latest_snapshot()

    def end(self, status: RunStatus) -> None:
        """Stage 6: write the status (a rank first waits for its peers and then leaves the group)."""
        status.write()


class OneProcess(Job):
    """A run of one process (no process group)."""

    def __init__(self, cfg: TrainConfig, args: argparse.Namespace) -> None:
        self.cfg, self.args = cfg, args
        self.scene_path = scene_path_of(cfg)

    def prepare(self) -> TrainProgress:
        from trainer.cpu_threads import apply_cpu_threads

        cfg, args = self.cfg, self.args
        check_before_start(cfg, args.out, args.resume)
        self.run_dir = RunDir(args.out or default_run_dir(self.scene_path)).create()
        self.run_dir.remove_stale_temp_files()
        if args.resume is not None:
            self.run_dir.archive_eval()  # the folder's eval.json is of an earlier step
        write_config_before_build(self.run_dir, cfg, resuming=args.resume is not None)
        cpu = on_cpu(cfg.training.device)
        threads = apply_cpu_threads(cfg.training.cpu_threads, 1).words if cpu else None
        print(opening_line(cfg, args, 1, threads=threads), flush=True)  # before the progress bar shows
        warning = cpu_config_warning(cfg, cpu)
        if warning:
            print(warning, flush=True)
        return TrainProgress(cfg.training.n_steps, cfg.training.quiet, cfg.training.time_budget_s)

    def status(self) -> RunStatus:
        return RunStatus(self.run_dir, True, scene=str(self.scene_path))

    def stop_request(self, trainer: Any) -> Any:
        return StopAfterStep(lambda: trainer.step)  # Ctrl-C: after the step under way

    def keep_interrupted_model(self, trainer: Any, status: RunStatus, progress: TrainProgress) -> None:
        path = self.run_dir.snapshot_path(trainer.step)
        try:
            if not path.exists():
                trainer.save(path)
        except Exception as exc:  # the run still ends as interrupted, with what it had kept before
            progress.message(f"Ctrl-C: no snapshot of step {trainer.step} was kept ({type(exc).__name__}: {exc})")
            return
        status["snapshot"] = str(path)

    def build(self, status: RunStatus, progress: TrainProgress) -> Any:
        from trainer.train.loop import train_from_config

        args = self.args
        trainer = train_from_config(self.cfg, self.scene_path, self.run_dir, resume=args.resume)
        if args.resume is not None:
            write_config_after_load(self.run_dir, self.cfg)
        progress.message(_fitted(trainer.scene.size_rule))  # which size rule won, and why
        progress.message(_fitted(scene_model_text(trainer)))  # the scene model, and the capture it was chosen for
        if args.resume is not None:
            status["resumed_from"] = str(args.resume)
            status["resumed_from_step"] = trainer.step
            check_n_steps_reach(self.cfg, trainer.step, f"snapshot {args.resume}")
            progress.message("\n".join(fit_lines([
                "resumed from", str(args.resume), f"at step {trainer.step}",
                f"(train_time_s includes its {trainer.train_time_s:.1f} s", "of training before the resume)"])))
            budget = self.cfg.training.time_budget_s
            if budget and trainer.train_time_s >= 0.9 * budget:
                source = ("--time-budget" if getattr(args, "time_budget_s", None) is not None
                          else f"training.time_budget_s of --config {args.config}" if getattr(args, "config", None)
                          else "training.time_budget_s")
                left = budget - trainer.train_time_s
                progress.message("warning: " + fitted_warning(
                    f"the time budget of {budget:g} s ({source}) counts the "
                    f"{trainer.train_time_s:.1f} s trained before the resume, so "
                    + (f"the run stops within about {left:.1f} s" if left > 0 else "it is spent: no step runs")
                    + "; a larger --time-budget trains on"))
        warm_start = getattr(args, "warm_start", None)
        if warm_start is not None:
            status["warm_started_from"] = str(warm_start)
            status["warm_started_from_step"] = trainer.warm_start(Path(warm_start))
            progress.message(_fitted(f"warm start from {warm_start} (its step {status['warm_started_from_step']}); "
                                     "optimiser and step counter start afresh"))
        return trainer


class Rank(Job):
    """A rank of a distributed job (or sharded checkpoints resumed on one process). Rank 0 writes
    ``config.json``, ``status.json``, ``eval.json`` and renders; every rank writes its metrics file
    and its part of each checkpoint (at ``--checkpoint-every`` and at the end)."""

    def __init__(self, cfg: TrainConfig, args: argparse.Namespace, env: Any) -> None:
        self.cfg, self.args, self.env = cfg, args, env
        self.is_main = env.is_main

    def prepare(self) -> TrainProgress:
        from trainer.cpu_threads import apply_cpu_threads
        from trainer.parallel.dist_env import restart_count

        env, args = self.env, self.args
        if env.is_distributed and args.out is None:
            raise ConfigError("--out: required with several ranks (they share one run directory)")
        if env.device.type == "cpu":
            apply_cpu_threads(self.cfg.training.cpu_threads, env.local_world_size)
        if self.cfg.training.device != str(env.device):
            self.cfg = apply_overrides(self.cfg, {"training.device": str(env.device)})
        self.scene_path = scene_path_of(self.cfg)
        if not env.is_distributed:  # one process resuming sharded checkpoints: it starts the job (a launcher checks ranks)
            check_before_start(self.cfg, args.out, args.resume)
        self.run_dir = RunDir(args.out or default_run_dir(self.scene_path)).create()
        self.restarts = restart_count()
        if env.is_main and (args.resume is not None or self.restarts > 0):
            self.run_dir.archive_eval()  # the folder's eval.json is of an earlier step
        t = self.cfg.training
        return TrainProgress(t.n_steps, t.quiet or not env.is_main, t.time_budget_s)

    def status(self) -> RunStatus:
        return RunStatus(self.run_dir, self.env.is_main, scene=str(self.scene_path), world_size=self.env.world_size,
                         **{RESTART_COUNT_KEY: self.restarts})

    def build(self, status: RunStatus, progress: TrainProgress) -> Any:
        from trainer.data import SkippedFramesWarning, load_scene
        from trainer.parallel.build import build_distributed_trainer
        from trainer.parallel.dist_env import init_distributed

        cfg = self.cfg
        init_distributed(self.env, cfg.distributed.timeout_s)
        resume = resume_source(self.args.resume, self.run_dir)
        if self.env.is_main:
            write_config_before_build(self.run_dir, cfg, resuming=resume is not None)
        with warnings.catch_warnings():
            if not self.env.is_main:  # rank 0 says it; where ranks share a terminal (torchrun, srun)
                warnings.simplefilter("ignore", SkippedFramesWarning)  # another rank's copy would repeat it
            scene = load_scene(self.scene_path, **cfg.data.scene_options())
        progress.message(_fitted(scene.size_rule))  # which size rule won, and why (rank 0)
        trainer = build_distributed_trainer(cfg, scene, self.run_dir)
        progress.message(_fitted(scene_model_text(trainer)))  # the scene model, and the capture it was chosen for
        trainer.keep_checkpoints = self.args.keep_checkpoints
        if resume is not None:
            status["resumed_from"] = str(trainer.load_checkpoint(Path(resume)))
            if self.env.is_main:
                write_config_after_load(self.run_dir, cfg)
            status["resumed_from_step"] = trainer.step
            check_n_steps_reach(cfg, trainer.step, f"checkpoint {status['resumed_from']}")
            after = f" after restart {self.restarts}" if self.restarts else ""
            progress.message("\n".join(fit_lines(["resumed from checkpoint", status["resumed_from"],
                                                   f"at step {trainer.step}{after}"])))
        elif self.restarts:
            progress.message(f"restart {self.restarts}: no complete checkpoint yet; training from step 0")
        return trainer

    def keep_model(self, trainer: Any, status: RunStatus) -> None:
        # decided from the trainer's own record: every rank must agree without reading the disk
        if trainer.last_checkpoint is not None and trainer.last_checkpoint[0] == trainer.step:
            newest = trainer.last_checkpoint[1]
        else:
            newest = trainer.save_checkpoint()
        status["checkpoint"] = str(newest)

    def last_model(self) -> Path | None:
        from trainer.parallel.checkpoint import latest_checkpoint

        return latest_checkpoint(self.run_dir.root)

    def end(self, status: RunStatus) -> None:
        from trainer.parallel.dist_env import shutdown_distributed, wait_for_peers

        peer_error = None
        if is_completed(status):  # every rank must finish before the group goes
            try:
                wait_for_peers()
            except LaunchError as exc:
                peer_error = exc
                status.update(failed_fields(str(exc)))
        status.write()
        shutdown_distributed()
        if peer_error is not None:
            raise peer_error


def launcher_says_how_to_continue() -> bool:
    """Whether this process's lines are repeated on the console of ``python -m trainer
    --nproc-per-node``'s launcher (rank 0 of its node 0, one rank or several: the console prefix is
    set, see :mod:`trainer.parallel.rank_log`), which prints the newest model and the command that
    continues the run once every rank has stopped (stopped by a signal, or failed with a model
    kept): the rank then says only where it stopped, so the block is not printed twice. Ranks
    started by torchrun or srun, and a run without a launcher, print it themselves."""
    return bool(os.environ.get(CONSOLE_PREFIX_ENV))


def run_training(cfg: TrainConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Train as configured (the stages of the module docstring): one process, or this process's
    rank of a job; returns the status fields (also in ``status.json``).

    Raises:
        ConfigError: ``--save-snapshot`` not writable, ``--warm-start`` with ``--resume`` or with
            several ranks, ``--out`` in use or missing with several ranks, bad settings.
        SceneError: the scene does not exist or cannot be loaded.
        LaunchError: the process group could not be formed, or a peer did not finish.
        KeyboardInterrupt, Terminated: Ctrl-C or SIGTERM (``status.json`` says interrupted); after
            Ctrl-C (SIGTERM), the process that owns the run directory raises :class:`RunInterrupted`
            (:class:`RunTerminated`), whose message says where the newest complete model is and how
            to continue; SIGTERM while the loop trains keeps the step under way's snapshot first.
    """
    if args.save_snapshot:
        prepare_output_file(args.save_snapshot, "--save-snapshot")
    args.resume = resume_path(args.resume, getattr(args, "out", None))
    warm_start = getattr(args, "warm_start", None)
    if warm_start is not None and args.resume is not None:
        raise ConfigError("--warm-start: a run either resumes (--resume) or starts warm, not both")
    env = distributed_env(cfg, args)
    if env is not None and warm_start is not None:
        raise ConfigError(f"--warm-start {warm_start}: single-process runs only (this run has "
                          f"{env.world_size} ranks)")
    job: Job = OneProcess(cfg, args) if env is None else Rank(cfg, args, env)
    progress = job.prepare()
    status = job.status()
    status.write()  # a killed run still says it was running
    trainer = None
    try:
        progress.startup_begins()  # off a TTY: a line now, the next at the start-up's end with its seconds
        t0 = time.perf_counter()  # wall_s: this process's, from here (scene loading, the start-up) to its end
        trainer = job.build(status, progress)
        status[DERIVED_KEY] = trainer.derived_settings()  # what the config's nulls became for this scene
        if trainer.scene.skipped:
            status[SKIPPED_FRAMES_KEY] = len(trainer.scene.skipped)
        live = start_live_view(args, trainer, job.run_dir, progress.message, is_main=job.is_main)  # --view
        status[TRAIN_START_KEY] = time.time()
        with job.stop_request(trainer) as stop:
            last = train_with_progress(trainer, job.cfg, progress, live, stop)
        status.update({STATE_KEY: COMPLETED, "step": trainer.step, "train_time_s": trainer.train_time_s})
        job.keep_model(trainer, status)
        finish_status(trainer, args, status, progress, last, t0)
        status.end()
        return status
    except BaseException as exc:
        with signals_held():  # a second Ctrl-C must not cut the run's end short (status.json left running)
            progress.close()
            if isinstance(exc, (StoppedAfterStep, TerminatedAfterStep)):
                job.keep_interrupted_model(trainer, status, progress)
            error = keeping_finite_model(exc, status, job.last_model())
            status.end(error)
            if isinstance(error, (KeyboardInterrupt, Terminated)) and job.is_main:
                at = f" at step {trainer.step}" if trainer is not None else " before training started"
                env = getattr(job, "env", None)
                where = "\n".join([f"the run stopped{at}", *([] if launcher_says_how_to_continue() else resume_block(
                    job.run_dir, job.last_model(), env.local_world_size if env is not None else 1,
                    flags=getattr(args, "resume_flags", ())))])
                error = RunInterrupted(where) if isinstance(error, KeyboardInterrupt) else RunTerminated(where)
        raise error from exc.__cause__
    finally:
        with signals_held():
            if trainer is not None:
                trainer.close()
            job.end(status)

"""Training as one process: the training flags and what one process of ``python -m trainer``
(:mod:`trainer.launch_cli`, the front door that also launches ``--nproc-per-node`` ranks) does.

Distributed-aware: when the launcher's environment (torchrun / torch elastic / ``python -m trainer
--nproc-per-node``, or SLURM) reports several ranks, or ``--resume`` names a folder of sharded
checkpoints, the process joins the process group and trains with
:func:`trainer.parallel.build.build_distributed_trainer` (data parallel or subgrid). All ranks
share one run directory (``--out``, required with several ranks). Workers restarted by the elastic
agent (``TORCHELASTIC_RESTART_COUNT`` > 0) resume from the newest complete checkpoint of the run
directory.

Flags instant-ngp users know are accepted as aliases: ``--scene``, ``--network``, ``--n_steps``,
``--save_snapshot``, ``--load_snapshot``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig, apply_overrides, config_to_dict, dump_config, load_config, parse_override
from trainer.errors import ConfigError, LaunchError, NgptuneError, SceneError, TrainingError
from trainer.rundir import RunDir, prepare_output_file
from trainer.runstatus import (
    COMPLETED,
    RESTART_COUNT_KEY,
    RUN_DIR_KEY,
    RUNNING,
    STATE_KEY,
    TRAIN_START_KEY,
    failed_fields,
    interrupted_fields,
    is_completed,
    print_error,
)
from trainer.viewer.flags import add_live_view_arguments
from trainer.viewer.live import start_live_view

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (ArgumentTypeError otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def add_scene_format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--camera-convention`` and ``--aabb-scale`` (config keys ``data.format``,
    ``data.camera_convention``, ``data.aabb_scale``)."""
    parser.add_argument("--format", dest="scene_format", choices=("colmap", "llff", "blender", "ngp"), default=None,
                        help="read this format from a folder holding several (default: most camera information: "
                             "colmap > llff > blender > ngp; data.format)")
    parser.add_argument("--camera-convention", choices=("opengl", "opencv"), default=None,
                        help="camera axes of transforms*.json poses (default opengl; data.camera_convention)")
    parser.add_argument("--aabb-scale", type=int, default=None,
                        help="scene box: this power of two (1..128) instead of the scene's or the derived one (data.aabb_scale)")


def scene_format_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``data.*`` overrides that :func:`add_scene_format_arguments`' flags set."""
    flags = {"data.format": getattr(args, "scene_format", None),
             "data.camera_convention": getattr(args, "camera_convention", None),
             "data.aabb_scale": getattr(args, "aabb_scale", None)}
    return {k: v for k, v in flags.items() if v is not None}


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the training flags of one process to ``parser`` (:func:`trainer.launch_cli.add_arguments`
    adds the launch flags)."""
    parser.add_argument("--scene", type=Path, default=None, help="scene folder or file (default: the built-in demo scene)")
    parser.add_argument("--config", "--network", dest="config", type=Path, default=None, help="trainer config (JSON with comments)")
    parser.add_argument("--n-steps", "--n_steps", dest="n_steps", type=int, default=None, help="training steps")
    parser.add_argument("--time-budget", dest="time_budget_s", type=float, default=None, help="training seconds (excludes evaluation)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--precision", choices=PRECISIONS, default=None)
    parser.add_argument("--downscale", type=int, default=None,
                        help="shrink images by this integer factor (default: LLFF/COLMAP longest side to <= 1600 px)")
    add_scene_format_arguments(parser)
    parser.add_argument("--save-snapshot", "--save_snapshot", dest="save_snapshot", type=Path, default=None, help="write a snapshot here at the end")
    parser.add_argument("--resume", "--load_snapshot", dest="resume", type=Path, default=None, help="continue from this snapshot")
    parser.add_argument("--warm-start", dest="warm_start", type=Path, default=None, metavar="SNAPSHOT",
                        help="start from this snapshot's model and occupancy grid, with a fresh optimiser and step 0 "
                             "(e.g. the previous time step of a sequence; one process)")
    parser.add_argument("--snapshot-every", "--checkpoint-every", dest="snapshot_every", type=int, default=None,
                        help="write a snapshot (distributed: a sharded checkpoint) into the run directory every N steps")
    parser.add_argument("--keep-checkpoints", type=positive_int, default=3, help="distributed: keep the newest N checkpoints (default 3)")
    parser.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps (0: only at the end)")
    parser.add_argument("--eval-max-images", type=int, default=None, help="evaluate at most this many images")
    parser.add_argument("--no-eval", action="store_true", help="skip the final evaluation")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<time>-<scene>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. --set training.log_every=10")
    parser.add_argument("--trace-steps", default=None, metavar="A:B",
                        help="record steps A..B-1 with torch.profiler; Chrome traces go to RUN/traces/ (profile.trace_steps)")
    parser.add_argument("--emulate-interconnect", choices=("none", "nvlink", "pcie", "sockets"), default=None,
                        help="NCCL only: make one NVLink host's ranks talk like PCIe or sockets (distributed.emulate_interconnect)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--quiet", action="store_true", help="plain log lines, no progress bar")
    parser.add_argument("--cpu-threads", dest="cpu_threads", type=int, default=None, metavar="N",
                        help="intra-op threads of each rank on a CPU; 0: cores // ranks on the host (training.cpu_threads)")
    add_live_view_arguments(parser)


CPU_PRESET = Path(__file__).resolve().parents[1] / "configs" / "small.json"
"""The config a run without ``--config`` takes on a CPU (:func:`default_config_path`)."""


def default_config_path(config: Path | None, device: str | None) -> Path | None:
    """The config file a run reads: ``config`` as given when there is one; without it, on a CPU
    (``device``: ``--device`` / ``training.device`` as given, None for the default ``auto``)
    :data:`CPU_PRESET` when it exists (the built-in defaults are sized for a GPU: one step of them
    takes seconds there), else None (the built-in defaults)."""
    if config is not None or not CPU_PRESET.is_file():
        return config
    from trainer.train.loop import resolve_device

    try:
        on_cpu = resolve_device(device or "auto").type == "cpu"
    except (ConfigError, RuntimeError):
        return None  # the bad device is reported where the config is validated
    return CPU_PRESET if on_cpu else None


def config_source(args: argparse.Namespace) -> str:
    """How the opening line names the run's config: the ``--config`` path, the CPU preset (chosen
    because none was given on a CPU), or the built-in defaults."""
    if args.config is not None:
        return str(args.config)
    if getattr(args, "config_chosen", None) is not None:
        return f"{args.config_chosen} (the CPU preset: no --config on a CPU)"
    return "built-in defaults"


def opening_line(cfg: TrainConfig, args: argparse.Namespace, ranks: int, local_ranks: int | None = None) -> str:
    """The first line of a run: scene, device, ranks (on a CPU: threads per rank, for
    ``local_ranks`` ranks on this host, default ``ranks``), config and the stopping rule."""
    from trainer.cpu_threads import describe_cpu_threads
    from trainer.train.loop import resolve_device

    stop = f"{cfg.training.n_steps} steps"
    if cfg.training.time_budget_s is not None:
        stop += f" or {cfg.training.time_budget_s:g} s"
    device = resolve_device(cfg.training.device)
    threads = ""
    if device.type == "cpu":
        threads = f" ({describe_cpu_threads(cfg.training.cpu_threads, local_ranks or ranks)})"
    return (f"training {scene_path_of(cfg)} on {device}, "
            f"{ranks} rank{'s' if ranks != 1 else ''}{threads}, config {config_source(args)}, up to {stop}")


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """Config file (``--config``; without it the CPU preset on a CPU, :func:`default_config_path`)
    + ``--set`` overrides + dedicated flags, validated. Sets ``args.config_chosen`` to the preset
    path when it was chosen."""
    overrides: dict[str, Any] = {}
    for item in args.overrides:
        key, value = parse_override(item)
        overrides[key] = value
    path = default_config_path(args.config, args.device or overrides.get("training.device"))
    args.config_chosen = path if args.config is None else None
    cfg = load_config(path)
    flag_map = {
        "training.n_steps": args.n_steps,
        "training.time_budget_s": args.time_budget_s,
        "training.device": args.device,
        "training.precision": args.precision,
        "training.eval_every": args.eval_every,
        "training.eval_max_images": args.eval_max_images,
        "training.cpu_threads": getattr(args, "cpu_threads", None),
        "training.snapshot_every": args.snapshot_every,
        "data.downscale": args.downscale,
        "profile.trace_steps": getattr(args, "trace_steps", None),
        "distributed.emulate_interconnect": getattr(args, "emulate_interconnect", None),
    }
    overrides.update({k: v for k, v in flag_map.items() if v is not None})
    overrides.update(scene_format_overrides(args))
    if args.scene is not None:
        overrides["data.scene"] = str(args.scene)
    if args.quiet:
        overrides["training.quiet"] = True
    return apply_overrides(cfg, overrides) if overrides else cfg


def default_run_dir(scene_path: Path) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{scene_path.name or 'scene'}"


def scene_path_of(cfg: TrainConfig) -> Path:
    if cfg.data.scene:
        return Path(cfg.data.scene)
    from trainer.data.demo import demo_scene_path

    return demo_scene_path()


PLAIN_PROGRESS_EVERY_S = 10.0
"""Off a TTY (or with --quiet), a plain progress line at most this often (s), besides the log lines."""


def eta_seconds(step: int, train_time_s: float, n_steps: int, time_budget_s: float | None) -> float | None:
    """Seconds of training left: the steps to ``n_steps`` at the mean step time so far
    (``train_time_s / step``; a resumed run's ``train_time_s`` includes its earlier training), or
    the rest of ``time_budget_s`` when that comes first; None before the first step."""
    if step <= 0 or train_time_s <= 0:
        return None
    left = (n_steps - step) * train_time_s / step
    if time_budget_s is not None:
        left = min(left, time_budget_s - train_time_s)
    return max(0.0, left)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


class _Progress:
    """Rich progress bar on a TTY (advanced every step, with the ETA), plain lines otherwise (or with
    --quiet): each log record, and a progress line every :data:`PLAIN_PROGRESS_EVERY_S` s."""

    def __init__(self, total: int | None, quiet: bool, time_budget_s: float | None = None) -> None:
        self.plain = quiet or not sys.stdout.isatty()
        self.total = total
        self.time_budget_s = time_budget_s
        self._last_plain = time.perf_counter()
        self._bar = None
        if not self.plain:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                TextColumn("step {task.completed}/{task.total}"),
                TextColumn("eta {task.fields[eta]}"),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
            )
            self._task = self._bar.add_task("train", total=total, info="", eta="-:--")
            self._bar.start()

    @staticmethod
    def describe(record: dict[str, Any]) -> str:
        psnr = record.get("train_psnr_db")
        psnr_txt = f"{psnr:.2f} dB" if isinstance(psnr, (int, float)) else "-"
        loss = record.get("loss")
        loss_txt = f"{loss:.5f}" if isinstance(loss, (int, float)) else "- (no samples yet)"
        return (
            f"loss {loss_txt}  psnr {psnr_txt}  "
            f"rays/s {record['rays_per_s']:.3g}  samples/s {record['throughput_samples_per_s']:.3g}"
        )

    def log(self, record: dict[str, Any]) -> None:
        if self.plain:
            print(f"step {record['step']}  {self.describe(record)}  t={record['wall_time_s']:.1f}s", flush=True)
            self._last_plain = time.perf_counter()
        else:
            self._bar.update(self._task, completed=record["step"], info=self.describe(record))

    def step(self, step: int, train_time_s: float) -> None:
        """After every training step: advance the bar (plain: a line when the interval has passed)."""
        eta = eta_seconds(step, train_time_s, self.total or step, self.time_budget_s)
        if not self.plain:
            self._bar.update(self._task, completed=step, eta=_clock(eta))
            return
        now = time.perf_counter()
        if now - self._last_plain >= PLAIN_PROGRESS_EVERY_S:
            self._last_plain = now
            print(f"progress: step {step}/{self.total} ({100 * step / max(self.total or 1, 1):.0f} %), "
                  f"{train_time_s:.0f} s trained, eta {_clock(eta)}", flush=True)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _is_distributed_run(cfg: TrainConfig, args: argparse.Namespace):
    """The :class:`DistEnv` when this process should run the distributed trainer, else None."""
    from trainer.parallel.dist_env import detect_dist_env

    env = detect_dist_env(cfg)
    if env.is_distributed or (args.resume is not None and Path(args.resume).is_dir()):
        return env  # (a folder: sharded checkpoints, resumed on one process, or their absence reported there)
    return None


def _resume_path(resume: Path | None) -> Path | None:
    """``--resume`` as given, except a single-process run's folder (snapshots, no checkpoints):
    its newest snapshot."""
    if resume is None or not Path(resume).is_dir():
        return resume
    from trainer.parallel.checkpoint import latest_checkpoint

    snapshot = RunDir(resume).latest_snapshot()
    return snapshot if snapshot is not None and latest_checkpoint(Path(resume)) is None else resume


def run_distributed_training(cfg: TrainConfig, args: argparse.Namespace, env) -> dict[str, Any]:
    """Train as one rank of a distributed job (or resume sharded checkpoints on one process).

    Rank 0 writes ``config.json``, ``status.json``, ``eval.json`` and renders; every rank writes
    its metrics file and its part of each checkpoint (at ``--checkpoint-every`` and at the end).

    Raises:
        ConfigError: ``--out`` missing with several ranks; bad parallel settings.
        LaunchError: the process group could not be formed within ``distributed.timeout_s``.
    """

    from trainer.cpu_threads import apply_cpu_threads
    from trainer.data import load_scene
    from trainer.parallel.dist_env import init_distributed, restart_count, shutdown_distributed, wait_for_peers
    from trainer.parallel.build import build_distributed_trainer

    if env.is_distributed and args.out is None:
        raise ConfigError("--out: required with several ranks (they share one run directory)")
    if env.device.type == "cpu":
        apply_cpu_threads(cfg.training.cpu_threads, env.local_world_size)
    if cfg.training.device != str(env.device):
        cfg = apply_overrides(cfg, {"training.device": str(env.device)})
    scene_path = scene_path_of(cfg)
    run_dir = RunDir(args.out or default_run_dir(scene_path)).create()
    status: dict[str, Any] = {STATE_KEY: RUNNING, "scene": str(scene_path), "world_size": env.world_size,
                              RESTART_COUNT_KEY: restart_count()}
    progress = _Progress(cfg.training.n_steps, cfg.training.quiet or not env.is_main, cfg.training.time_budget_s)
    trainer = None
    if env.is_main:
        if args.resume is not None or restart_count() > 0:
            run_dir.archive_eval()  # the folder's eval.json is of an earlier step
        run_dir.write_json(run_dir.status_path, status)  # a killed run still says it was running
    try:
        init_distributed(env, cfg.distributed.timeout_s)
        if env.is_main:
            run_dir.write_json(run_dir.config_path, config_to_dict(cfg))
        scene = load_scene(scene_path, **cfg.data.scene_options())
        trainer = build_distributed_trainer(cfg, scene, run_dir)
        trainer.keep_checkpoints = args.keep_checkpoints
        resume = _resume_source(args.resume, run_dir)
        if resume is not None:
            status["resumed_from"] = str(trainer.load_checkpoint(Path(resume)))
            status["resumed_from_step"] = trainer.step
            check_n_steps_reach(cfg, trainer.step, f"checkpoint {status['resumed_from']}")
            after = f" after restart {status[RESTART_COUNT_KEY]}" if status[RESTART_COUNT_KEY] else ""
            progress.message(f"resumed from checkpoint {status['resumed_from']} at step {trainer.step}{after}")
        elif status[RESTART_COUNT_KEY]:
            progress.message(f"restart {status[RESTART_COUNT_KEY]}: no complete checkpoint yet; training from step 0")
        live = start_live_view(args, trainer, run_dir, progress.message, is_main=env.is_main)
        status[TRAIN_START_KEY] = time.time()
        t0 = time.perf_counter()
        last = _train_with_progress(trainer, cfg, progress, live)
        # decided from the trainer's own record: every rank must agree without reading the disk
        if trainer.last_checkpoint is not None and trainer.last_checkpoint[0] == trainer.step:
            newest = trainer.last_checkpoint[1]
        else:
            newest = trainer.save_checkpoint()
        status.update({STATE_KEY: COMPLETED, "step": trainer.step, "train_time_s": trainer.train_time_s,
                       "checkpoint": str(newest)})
        _finish_status(trainer, args, status, progress, last, t0)
        return status
    except BaseException as exc:
        progress.close()
        status.update(failure_status(exc))
        raise
    finally:
        if trainer is not None:
            trainer.close()
        status[RUN_DIR_KEY] = str(run_dir.root)
        peer_error = None
        if is_completed(status):  # every rank must finish before the group goes
            try:
                wait_for_peers()
            except LaunchError as exc:
                peer_error = exc
                status.update(failed_fields(str(exc)))
        if env.is_main:
            run_dir.write_json(run_dir.status_path, status)
        shutdown_distributed()
        if peer_error is not None:
            raise peer_error


def check_n_steps_reach(cfg: TrainConfig, resumed_step: int, source: str) -> None:
    """A resumed run must not stop before the step it resumed at.

    Raises:
        ConfigError: ``training.n_steps`` below ``resumed_step`` (``source`` names the snapshot or
            checkpoint, e.g. ``"snapshot runs/x/snapshots/step_0000300.pt"``).
    """
    if resumed_step > cfg.training.n_steps:
        raise ConfigError(f"training.n_steps: {cfg.training.n_steps} is below step {resumed_step} of the "
                          f"{source}; give --n-steps {resumed_step} or more")


def _resume_source(resume: Path | None, run_dir: RunDir) -> Path | None:
    """Where a distributed run resumes from: ``--resume``, except after a restart by the elastic
    agent (``--max-restarts``), where the run directory's own newest complete checkpoint wins when
    it is at least as far as ``--resume`` (the restart must not redo the steps since then)."""
    from trainer.parallel.checkpoint import checkpoint_step, latest_checkpoint
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


def _train_with_progress(trainer: Any, cfg: TrainConfig, progress: _Progress, live: Any = None) -> dict[str, Any]:
    """Run ``trainer.train`` with the config's snapshot/eval cadence, reporting through
    ``progress`` (closed afterwards) and ``live`` (``--view``'s viewer or None, closed when the
    training ends); returns the last metrics record."""

    def on_eval(result: dict[str, Any]) -> None:
        progress.message(f"eval step {result['step']}: {result['mean_psnr_db']:.2f} dB on {result['split']}")

    def log(record: dict[str, Any]) -> None:
        if "startup_s" in record and trainer.startup is not None:  # the first record after start-up
            progress.message(trainer.startup.line())
        progress.log(record)

    on_log, on_step = log, progress.step
    if live is not None:
        on_log, on_step = live.hooks(on_log, on_step)
    try:
        last = trainer.train(
            on_log=on_log,
            on_eval=on_eval,
            snapshot_every=cfg.training.snapshot_every,
            eval_every=cfg.training.eval_every,
            on_step=on_step,
        )
    finally:
        if live is not None:
            live.close()
    progress.close()
    return last


def _finish_status(
    trainer: Any, args: argparse.Namespace, status: dict[str, Any], progress: _Progress,
    last: dict[str, Any], t0: float,
) -> None:
    """After training: throughput of the ``last`` record, ``--save-snapshot`` (the path the
    trainer wrote), the final evaluation unless ``--no-eval``, and wall time since ``t0``; all
    into ``status``."""
    if last:
        status["throughput_samples_per_s"] = last.get("throughput_samples_per_s")
    if trainer.startup is not None:
        status.update(startup_s=trainer.startup.startup_s, kernels_compiled=trainer.startup.kernels_compiled,
                      step_kind=trainer.startup.step_kind)
    t = trainer.cfg.training
    if trainer.step < t.n_steps and t.time_budget_s is not None:
        status["stopped_by"] = "time_budget"
        progress.message(
            f"stopped at step {trainer.step} of {t.n_steps}: the time budget of {t.time_budget_s:g} s "
            "(training.time_budget_s, --time-budget) was reached"
        )
    _keep_final_model(trainer, args, status)
    if not args.no_eval:
        progress.message(evaluation_notice(trainer, last))
        started = last_line = time.perf_counter()

        def view_done(done: int, total: int, image: dict[str, Any]) -> None:  # a line per 10 s at most
            nonlocal last_line
            now = time.perf_counter()
            if now - last_line >= 10.0 and done < total:
                last_line = now
                progress.message(f"  evaluated {done}/{total} views in {now - started:.0f} s "
                                 f"(last: {image['name']}, PSNR {image['psnr_db']:.2f} dB)")

        trainer.eval_progress = view_done
        try:
            result = trainer.evaluate()
        except (KeyboardInterrupt, Terminated):
            status["interrupted_during"] = "evaluation"
            progress.message(f"evaluation interrupted; {_model_kept_text(trainer, status)}")
            raise
        except Exception as exc:
            raise TrainingError(f"trained; evaluation failed: {type(exc).__name__}: {exc} "
                                f"({_model_kept_text(trainer, status)})") from exc
        finally:
            trainer.eval_progress = None
        status.update({"eval_psnr_db": result["mean_psnr_db"], "eval_ssim": result["mean_ssim"], "eval_split": result["split"]})
        n_images = len(result["images"])
        status["eval_time_s"] = time.perf_counter() - started
        progress.message(
            f"evaluation on {n_images} {result['split']} image{'s' if n_images != 1 else ''} "
            f"in {status['eval_time_s']:.1f} s: PSNR {result['mean_psnr_db']:.2f} dB, SSIM {result['mean_ssim']:.4f}"
        )
    status["wall_s"] = time.perf_counter() - t0


CPU_FRIENDLY_SAMPLES_PER_STEP = 2**14


def _keep_final_model(trainer: Any, args: argparse.Namespace, status: dict[str, Any]) -> None:
    """Write the trained model before anything else runs after training (evaluation may fail or
    be interrupted): ``--save-snapshot``'s file, else, for a single-process run, a snapshot of the
    last step in the run directory (distributed runs already hold their final checkpoint);
    ``status["snapshot"]`` says where."""
    if args.save_snapshot:
        status["snapshot"] = str(trainer.save(args.save_snapshot))
        return
    run_dir = getattr(trainer, "run_dir", None)
    if status.get("checkpoint") or run_dir is None:
        return
    path = run_dir.snapshot_path(trainer.step)
    if not path.exists():
        trainer.save(path)
    status["snapshot"] = str(path)


def _model_kept_text(trainer: Any, status: dict[str, Any]) -> str:
    """Where the trained model is, for the line that reports a failed or interrupted evaluation."""
    where = status.get("snapshot") or status.get("checkpoint")
    return (f"the trained model (step {trainer.step}) is in {where}; --resume it with --n-steps "
            f"{trainer.step} to evaluate later")


LONG_EVALUATION_S = 600.0
"""An estimated final evaluation longer than this (s) gets a hint on how to shorten it."""


def evaluation_notice(trainer: Any, last: dict[str, Any] | None = None) -> str:
    """The line printed before the final evaluation: which views, how many pixels, an estimated
    time (single process: measured by rendering a sample of their rays with the trained field and
    occupancy grid, :func:`~trainer.train.eval_estimate.measure_eval_seconds`; distributed: from
    the training's own rate), and on a CPU the cap of views in effect and how to change it (it
    renders every pixel of every view and is not in the time budget)."""
    from trainer.train.eval_estimate import eval_seconds_estimate, measure_eval_seconds
    from trainer.train.evaluate import eval_split_name, evaluation_frames

    split = eval_split_name(trainer)
    views = trainer.scene.frames(split)
    cap = trainer.cfg.training.eval_max_images
    chosen = evaluation_frames(views, cap)
    pixels = sum(f.intrinsics.width * f.intrinsics.height for _, f in chosen)
    spp = trainer.cfg.training.eval_spp
    amount = f"{pixels / 1e6:.2f} M pixels" if pixels >= 10_000 else f"{pixels} pixels"
    line = (f"evaluating {len(chosen)} {split} view{'s' if len(chosen) != 1 else ''} "
            f"({amount}, {spp} render(s) each)")
    if getattr(trainer, "world_size", 1) == 1:
        estimate, how = measure_eval_seconds(trainer, [f for _, f in chosen], spp), "measured on a sample of its rays"
    else:
        estimate, how = eval_seconds_estimate(pixels, spp, last), "at this run's training rate"
    if estimate is not None:
        took = f"{estimate:.0f} s" if estimate < 90 else f"{estimate / 60:.1f} min"
        line += f", estimated {took} ({how})"
    if trainer.device.type == "cpu":
        if cap is not None and cap < len(views):
            line += f"; on a CPU at most {cap} of the {len(views)} views (training.eval_max_images; --eval-max-images N)"
        line += "; not counted in --time-budget, --no-eval skips it"
    if estimate is not None and estimate > LONG_EVALUATION_S:
        line += ("; that is long: Ctrl-C keeps the trained model, and fewer views (--eval-max-images 1) or "
                 "smaller images (--downscale N) shorten it")
    return line


def cpu_config_warning(cfg: TrainConfig) -> str | None:
    """A one-line hint when a GPU-sized config is about to train on the CPU (each step of the
    default 2^18-sample config takes seconds there), else None."""
    from trainer.train.loop import resolve_device

    if resolve_device(cfg.training.device).type != "cpu":
        return None
    if cfg.training.target_samples_per_step <= CPU_FRIENDLY_SAMPLES_PER_STEP:
        return None
    return (
        f"note: training on the CPU with {cfg.training.target_samples_per_step} samples per step, "
        "a GPU-sized config (seconds per step); for a quick CPU run use --config configs/small.json "
        "(fewer samples, a smaller grid and fewer march steps)"
    )


def check_before_start(cfg: TrainConfig, out: Path | None, resume: Path | None) -> None:
    """What the process that starts a job checks before it writes anything: the scene exists,
    and an ``--out`` folder that already holds a run is refused unless ``--resume`` continues it
    (two runs never mix their metrics in one folder). Workers do not check the folder: they share
    it and may be restarted into it.

    Raises:
        SceneError: the scene path does not exist.
        ConfigError: ``--out`` holds a run (names the folder and what is in it).
    """
    scene_path = scene_path_of(cfg)
    if not scene_path.exists():
        raise SceneError(f"--scene {scene_path}: scene path does not exist")
    if out is None or resume is not None:
        return
    run_dir = RunDir(out)
    reason = run_dir.existing_run()
    if reason is None:
        return
    snapshot = run_dir.latest_snapshot()
    if snapshot is not None:
        how = f"choose a new folder, or continue that run with --resume {snapshot}"
    elif _has_checkpoint(run_dir):
        how = f"choose a new folder, or continue that run with --resume {out}"
    else:
        how = "choose a new folder (it has no snapshot or checkpoint to resume from)"
    raise ConfigError(f"--out {out}: already holds a run ({reason}); {how}")


def _has_checkpoint(run_dir: RunDir) -> bool:
    """Whether the run directory holds a complete checkpoint (half-written ``.partial`` folders
    of killed writes do not count)."""
    from trainer.parallel.checkpoint import list_checkpoints

    return bool(list_checkpoints(run_dir.checkpoints_dir))


def run_training(cfg: TrainConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Train one process as configured; returns a summary dict (also in ``status.json``).
    Hands over to :func:`run_distributed_training` for a distributed job."""
    from trainer.cpu_threads import apply_cpu_threads
    from trainer.train.loop import resolve_device, train_from_config

    if args.save_snapshot:
        prepare_output_file(args.save_snapshot, "--save-snapshot")
    args.resume = _resume_path(args.resume)
    warm_start = getattr(args, "warm_start", None)
    if warm_start is not None and args.resume is not None:
        raise ConfigError("--warm-start: a run either resumes (--resume) or starts warm, not both")
    env = _is_distributed_run(cfg, args)
    if env is not None:
        if warm_start is not None:
            raise ConfigError(f"--warm-start {warm_start}: single-process runs only (this run has "
                              f"{env.world_size} ranks)")
        return run_distributed_training(cfg, args, env)

    scene_path = scene_path_of(cfg)
    check_before_start(cfg, args.out, args.resume)
    run_dir = RunDir(args.out or default_run_dir(scene_path)).create()
    run_dir.remove_stale_temp_files()
    if args.resume is not None:
        run_dir.archive_eval()  # the folder's eval.json is of an earlier step
    run_dir.write_json(run_dir.config_path, config_to_dict(cfg))
    progress = _Progress(cfg.training.n_steps, cfg.training.quiet, cfg.training.time_budget_s)
    if resolve_device(cfg.training.device).type == "cpu":
        apply_cpu_threads(cfg.training.cpu_threads, 1)
    progress.message(opening_line(cfg, args, 1))
    warning = cpu_config_warning(cfg)
    if warning:
        progress.message(warning)
    status: dict[str, Any] = {STATE_KEY: RUNNING, "scene": str(scene_path)}
    run_dir.write_json(run_dir.status_path, status)  # a killed run still says it was running
    trainer = None
    try:
        trainer = train_from_config(cfg, scene_path, run_dir, resume=args.resume)
        if args.resume is not None:
            status["resumed_from"] = str(args.resume)
            status["resumed_from_step"] = trainer.step
            check_n_steps_reach(cfg, trainer.step, f"snapshot {args.resume}")
            progress.message(f"resumed from {args.resume} at step {trainer.step} (train_time_s includes its "
                             f"{trainer.train_time_s:.1f} s of training before the resume)")
        if warm_start is not None:
            status["warm_started_from"] = str(warm_start)
            status["warm_started_from_step"] = trainer.warm_start(Path(warm_start))
            progress.message(f"warm start from {warm_start} (its step {status['warm_started_from_step']}); "
                             "optimiser and step counter start afresh")
        live = start_live_view(args, trainer, run_dir, progress.message)
        status[TRAIN_START_KEY] = time.time()
        t0 = time.perf_counter()
        last = _train_with_progress(trainer, cfg, progress, live)
        status.update({STATE_KEY: COMPLETED, "step": trainer.step, "train_time_s": trainer.train_time_s})
        _finish_status(trainer, args, status, progress, last, t0)
        return status
    except BaseException as exc:
        progress.close()
        status.update(failure_status(exc))
        raise
    finally:
        if trainer is not None:
            trainer.close()
        status[RUN_DIR_KEY] = str(run_dir.root)
        run_dir.write_json(run_dir.status_path, status)


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The parser of one process's training flags (no launch flags: :func:`trainer.launch_cli.build_parser`)."""
    parser = argparse.ArgumentParser(prog=prog, description="Train an instant-NGP NeRF (one process).")
    add_train_arguments(parser)
    return parser


class Terminated(BaseException):
    """SIGTERM arrived (a launcher or a sweep stopping the run); unwinds so status.json is written."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(f"terminated by signal {signum}")


def failure_status(exc: BaseException) -> dict[str, Any]:
    """``status.json`` fields of a run that ended by ``exc``: interrupted (Ctrl-C, SIGTERM) or failed."""
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        return interrupted_fields(str(exc) or type(exc).__name__)
    return failed_fields(f"{type(exc).__name__}: {exc}")


def train_command(args: argparse.Namespace) -> int:
    """Train one process (or one rank) as ``args`` say; returns the exit status (2 after an
    ``error: `` line, 130 interrupted, 143 terminated). Used by ``python -m trainer`` without
    ``--nproc-per-node`` (:func:`trainer.launch_cli.run_command`) and by ``ngptune demo``."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        cfg = resolve_config(args)
        if args.print_config:
            print(f"config: {config_source(args)}", file=sys.stderr)  # stdout stays a loadable config
            print(dump_config(cfg))
            return 0
        status = run_training(cfg, args)
    except NgptuneError as exc:
        print_error(exc)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    print(json.dumps({k: v for k, v in status.items() if k != "scene"}, default=str))
    return 0

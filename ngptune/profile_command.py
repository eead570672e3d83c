"""``ngptune profile``: run the trainer instrumented and write a profile folder with its report.

    ngptune profile [--scene PATH] [--downscale N] [--config FILE] [--nproc-per-node N] [--steps N]
                    [--trace-steps A:B] [--nsys] [--ncu] [--nvml-interval-ms 100]
                    [--emulate-interconnect ...] [--link-busbw auto|off|GB_PER_S]
                    [--bench-comm-csv FILE] [--set KEY=VALUE ...] [--out DIR]

The trainer runs as a subprocess (``python -m trainer``, with ``--nproc-per-node N`` through
the elastic launcher) into ``<profile>/run``, training as it does for a user: one metrics record per
logging interval (:func:`profile_log_every`: the config's ``training.log_every``, shortened for
short runs; ``--set training.log_every=N`` wins), so a captured step is measured as graph
replays, with the phases of each interval's sampled eager step; and a torch.profiler window in
the steady state (``profile.trace_steps``; default :func:`default_trace_window`, ``--trace-steps``
overrides it). Meanwhile an NVML sampler thread
of this process reads every GPU (:class:`~ngptune.profiling.nvml.NvmlSampler`). Before it, with
more than one rank, the link's all-reduce bus bandwidth is measured once (``--link-busbw auto``,
:mod:`ngptune.profiling.link`: one ``bench-comm`` launch with the run's ranks, backend and emulated
interconnect), read from ``--bench-comm-csv``, or given as a number. Afterwards the tables are
collected (:mod:`ngptune.profiling.collect`), diagnosed (:func:`ngptune.profiling.diagnoses.assess`,
with the link's busbw) and rendered (:func:`ngptune.reporting.profile_report.write_profile_report`).

The console's first line names the steps, the device, the ranks and on a CPU the threads of each
(:func:`opening_lines`, in the words of every command's first line); then it shows the trainer's
opening line (device, ranks, threads), the run's progress from
rank 0's metrics (:class:`ngptune.progress.RunsProgress`) and, at the end, a one-screen summary
(:func:`summary_lines`): step time and its compute and wait shares, the job's and each rank's
throughput, the evaluation when there was one, and every fired diagnosis with its knob.

Exit status: 0 when the run completed and every requested source was collected; 1 when the run
failed (the folder still holds what was collected, ``failure.json`` and the report) or a source
broke (a failed link measurement included: the profile is complete without the figure); 2 for bad
arguments or an unusable ``--bench-comm-csv`` (``error: ...`` from the CLI, nothing written).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ngptune.profiling import SourceStatus
from ngptune.profiling import nsight
from trainer.contract import (
    CONTINUATION,
    LINE_WIDTH,
    REASON_KEY,
    ConfigError,
    add_scene_format_arguments,
    check_ranks_per_node,
    check_run_emulation,
    command_stopping_with_parent,
    counted,
    cpu_config_warning,
    error_or_last_line,
    fit_lines,
    joined,
    last_error_message,
    nonnegative_int,
    print_error,
    runs_on_cpu,
    scene_format_overrides,
    trainer_argv,
)

if TYPE_CHECKING:  # collect, link and nvml load pandas: imported where used, not for --help
    import pandas as pd

    from ngptune.profiling.collect import ProfileDir, RunOutcome
    from trainer.contract import TrainConfig

DEFAULT_STEPS = 30
PROFILE_RECORDS = 10  # interval records a run should have (steady means, the step-time plot)
MIN_LOG_EVERY = 50  # shortest logging interval the profile chooses: at most 1 step in 50 is the sampled eager one
TRACE_STEPS = 5  # steps the default torch.profiler window records
STOP_GRACE_S = 30  # seconds a stopped trainer gets before the next, harder signal
WATCH_EVERY_S = 0.5  # seconds between two looks at the profiled run's metrics
INTERCONNECTS = ("none", "nvlink", "pcie", "sockets")
_WINDOW_RE = re.compile(r"([0-9]+):([0-9]+)")
_LOG_REF_RE = re.compile(r"log: (\S+)\s*$")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune profile`` to the CLI."""
    p = subparsers.add_parser(
        "profile",
        help="train briefly with phase timers, NVML sampling and torch.profiler; write CSVs and report.html",
        description="Run the trainer instrumented (phase timers, NVML sampler, torch.profiler window) and write a profile folder: CSV tables, diagnoses and report.html.",
    )
    p.add_argument("--scene", type=Path, default=None, help="scene folder or file (default: the built-in demo scene)")
    p.add_argument("--downscale", type=int, default=None,
                   help="shrink images by this integer factor, as ngptune train (data.downscale)")
    add_scene_format_arguments(p)
    p.add_argument("--config", type=Path, default=None, help="trainer config (JSON with comments)")
    p.add_argument("--nproc-per-node", type=int, default=None, help="ranks on this node (elastic launcher); default one process")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    p.add_argument("--trace-steps", default=None, metavar="A:B",
                   help="torch.profiler records steps A..B-1 (default: 5 steps in the steady state, in the last "
                        "fifth of --steps and after the occupancy warm-up when the run is long enough)")
    p.add_argument("--eval-images", type=int, default=0, metavar="N",
                   help="score the trained model on at most N test views after the profiled steps, on any "
                        "device (training.eval_max_images; default 0: no evaluation); the background_collapse "
                        "diagnosis needs it")
    p.add_argument("--nsys", action="store_true", help="run under Nsight Systems when nsys is on PATH")
    p.add_argument("--ncu", action="store_true", help="profile the hash-grid kernels with Nsight Compute (separate short run)")
    p.add_argument("--nvml-interval-ms", type=float, default=100.0, help="NVML sampling interval (default 100 ms)")
    p.add_argument("--emulate-interconnect", choices=INTERCONNECTS, default=None,
                   help="NCCL only: make one NVLink host's ranks talk like PCIe or sockets")
    p.add_argument("--link-busbw", default="auto", metavar="auto|off|GB_PER_S",
                   help="the link's all-reduce busbw to compare the gradient all-reduce with: auto (default) "
                        "measures it with bench-comm before training (more than one rank), or GB/s, or off")
    p.add_argument("--bench-comm-csv", type=Path, default=None, metavar="FILE",
                   help="with --link-busbw auto: take the link's busbw from a table `ngptune bench-comm --csv` wrote")
    p.add_argument("--cpu-threads", type=nonnegative_int, default=None, metavar="N",
                   help="intra-op threads of each rank on a CPU; 0: the cores other processes leave free // ranks "
                        "(training.cpu_threads)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="trainer config override (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="profile folder (default: reports/<time>-<scene>)")
    p.set_defaults(func=profile_command)


def profile_log_every(steps: int, configured: int) -> int:
    """The profiled run's ``training.log_every`` when ``--set`` does not give it: the config's own
    interval ``configured``, shortened to ``steps // PROFILE_RECORDS`` for a short run, but not
    below :data:`MIN_LOG_EVERY` (nor above ``configured``).

    Why not shorter: with the captured step (``training.cuda_graphs=auto`` on a GPU) the first
    step of every interval runs eagerly with the phase timers and the others are graph replays
    (``trainer.train.capture``). On lego_400 on one H200 that eager step takes 8.1 ms against
    3.5 ms for a replay (docs/benchmarks.md), so an interval of L steps reads 1.3/L slower than
    the replayed step: 2.6 % at 50, 1.3 % at the trainer's default 100; one record per step
    (every step eager) measured 8.1 ms instead of 3.5. Why not longer: about ten records leave,
    after the warm-up interval, enough for the steady means and the step time over the run.

    >>> profile_log_every(5000, 100), profile_log_every(600, 100), profile_log_every(30, 100), profile_log_every(30, 5)
    (100, 60, 50, 5)
    """
    return min(configured, max(MIN_LOG_EVERY, steps // PROFILE_RECORDS))


def default_trace_window(steps: int, cfg: TrainConfig) -> tuple[int, int]:
    """:data:`TRACE_STEPS` steps of the steady state of a run of ``steps`` steps with ``cfg``: in
    its last fifth, and not before the first whole logging interval after the occupancy warm-up
    (:func:`ngptune.profiling.diagnoses.steps_past_occupancy_warmup`; by then the captured step
    has long been captured: start-up is its first 4 steps); a run too short for that traces its
    last steps. A window that would hold the first step of a logging interval (a step index
    divisible by ``training.log_every``: the sampled eager step of a captured step) starts just
    after it when that fits (intervals longer than the window), so it records graph replays
    only, as the step runs; torch.profiler sees their kernels through CUPTI (bench/launch_count.py
    counts the kernels of replays so).

    With the defaults (occupancy warm-up 256, log_every 100): 5000 → (4001, 4006); with
    log_every 60: 600 → (481, 486); 30 → (25, 30); 1 → (0, 1).
    """
    from ngptune.profiling.diagnoses import steps_past_occupancy_warmup

    log_every = cfg.training.log_every
    start = min(max(steps - steps // 5, steps_past_occupancy_warmup(cfg)), max(steps - TRACE_STEPS, 0))
    eager = (start + TRACE_STEPS - 1) // log_every * log_every  # the last interval start up to the window's end
    if log_every > TRACE_STEPS and start <= eager and eager + 1 + TRACE_STEPS <= steps:
        start = eager + 1
    return start, min(start + TRACE_STEPS, steps)


def parse_trace_window(text: str) -> tuple[int, int]:
    """``"A:B"`` → (A, B).

    Raises:
        ConfigError: naming ``--trace-steps`` unless 0 <= A < B.
    """
    match = _WINDOW_RE.fullmatch(text.strip())
    if match is None or int(match.group(1)) >= int(match.group(2)):
        raise ConfigError(f'--trace-steps: expected "A:B" with 0 <= A < B, got {text!r}')
    return int(match.group(1)), int(match.group(2))


def _check_args(args: argparse.Namespace) -> None:
    from ngptune.profiling.link import parse_link_busbw

    if args.steps < 1:
        raise ConfigError(f"--steps: expected an integer >= 1, got {args.steps}")
    if args.downscale is not None and args.downscale < 1:
        raise ConfigError(f"--downscale: expected an integer >= 1, got {args.downscale}")
    if args.eval_images < 0:
        raise ConfigError(f"--eval-images: expected an integer >= 0, got {args.eval_images}")
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise ConfigError(f"--nproc-per-node: expected an integer >= 1, got {args.nproc_per_node}")
    if not args.nvml_interval_ms > 0:
        raise ConfigError(f"--nvml-interval-ms: expected a positive number, got {args.nvml_interval_ms:g}")
    if parse_link_busbw(args.link_busbw) != "auto" and args.bench_comm_csv is not None:
        raise ConfigError(f"--bench-comm-csv: gives the link's busbw for --link-busbw auto; "
                          f"it cannot be combined with --link-busbw {args.link_busbw}")


def preset_path(args: argparse.Namespace) -> Path | None:
    """The config file the profiled run reads: ``--config``, else on a CPU (``--set
    training.device`` or none) the CPU preset, as the trainer chooses
    (:func:`trainer.contract.default_config_path`); None for the built-in defaults."""
    from ngptune.processes import cuda_device_count
    from trainer.contract import default_config_path, parse_override

    device = dict(parse_override(item) for item in args.overrides).get("training.device")
    return default_config_path(args.config, runs_on_cpu(device, cuda_device_count()))


def opening_lines(args: argparse.Namespace, cfg: TrainConfig, ranks: int, window: tuple[int, int],
                  log_path: Path) -> list[str]:
    """The profile's first lines (under 80 columns, :func:`~trainer.contract.textlines.fit_lines`;
    no bracket inside another): its steps, the device, the ranks and, on a CPU, the threads of
    each rank in the words every command's first line uses
    (:func:`trainer.contract.describe_cpu_threads`), the logging interval of ``cfg``, the
    torch.profiler ``window`` and where the trainer's output goes (``log_path``)."""
    from ngptune.processes import cuda_device_count
    from trainer.contract import describe_cpu_threads, run_device

    device = run_device(cfg.training.device, cuda_device_count())
    threads = [f"{describe_cpu_threads(cfg.training.cpu_threads, ranks)},"] if device == "cpu" else []
    return fit_lines([f"profile: {counted(args.steps, 'step')} on {device},", f"{counted(ranks, 'rank')},", *threads,
                      f"a metrics record every {counted(cfg.training.log_every, 'step')},",
                      f"torch.profiler steps {window[0]}:{window[1]};", "trainer output in", str(log_path)])


def run_config(args: argparse.Namespace) -> TrainConfig:
    """The profiled run's config (``--config``, ``--set``, ``--scene``, ``--emulate-interconnect``)
    with the profile's logging interval (:func:`profile_log_every`) unless ``--set`` gives one;
    validates them before anything is written."""
    from trainer.contract import apply_overrides, load_config, parse_override

    overrides = dict(parse_override(item) for item in args.overrides)
    path = preset_path(args)  # as the trainer chooses
    if args.scene is not None:
        overrides["data.scene"] = str(args.scene)
    if args.emulate_interconnect is not None:
        overrides["distributed.emulate_interconnect"] = args.emulate_interconnect
    if args.downscale is not None:
        overrides["data.downscale"] = args.downscale
    if args.cpu_threads is not None:
        overrides["training.cpu_threads"] = args.cpu_threads
    overrides.update(scene_format_overrides(args))
    cfg = load_config(path, overrides)
    if "training.log_every" in overrides:  # the user's --set wins
        return cfg
    return apply_overrides(cfg, {"training.log_every": profile_log_every(args.steps, cfg.training.log_every)})


def _scene_name(cfg: TrainConfig) -> str:
    """The scene's name for the default folder (without a scene: the demo scene's, as the trainer's)."""
    from ngptune.processes import demo_scene_path

    return (Path(cfg.data.scene) if cfg.data.scene else demo_scene_path()).name or "scene"


def default_profile_dir(scene_name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{stamp}-{scene_name}"


def trainer_command(args: argparse.Namespace, run_dir: Path, window: tuple[int, int], *, log_every: int,
                    cuda_profiler_range: bool) -> list[str]:
    """The ``python -m trainer`` command line of the profiled run (:func:`trainer.contract.trainer_argv`):
    one metrics record per ``log_every`` steps (``training.log_every``, before ``--set`` so the user's wins)."""
    overrides = [f"training.log_every={log_every}", *(["profile.cuda_profiler_range=true"] if cuda_profiler_range else []),
                 *([f"data.downscale={args.downscale}"] if args.downscale is not None else []),
                 *([f"training.cpu_threads={args.cpu_threads}"] if args.cpu_threads is not None else []), *args.overrides, *(f"{key}={json.dumps(value)}" for key, value in scene_format_overrides(args).items())]
    return trainer_argv(nproc_per_node=args.nproc_per_node, n_steps=args.steps, out=run_dir, quiet=True,
                        evaluate=args.eval_images > 0, eval_max_images=args.eval_images or None, trace_steps=window,
                        scene=args.scene, config=args.config, emulate_interconnect=args.emulate_interconnect,
                        overrides=overrides)


def _run_logged(argv: list[str], log_path: Path, watch: Callable[[], None] | None = None) -> int:
    """Run ``argv`` with stdout and stderr into ``log_path`` and return its exit status;
    ``watch()`` is called every :data:`WATCH_EVERY_S` seconds while it runs (progress).

    On Ctrl-C (which a terminal sends to the child as well) the child gets
    :data:`STOP_GRACE_S` seconds to write its status, then SIGTERM (the trainer records it as
    interrupted), then SIGKILL. The child starts through :mod:`trainer.contract.lifeline`'s wrapper, so it
    gets SIGTERM (and stops its ranks) when the profile itself is killed."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command_stopping_with_parent(argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            while watch is not None:
                try:
                    return proc.wait(timeout=WATCH_EVERY_S)
                except subprocess.TimeoutExpired:
                    watch()
            return proc.wait()
        except KeyboardInterrupt:
            for stop in (None, proc.terminate, proc.kill):
                if stop is not None:
                    stop()
                try:
                    return proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    continue
            return proc.wait()


def run_outcome(exit_code: int, profile: ProfileDir) -> RunOutcome:
    """How the trainer command ended: the reason from its ``error:`` line (the launcher names the
    failed rank and its log there), else ``status.json``'s reason, else the last line of its output."""
    from ngptune.profiling.collect import RunOutcome

    if exit_code == 0:
        return RunOutcome(True, 0)
    log_text = profile.trainer_log_path.read_text(encoding="utf-8", errors="replace") if profile.trainer_log_path.is_file() else ""
    status = profile.run.read_status() or {}
    reason = last_error_message(log_text)
    if reason is None:
        reason = str(status.get(REASON_KEY) or error_or_last_line(log_text)
                     or f"the trainer exited with status {exit_code}")
    log_path = profile.trainer_log_path
    match = _LOG_REF_RE.search(reason)
    if match:
        log_path = Path(match.group(1))
        reason = reason[: match.start()].rstrip("; ")
    return RunOutcome(False, exit_code, reason, log_path)


def _run_ncu(args: argparse.Namespace, profile: ProfileDir, window: tuple[int, int], log_every: int) -> SourceStatus:
    """A separate short run under Nsight Compute (kernel replay would distort the measured run)."""
    ncu = nsight.find_tool("ncu")
    if ncu is None:
        return nsight.not_on_path("ncu")
    short = argparse.Namespace(**{**vars(args), "steps": min(args.steps, window[1])})
    inner = trainer_command(short, profile.ncu_run.root, window, log_every=log_every, cuda_profiler_range=False)
    profile.ncu_report_base.parent.mkdir(parents=True, exist_ok=True)
    code = _run_logged(nsight.ncu_command(ncu, profile.ncu_report_base, inner), profile.ncu_report_base.parent / "ncu.log")
    status = nsight.ncu_export(ncu, profile.ncu_report_base.with_suffix(".ncu-rep"), profile.ncu_csv_path)
    if code != 0 and status.status == "ok":
        return SourceStatus("failed", f"ncu run exited {code} (see {profile.ncu_report_base.parent / 'ncu.log'}); {status.detail}")
    return status


def _link_busbw(mode: str | float, cfg: TrainConfig, ranks: int, profile: ProfileDir) -> tuple[float | None, SourceStatus]:
    """The link's busbw (GB/s) for ``--link-busbw`` ``mode`` and its ``link_busbw`` source entry."""
    if mode == "off":
        return None, nsight.not_requested("--link-busbw off")
    if not isinstance(mode, str):
        return mode, SourceStatus("ok", f"given: --link-busbw {mode:g} GB/s")
    if ranks < 2:
        return None, SourceStatus("missing", "one rank: no gradient all-reduce, so no link to measure")
    from ngptune.profiling.link import measure_link_busbw

    print(f"profile: measuring the link (all-reduce on {ranks} ranks) before training", flush=True)
    return measure_link_busbw(cfg, ranks, profile.bench_comm_dir, profile.bench_comm_csv_path)


def profile_command(args: argparse.Namespace) -> int:
    """Run the profile (module docstring); returns the exit status."""
    from ngptune.profiling.collect import ProfileDir, collect, write_failure, write_tables
    from ngptune.profiling.diagnoses import (
        ProfileInputs, assess, config_of_run, diagnoses_table, evaluation_of_run, occupancy_records,
    )
    from ngptune.processes import cuda_device_count
    from ngptune.profiling.runs import metrics_frame
    from ngptune.profiling.link import parse_link_busbw, read_link_busbw
    from ngptune.profiling.nvml import NvmlSampler
    from trainer.contract import check_scene_found

    _check_args(args)
    given_window = parse_trace_window(args.trace_steps) if args.trace_steps else None
    cfg = run_config(args)
    if cfg.data.scene:  # refused before the profile folder is made: a missing path, a folder of no scene
        if not Path(cfg.data.scene).exists():
            raise ConfigError(f"--scene {cfg.data.scene}: scene path does not exist")
        check_scene_found(cfg.data.scene, cfg.data.format)
    log_every = cfg.training.log_every
    window = given_window if given_window is not None else default_trace_window(args.steps, cfg)
    check_run_emulation(cfg, cuda_device_count())  # the trainer would refuse it after the profile folder was made
    ranks = args.nproc_per_node or 1
    if args.nproc_per_node is not None:  # (the same: the launcher refuses more ranks than the host holds)
        from ngptune.tuning.concurrency import host_cores

        check_ranks_per_node(ranks, on_cpu=runs_on_cpu(cfg.training.device, cuda_device_count()),
                             cpu_cores=host_cores(), cuda_devices=cuda_device_count())
    link_from_csv = None
    if args.bench_comm_csv is not None:
        link_from_csv = read_link_busbw(args.bench_comm_csv, emulated_interconnect=cfg.distributed.emulate_interconnect,
                                        world_size=ranks)
    profile = ProfileDir(args.out if args.out is not None else default_profile_dir(_scene_name(cfg)))
    if profile.run.root.exists():
        raise ConfigError(f"--out {profile.root}: already holds a profile (its run/ exists); choose a new folder")
    if profile.root.is_dir() and any(profile.root.iterdir()):
        names = sorted(p.name for p in profile.root.iterdir())
        found = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        raise ConfigError(f"--out {profile.root}: is not empty (holds {found}); a profile needs its own folder")
    profile.root.mkdir(parents=True, exist_ok=True)
    # (after every check that can refuse the run) the first line: device and threads, as every command's
    print("\n".join(opening_lines(args, cfg, ranks, window, profile.trainer_log_path)), flush=True)
    preset = preset_path(args)
    if preset is not None and args.config is None:
        print("\n".join(fit_lines(["profile: no --config on a CPU:", "the profiled run uses the CPU preset",
                                    str(preset)])), flush=True)
    heavy = cpu_config_warning(cfg, runs_on_cpu(cfg.training.device, cuda_device_count()))
    if heavy is not None:
        print(heavy, file=sys.stderr, flush=True)

    sources: dict[str, SourceStatus] = {"nsys": nsight.not_requested("--nsys")}
    nsys = nsight.find_tool("nsys") if args.nsys else None
    if args.nsys and nsys is None:
        sources["nsys"] = nsight.not_on_path("nsys")
    argv = trainer_command(args, profile.run.root, window, log_every=log_every, cuda_profiler_range=nsys is not None)
    if nsys is not None:
        profile.nsys_report_base.parent.mkdir(parents=True, exist_ok=True)
        argv = nsight.nsys_command(nsys, profile.nsys_report_base, argv)

    link_busbw, sources["link_busbw"] = link_from_csv or _link_busbw(parse_link_busbw(args.link_busbw), cfg, ranks, profile)
    watcher = RunWatcher(profile, args.steps)
    sampler = NvmlSampler(args.nvml_interval_ms / 1e3).start()
    exit_code = None
    try:
        exit_code = _run_logged(argv, profile.trainer_log_path, watcher.poll)
    finally:
        sources["nvml"] = sampler.stop()
        watcher.close(exit_code == 0)
    outcome = run_outcome(exit_code, profile)

    if nsys is not None:
        _, sources["nsys"] = nsight.nsys_stats(nsys, profile.nsys_report_base.with_suffix(".nsys-rep"), profile.nsys_csv_prefix)
    if not args.ncu:
        sources["ncu"] = nsight.not_requested("--ncu")
    elif outcome.completed:
        sources["ncu"] = _run_ncu(args, profile, window, log_every)
    else:
        sources["ncu"] = SourceStatus("missing", "not run: the profiled run failed")

    collected = collect(profile, world_size=ranks, trace_window=window, outcome=outcome,
                        gpu_timeline=sampler.frame(), extra_sources=sources,
                        gpu_timeline_origin_unix_s=sampler.origin_unix_s, link_busbw_gb_per_s=link_busbw)
    inputs = ProfileInputs(
        phases=collected.phases,
        summary=collected.summary,
        gpu_timeline=collected.gpu_timeline if len(collected.gpu_timeline) else None,
        kernels=collected.kernels,
        link_busbw_gb_per_s=link_busbw,
        overlap=collected.overlap,
        occupancy=occupancy_records(metrics_frame(profile.run.root)) if outcome.completed else None,
        evaluation=evaluation_of_run(profile.run.root) if outcome.completed else None,
        config=config_of_run(profile.run.root),
        steady_windows=collected.steady_windows,
    )
    checks = assess(inputs)
    write_tables(profile, collected, diagnoses_table(checks))
    if not outcome.completed:
        write_failure(profile, outcome)
    report = _write_report(profile)

    fired = [c.bottleneck for c in checks if c.diagnosis is not None]
    if not outcome.completed:
        print_error(f"training failed: {outcome.reason} (log: {outcome.log_path}); partial profile: {report}")
        return 1
    broken = [f"{name}: {s.detail}" for name, s in collected.sources.items() if s.status == "failed"]
    for line in summary_lines(collected.summary, checks, inputs.evaluation):
        print(line)
    where = f"profile: {report}"  # whole on its line, whatever its length: a path to copy
    diagnoses = f"(diagnoses: {', '.join(fired) if fired else 'none fired'})"
    if len(where) + 1 + len(diagnoses) <= LINE_WIDTH:
        print(f"{where} {diagnoses}")
    else:
        print("\n".join([where, *fit_lines([f"{CONTINUATION}{diagnoses}"])]))
    if broken:
        print_error(f"profile incomplete: {broken[0]}")
        return 1
    return 0


class RunWatcher:
    """The profiled run on the console while it trains: the trainer's opening line once (device,
    ranks, threads), then rank 0's step and throughput (:class:`ngptune.progress.RunsProgress`:
    plain lines every few seconds off a terminal) from its metrics records and, between them, the
    trainer's progress lines (:func:`ngptune.progress.newest_progress`): a short run logs one
    record, at its end."""

    def __init__(self, profile: ProfileDir, steps: int) -> None:
        from ngptune.progress import RunsProgress

        self.profile, self.steps = profile, steps
        self.board = RunsProgress()
        self.board.add("profile run", steps, state="starting")
        self.opening_shown = False

    def poll(self) -> None:
        from ngptune.progress import last_record, newest_progress

        if not self.opening_shown:
            line = opening_statement(self.profile.trainer_log_path)
            if line is not None:
                self.board.message("\n".join(fit_lines([f"trainer: {line}"])))
                self.opening_shown = True
        if self.opening_shown:  # the trainer runs: its step (0 until its first progress line)
            record = newest_progress(last_record(self.profile.run.metrics_path(0)), self.profile.trainer_log_path)
            self.board.update("profile run", record)

    def close(self, completed: bool) -> None:
        """The run's last progress, then its outcome with the step its ``status.json`` ended at."""
        self.poll()
        step = (self.profile.run.read_status() or {}).get("step")
        self.board.finish("profile run", "completed" if completed else "ended",
                          step=step if isinstance(step, int) else None)
        self.board.close()


def opening_statement(log_path: Path) -> str | None:
    """The trainer's opening lines (``training SCENE on DEVICE, N ranks (threads), ...`` and the
    lines that go on from it, :data:`~trainer.contract.textlines.CONTINUATION`) joined into one
    line, once they are in its output with their last newline (the trainer writes them at once);
    else None."""
    lines: list[str] = []
    ended = False
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for raw in f:
                line, ended = raw.rstrip("\n"), raw.endswith("\n")
                if lines and line.startswith(CONTINUATION):
                    lines.append(line)
                elif lines:
                    return joined(lines)
                elif line.startswith("training "):
                    lines.append(line)
    except OSError:
        return None
    return joined(lines) if lines and ended else None


def summary_lines(summary: "pd.DataFrame", checks: list, evaluation: dict | None) -> list[str]:
    """The profile's one-screen summary: step time and steps per second (the interval records
    after the warm-up), then the parts that add up to it (compute, drawing the batch, occupancy
    update, waiting for other ranks, the time outside the named phases; with a captured step the
    step time is the replays' and the phases are those of each interval's sampled eager step, a
    separate measurement: its own line, whose parts add up to that step's named phases), the job's throughput (and each rank's own, with several), the evaluation's PSNR when
    there was one, and each fired diagnosis with its evidence and knob (or that none fired and how
    many checks ran). Each line is under 80 columns (``fit_lines``: a statement too long for one
    line goes on in lines that start with two spaces)."""
    from ngptune.profiling.diagnoses import WARMUP_PHRASE
    from ngptune.profiling.runs import CAPTURED
    from trainer.contract import listed
    from trainer.contract import quantity_text as q

    lines: list[str] = []
    if summary is not None and len(summary):
        job = summary.iloc[0]
        mean = lambda column: float(summary[column].mean()) if column in summary.columns else 0.0  # noqa: E731
        step_ms = mean("step_time_ms")
        head = [f"steps: {int(summary['steps'].max())} on {len(summary)} rank{'s' if len(summary) != 1 else ''};",
                f"step time {q('step_time_ms', step_ms)}"]
        if "steps_per_s" in summary.columns:
            head[-1] += ","
            head.append(q("steps_per_s", mean("steps_per_s")))
        parts = [("compute", mean("compute_ms")), ("drawing the batch", mean("data_ms")),
                 ("waiting for other ranks", mean("wait_ms"))]
        if "step_kind" in summary.columns and (summary["step_kind"] == CAPTURED).any():
            # two measurements: the replays' mean step, and the phases of each interval's eager step
            occupancy = mean("occupancy_update_ms")
            lines += fit_lines([*head, "(captured CUDA graph: the mean over every step of the intervals: graph",
                                "replays, each interval's sampled eager step and the occupancy updates,",
                                f"which take {q('occupancy_update_ms', occupancy)} of it), after warm-up"])
            eager = sum(ms for _, ms in parts)
            lines += fit_lines(["the sampled eager step of each interval, a separate measurement",
                                "(phase timers on; a replay has no phases):",
                                f"its named phases take {q('compute_ms', eager)}:",
                                *listed([f"{name} {q('compute_ms', ms)}" for name, ms in parts])])
        else:  # the parts of the same step time
            parts.insert(2, ("occupancy update", mean("occupancy_update_ms")))
            other = step_ms - sum(ms for _, ms in parts)
            if other >= -0.05:
                parts.append(("outside the named phases", max(other, 0.0)))
                total = f"the parts of its {q('step_time_ms', step_ms)}:"
            else:
                total = (f"the parts of its {q('step_time_ms', step_ms)} (the named phases exceed it by "
                         f"{q('step_time_ms', -other)}: their timers overlap):")
            lines += fit_lines([*head[:-1], f"{head[-1]},", "after warm-up"])
            lines += fit_lines([total, *listed([f"{name} {q('compute_ms', ms)}" for name, ms in parts])])
        throughput = [f"throughput (all ranks): {q('throughput_samples_per_s', job['throughput_samples_per_s'])}"]
        if "rays_per_s" in summary.columns:
            throughput.append(q("rays_per_s", job["rays_per_s"]))
        lines += fit_lines(listed(throughput))
        if len(summary) > 1 and "rank_throughput_samples_per_s" in summary.columns:
            ranks = [f"rank {int(r['rank'])} {q('rank_throughput_samples_per_s', r['rank_throughput_samples_per_s'])}"
                     for _, r in summary.iterrows()]
            lines += fit_lines(["per rank (its own rays):", *listed(ranks)[:-1], f"{ranks[-1]};",
                                f"imbalance {q('imbalance', job['imbalance'])}"])
    if evaluation and isinstance(evaluation.get("mean_psnr_db"), (int, float)):
        lines += fit_lines([f"evaluation: PSNR {q('psnr_db', evaluation['mean_psnr_db'])} on",
                            f"{counted(len(evaluation.get('images', [])), evaluation.get('split', 'test') + ' view')}"])
    fired = [c for c in checks if c.diagnosis is not None]
    unchecked = [c.bottleneck for c in checks if c.status == "not_evaluated"]
    if not fired:
        lines.append(f"diagnoses: none fired ({len(checks) - len(unchecked)} of {len(checks)} checks could run)")
    if unchecked:  # "none fired" must not read as a clean bill when most checks could not look
        lines += fit_lines(["  not run, their inputs missing (report.html says which):", *listed(unchecked)],
                           indent="    ")
        warm = next((c.detail for c in checks if c.status == "not_evaluated" and c.detail.startswith(WARMUP_PHRASE)),
                    None)
        if warm is not None:  # the one missing input a longer profile supplies
            lines += fit_lines([f"  {warm}"], indent="    ")
    for c in fired:
        lines += fit_lines([f"diagnosis: {c.bottleneck} ({c.diagnosis.severity}):", c.detail])
        lines += fit_lines([f"  try: {c.diagnosis.knob}"], indent="    ")
    return lines


def _write_report(profile: ProfileDir) -> Path:
    from ngptune.reporting.profile_report import write_profile_report

    return write_profile_report(profile.root)

"""``ngptune train-many SOURCE --out OUT``: train a scene sequence as jobs on GPU slots
(:mod:`ngptune.train_many`); says first what it will do (:func:`opening_lines`: the scenes, the
device, on a CPU the threads of each job in the words of every command's first line, the jobs
side by side); shows each running job's step, ETA and throughput
(:class:`ngptune.progress.RunsProgress`: from its metrics records and, between them, the progress
lines in its log; plain lines every few seconds when stdout is no terminal), writes
``OUT/summary.csv``, ``OUT/summary.html`` and prints a table. Ctrl-C stops the running jobs (each
keeps the model of its step under way), starts no other, writes the summary of what ran and exits
with status 130."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer.contract import RunDir, counted, fit_lines, nonnegative_int, positive_int

__all__ = ["job_done", "opening_lines", "register"]


def _train_args(args: argparse.Namespace) -> tuple[str, ...]:
    out: list[str] = []
    if args.config is not None:
        out += ["--config", str(args.config)]
    for item in args.overrides:
        out += ["--set", item]
    for flag, value in (("--n-steps", args.n_steps), ("--time-budget", args.time_budget),
                        ("--eval-max-images", args.eval_max_images), ("--device", args.device),
                        ("--cpu-threads", args.cpu_threads)):
        if value is not None:
            out += [flag, str(value)]
    if args.no_eval:
        out.append("--no-eval")
    return tuple(out)


def _n_steps(run_dir: Path) -> int | None:
    """``training.n_steps`` of the run's ``config.json`` (written when it starts), or None."""
    try:
        value = json.loads(RunDir(run_dir).config_path.read_text(encoding="utf-8"))["training"]["n_steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


def _cpu_threads_requested(args: argparse.Namespace) -> int:
    """``training.cpu_threads`` of the jobs on a CPU: their config (``--config``, else the CPU
    preset, as the trainer chooses) with the ``--set`` overrides.

    Raises:
        ConfigError: a bad config file or override (every job would refuse it).
    """
    from trainer.contract import default_config_path, load_config, parse_override

    overrides = dict(parse_override(item) for item in args.overrides)
    return load_config(default_config_path(args.config, True), overrides).training.cpu_threads


def opening_lines(args: argparse.Namespace, plan) -> list[str]:
    """The first lines of ``train-many`` (under 80 columns, no bracket inside another) for
    ``plan`` (:class:`ngptune.train_many.Plan`): the scenes and their source, the device and, on
    a CPU, the threads of each job (one rank) in the words every command's first line uses
    (:func:`trainer.contract.describe_cpu_threads`), else the GPUs and those of each job; the
    jobs side by side.

    Raises:
        ConfigError: on a CPU, the jobs' config is refused (:func:`_cpu_threads_requested`).
    """
    from ngptune.train_many import devices_text
    from trainer.contract import describe_cpu_threads

    parts = [f"train-many: {counted(plan.jobs, 'scene')} of {args.source}"]
    if devices_text(list(plan.gpus), _train_args(args)) == "cpu":
        parts += ["on cpu,", f"{describe_cpu_threads(_cpu_threads_requested(args), 1)},"]
    else:
        parts += [f"on GPUs {','.join(map(str, plan.gpus))},", f"{counted(plan.gpus_per_job, 'GPU')} per job,"]
    parts.append("one job at a time" if plan.at_once == 1 else f"{plan.at_once} jobs at once")
    return fit_lines(parts)


def job_done(board, name: str, result) -> None:
    """Say on ``board`` (:class:`ngptune.progress.RunsProgress`) that job ``name`` ended with
    ``result`` (:class:`ngptune.train_many.JobResult`): its row's final state, after a line with
    the reason of a failure, and the step it ended at (``result.steps``, from its status: the
    last look at its progress may be a few steps short of it); a job an earlier run finished gets
    one line (under 80 columns) and no row, or the whole reason when it ran with other training
    flags than this run's."""
    if result.skipped_at:
        when = f", {result.finished_at}" if result.finished_at else ""
        if " with other training flags " in result.reason:  # the user may expect it trained anew
            board.message("\n".join(fit_lines([f"{name}:", result.reason])))
            return
        board.message("\n".join(fit_lines([f"{name}: skipped,", f"finished earlier (step {result.steps}{when})"])))
        return
    if result.reason:
        board.message(f"{name}: {result.status}: {result.reason}")
    board.finish(name, result.status, step=result.steps)


def _cmd_train_many(args: argparse.Namespace) -> int:
    from ngptune.console import make_console
    from ngptune.progress import RunsProgress, newest_progress
    from ngptune.reporting.train_many_report import print_summary_table, write_summary_csv, write_summary_html
    from ngptune.train_many import JOB_FILE, TrainManyInterrupted, TrainManyOptions, run_train_many

    console = make_console(soft_wrap=True)
    options = TrainManyOptions(source=args.source, out_dir=args.out, gpus_per_job=args.gpus_per_job,
                               warm_start=args.warm_start, train_args=_train_args(args))
    board = RunsProgress()

    def begin(plan) -> None:  # the first line: what runs where, with how many threads
        board.message("\n".join(opening_lines(args, plan)))

    def started(job) -> None:  # --n-steps gives the total before the run writes its config.json
        board.update(job.name, None, total=args.n_steps)

    def progressed(job, record) -> None:  # the metrics record, or the job's newer progress line
        board.update(job.name, newest_progress(record, job.log_path), total=_n_steps(job.run_dir) or args.n_steps)

    def done(job, r) -> None:
        job_done(board, job.name, r)

    interrupted = None
    try:
        results = run_train_many(options, on_begin=begin, on_start=started, on_done=done, on_progress=progressed)
    except TrainManyInterrupted as exc:
        interrupted, results = exc, exc.results
    finally:
        board.close()
    csv_path = write_summary_csv(results, args.out / "summary.csv")
    html_path = write_summary_html(results, args.out / "summary.html", title=f"ngptune train-many: {args.source}")
    print_summary_table(results, console, JOB_FILE)
    console.print("\n".join(fit_lines(["summary:", f"{csv_path},", str(html_path)])), markup=False, highlight=False)
    if interrupted is not None:
        print("\n".join(fit_lines(interrupted_parts(results, interrupted.jobs))), file=sys.stderr, flush=True)
        return 130
    return 0 if all(r.status != "failed" for r in results) else 1


def interrupted_parts(results, jobs: int) -> list[str]:
    """What Ctrl-C of ``train-many`` did, as parts of lines (:func:`fit_lines`): the jobs
    finished, stopped (their snapshots kept) and not started, and that the same command goes on
    (finished jobs are skipped, stopped ones resume from their models, the others train anew)."""
    completed = sum(r.status == "completed" for r in results)
    stopped = [Path(r.run_dir).name for r in results if r.status == "interrupted"]
    parts = [f"interrupted: {completed} of {jobs} jobs finished,",
             f"{len(stopped)} stopped ({', '.join(stopped)}; the model each kept:" if stopped else "none stopped,",
             *(["summary.csv's reason),"] if stopped else []),
             f"{jobs - len(results)} not started;",
             "the same command again skips the finished jobs,",
             *(["resumes the stopped ones from their models"] if stopped else []),
             "and trains the others anew" if stopped else "and trains the others"]
    return parts


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune train-many`` to the ``ngptune`` command line."""
    p = subparsers.add_parser(
        "train-many", help="train a sequence of scenes as independent jobs on GPU slots (resumable)",
        description="Train every scene of a folder of scene folders (natural order) or of a list file, each as "
                    "its own job on --gpus-per-job GPUs; writes OUT/<scene>/, OUT/summary.csv, OUT/summary.html. "
                    "Running the same command again skips finished scenes and resumes those Ctrl-C stopped.")
    p.add_argument("source", type=Path, help="folder of scene folders, or a text file of scene paths")
    p.add_argument("--out", type=Path, required=True, help="folder of the jobs' runs and the summaries")
    p.add_argument("--gpus-per-job", type=int, default=None, metavar="G", help="GPUs of each job (default 1)")
    p.add_argument("--warm-start", choices=("previous",), default=None,
                   help="previous: each scene starts from the previous scene's final snapshot (model, occupancy grid)")
    p.add_argument("--config", type=Path, default=None, help="trainer config of every job")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every job")
    p.add_argument("--n-steps", type=positive_int, default=None, help="training steps per scene")
    p.add_argument("--time-budget", type=float, default=None, metavar="S", help="training seconds per scene")
    p.add_argument("--eval-max-images", type=positive_int, default=None, metavar="N",
                   help="evaluate at most N test views per scene, on any device")
    p.add_argument("--device", default=None, help="cpu, cuda or auto (as ngptune train)")
    p.add_argument("--cpu-threads", type=nonnegative_int, default=None, metavar="N",
                   help="intra-op threads of each job on a CPU, as ngptune train (training.cpu_threads)")
    p.add_argument("--no-eval", action="store_true", help="skip the final evaluation (no PSNR, no thumbnail)")
    p.set_defaults(func=_cmd_train_many)

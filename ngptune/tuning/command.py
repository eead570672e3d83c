"""``ngptune sweep``: autotune the distributed trainer with an Optuna study (DESIGN.md §5).

With no arguments it runs ``studies/demo.toml`` on the built-in demo scene with every GPU, or 2
gloo ranks on a machine without one, and writes ``reports/demo/`` (report, ``trials.csv``,
``best_config.json``, ``best_env.sh``). Running the same command again resumes the study.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ngptune.tuning.packing import STEP_BUDGET_TRIALS_PER_GPU, STEP_BUDGET_TRIALS_PER_GPU_ENV
from trainer.contract import add_scene_format_arguments, fit_lines, positive_int, scene_format_overrides

__all__ = ["DEFAULT_STUDY", "folder_argument", "register", "study_folder_problem"]

REPO_ROOT = Path(__file__).resolve().parents[2]  # as ngptune.tuning.study.REPO_ROOT (not imported: it loads pandas)
DEFAULT_STUDY = REPO_ROOT / "studies" / "demo.toml"


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _trials(text: str) -> int:
    from ngptune.tuning.study import MAX_TRIALS  # the study module loads pandas: not for --help

    value = positive_int(text)
    if value > MAX_TRIALS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TRIALS} trials, got {value}")
    return value


def _concurrent(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or auto, got {text!r}") from None


def _confirm_runs(text: str) -> int:
    from ngptune.tuning.confirm import MAX_REPEATS, MIN_REPEATS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {MIN_REPEATS} to {MAX_REPEATS} re-runs each, got {text!r}") from None
    if not MIN_REPEATS <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(
            f"expected {MIN_REPEATS} to {MAX_REPEATS} re-runs each, got {value}"
            + (" (one re-run each gives no estimate of the noise)" if value < MIN_REPEATS else ""))
    return value


def folder_argument(text: str) -> Path:
    """``--out``: a folder path; an empty value is refused (it would mean the working directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty value")
    return Path(text)


def study_folder_problem(out: Path) -> str | None:
    """Why ``--out`` cannot hold a study (it is a file, or a folder cannot be made there), else
    None; nothing is created (a study that fails its checks leaves no folder)."""
    if out.exists():
        return None if out.is_dir() else "not a folder (a file of that name exists)"
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot create the folder ({parent} is a file)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create the folder ({parent} is not writable)"
    return None


def _cmd_sweep(args: argparse.Namespace) -> int:
    from ngptune.tuning.sweep import SweepOptions, SweepTerminated, run_sweep

    if not args.confirm and args.confirm_runs is not None:
        print(f"error: --no-confirm and --confirm-runs {args.confirm_runs}: give one of them", file=sys.stderr)
        return 2
    problem = study_folder_problem(args.out) if args.out is not None else None
    if problem is not None:
        print(f"error: --out {args.out}: {problem}", file=sys.stderr)
        return 2

    options = SweepOptions(
        study_path=args.study,
        scene=args.scene,
        trials=args.trials,
        timeout_s=args.timeout,
        storage=args.storage,
        study_name=args.study_name,
        nproc_per_node=args.nproc_per_node,
        out_dir=args.out,
        data_settings=scene_format_overrides(args),
        gpus_per_trial=args.gpus_per_trial,
        concurrent_trials=args.concurrent_trials,
        trials_per_gpu=args.trials_per_gpu,
        allow_shared_gpu=args.allow_shared_gpu,
        confirm=args.confirm,
        confirm_repeats=args.confirm_runs,
    )
    try:
        result = run_sweep(options)
    except KeyboardInterrupt as exc:
        how, code = ("sweep terminated (SIGTERM)", 143) if isinstance(exc, SweepTerminated) else ("sweep interrupted", 130)
        print("\n".join(fit_lines([f"{how}: the running trial or confirmation re-run was stopped;",
                                   "run the same command again to resume"])))
        return code
    pending = result.verdict is not None and result.verdict.status == "pending"  # another worker recommends
    return 0 if result.best_number is not None or pending else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune sweep`` to the ``ngptune`` command line."""
    p = subparsers.add_parser(
        "sweep",
        help="autotune the distributed trainer: an Optuna study of trainer and NCCL settings",
        description=(
            "Run (or resume) an Optuna study whose trials are fresh launches of the distributed trainer. "
            "Writes OUT/report.html, trials.csv, best_config.json and best_env.sh."
        ),
    )
    p.add_argument("--study", type=Path, default=DEFAULT_STUDY,
                   help=f"study file (TOML, see studies/README.md; default {DEFAULT_STUDY.relative_to(REPO_ROOT)})")
    p.add_argument("--scene", type=Path, default=None, help="scene path replacing the study's scene")
    add_scene_format_arguments(p)
    p.add_argument("--trials", type=_trials, default=None,
                   help="finished trials the study aims at, counting earlier runs (default: the study file's)")
    p.add_argument("--timeout", type=_positive_seconds, default=None, metavar="S",
                   help="stop starting new trials after S seconds")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="RDB storage shared by several workers, e.g. postgresql+psycopg2://user:pw@host/db "
                        "(default: a journal file in the study folder)")
    p.add_argument("--study-name", default=None,  # checked by the sweep: one error line, as for the file's name
                   help="Optuna study name (default: the study file's name)")
    p.add_argument("--nproc-per-node", type=positive_int, default=None,
                   help="ranks per trial (default: every GPU, or 2 gloo ranks without a GPU)")
    p.add_argument("--out", type=folder_argument, default=None, help="study folder (default: reports/<study-name>)")
    p.add_argument("--gpus-per-trial", type=int, default=None, metavar="G",
                   help="GPUs of each trial, a set no other running trial uses (default: every visible GPU)")
    p.add_argument("--concurrent-trials", type=_concurrent, default=None, metavar="N|auto",
                   help="trials running at once, each on its own GPUs (auto: visible GPUs // G; default 1)")
    p.add_argument("--trials-per-gpu", type=positive_int, default=None, metavar="K",
                   help=f"let K trials share one GPU (default 1; a step-budget study on GPUs packs "
                        f"{STEP_BUDGET_TRIALS_PER_GPU}, or ${STEP_BUDGET_TRIALS_PER_GPU_ENV} when it is set); a seconds "
                        "budget or a throughput objective then needs --allow-shared-gpu")
    p.add_argument("--allow-shared-gpu", action="store_true",
                   help="accept --trials-per-gpu > 1 with a throughput or time objective (not comparable)")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="recommend the best trial without re-running it against the default "
                        "(best_config.confirmation.json then says unconfirmed)")
    p.add_argument("--confirm-runs", type=_confirm_runs, default=None, metavar="K",
                   help="re-runs of the best non-default trial and of the default before recommending, 2 or more "
                        "(default 3; Welch's t-test on the two sets decides)")
    p.set_defaults(func=_cmd_sweep)

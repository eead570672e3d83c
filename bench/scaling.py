"""Scaling of distributed training over GPU counts, parallel modes and weak/strong scaling (prints a table).

For each scaling kind, mode and GPU count it launches ``ngptune train --nproc-per-node N`` for the
same training time (``--time-budget``), then reads the run's metrics (``trainer.contract.metrics``) and, with
``--psnr``, its evaluation (PSNR at equal wall time):

* weak scaling: the samples each GPU works on per step stay fixed (``--samples-per-step`` S), so
  the job's batch grows with N. Data parallel: ``training.target_samples_per_step = S`` (the
  trainer's target is per GPU). Subgrid: every rank sees every sample and renders those in its
  boxes, so the job's target is ``S · N``.
* strong scaling: the job's batch stays fixed at S samples per step. Data parallel: ``S / N`` per
  GPU; subgrid: ``S``.

Columns (medians over the last two thirds of the logging intervals of rank 0):

    samples_per_s   training samples per second of the job (throughput_samples_per_s)
    speedup         samples_per_s / samples_per_s of the smallest GPU count, × that count
    efficiency      speedup / N (1 = perfect; the same formula for weak and strong scaling, since
                    at a fixed batch throughput is inversely proportional to step time)
    comm_share      comm_ms / step_time_ms (gradient all-reduce; subgrid: the segment all-gather)
    imbalance       max/mean per-rank compute time
    busbw_gb_per_s  gradient all-reduce bus bandwidth (data parallel; nccl-tests convention)
    psnr_db         mean test PSNR after the time budget (with --psnr)
    time_to_psnr_s  training seconds until the periodic evaluation (--eval-every steps, on
                    --eval-images views) first reaches --psnr-target dB; nan if it never does

With one GPU the trainer is the single-process one (one field; subgrid mode needs two ranks, so its
1-GPU row is that single model, ``boxes`` = 1). With ``--device cpu`` every rank gets one intra-op
thread (``OMP_NUM_THREADS=1``): one core stands for one GPU.

    python bench/scaling.py --scene ../shared/data/nerf_synthetic_lego_400 --gpus 1,2 --modes data,subgrid \
        --scaling weak,strong --time-budget 60 --psnr
    python bench/scaling.py --scene .scenes/demo --gpus 1,2 --device cpu --config configs/small.json \
        --samples-per-step 4096 --time-budget 15 --log-every 5             # CPU/gloo smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from _common import REPO, machine_description, print_table

from ngptune.tuning import objectives
from trainer.contract.rundir import RunDir
from trainer.contract.metrics import read_metrics

KINDS = ("weak", "strong")
MODES = ("data", "subgrid")


def parse_counts(text: str) -> list[int]:
    """``"1,2,4"`` → [1, 2, 4] (distinct, increasing GPU counts >= 1).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    try:
        counts = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts) or counts != sorted(set(counts)):
        raise argparse.ArgumentTypeError(f"expected increasing GPU counts like 1,2,4, got {text!r}")
    return counts


def parse_choices(allowed: tuple[str, ...]):
    """argparse type: a comma-separated subset of ``allowed``."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items or any(item not in allowed for item in items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(allowed)}, got {text!r}")
        return items

    return parse


def num_boxes(mode: str, gpus: int, subgrids: int | None) -> int:
    """Boxes K of a run: 1 in data mode and on one GPU, else ``max(N, --subgrids)`` (default N)."""
    if mode != "subgrid" or gpus == 1:
        return 1
    return max(gpus, subgrids or gpus)


def target_samples_per_step(kind: str, mode: str, gpus: int, samples_per_step: int) -> int:
    """``training.target_samples_per_step`` of a run (module docstring: weak vs strong, data vs subgrid)."""
    if kind == "weak":
        return samples_per_step * gpus if mode == "subgrid" and gpus > 1 else samples_per_step
    return samples_per_step if mode == "subgrid" or gpus == 1 else max(256, samples_per_step // gpus)


def train_command(args: argparse.Namespace, kind: str, mode: str, gpus: int, out: Path) -> list[str]:
    """The ``ngptune train`` command line of one run."""
    cmd = [
        sys.executable, "-m", "ngptune", "train",
        "--scene", str(args.scene), "--out", str(out), "--quiet",
        "--n-steps", "1000000000", "--time-budget", str(args.time_budget),
        "--set", f"training.target_samples_per_step={target_samples_per_step(kind, mode, gpus, args.samples_per_step)}",
        "--set", f"parallel.mode={mode}",
        "--set", f"parallel.num_subgrids={num_boxes(mode, gpus, args.subgrids)}",
        "--set", f"training.log_every={args.log_every}",
    ]
    cmd += ["--eval-max-images", str(args.eval_images)] if args.psnr else ["--no-eval"]
    if args.psnr and args.eval_every:
        cmd += ["--set", f"training.eval_every={args.eval_every}", "--set", f"training.eval_max_images={args.eval_images}"]
    if args.config:
        cmd += ["--config", str(args.config)]
    if args.downscale:
        cmd += ["--downscale", str(args.downscale)]
    if args.device:
        cmd += ["--device", args.device]
    if args.emulate_interconnect:
        cmd += ["--emulate-interconnect", args.emulate_interconnect]
    if gpus > 1:
        cmd += ["--nproc-per-node", str(gpus)]
    for item in args.overrides:
        cmd += ["--set", item]
    return cmd


def time_to_psnr_s(records: list[dict], target_db: float, status: dict | None = None) -> float:
    """Training seconds until an evaluation reached ``target_db`` (the sweep objective's rule,
    :func:`ngptune.tuning.objectives.time_to_psnr_s`: periodic evaluations in ``records``, then
    the final one in ``status``), or nan."""
    try:
        return objectives.time_to_psnr_s(records, status or {}, target_db)
    except objectives.TargetNotReached:
        return float("nan")


def summarise(records: list[dict], evaluation: dict, target_db: float = 33.0, status: dict | None = None) -> dict:
    """Medians of one run's rank-0 metrics over the last two thirds of its logging intervals."""
    steady = records[len(records) // 3 :] or records

    def median(key: str) -> float:
        values = [r[key] for r in steady if r.get(key) is not None]
        return statistics.median(values) if values else float("nan")

    step_time_ms = median("step_time_ms")
    return {
        "steps": records[-1]["step"] if records else 0,
        "samples_per_s": median("throughput_samples_per_s"),
        "step_time_ms": step_time_ms,
        "comm_share": median("comm_ms") / step_time_ms if step_time_ms > 0 else float("nan"),
        "imbalance": median("imbalance"),
        "busbw_gb_per_s": median("comm_busbw_gb_per_s"),
        "psnr_db": evaluation.get("mean_psnr_db", float("nan")),
        "time_to_psnr_s": time_to_psnr_s(records, target_db, status),
    }


def add_scaling(results: list[dict]) -> list[dict]:
    """Speedup and efficiency of each result against the smallest GPU count of its kind and mode.

    ``speedup = (samples_per_s / base samples_per_s) · base gpus``, ``efficiency = speedup / gpus``.
    Failed runs (an ``error`` key) get neither; without a successful base run neither is set.
    """
    out = []
    for result in results:
        peers = [r for r in results if r["kind"] == result["kind"] and r["mode"] == result["mode"] and "error" not in r]
        row = dict(result)
        if "error" not in result and peers:
            base = min(peers, key=lambda r: r["gpus"])
            row["speedup"] = result["samples_per_s"] / base["samples_per_s"] * base["gpus"]
            row["efficiency"] = row["speedup"] / result["gpus"]
        out.append(row)
    return out


def run_one(args: argparse.Namespace, kind: str, mode: str, gpus: int) -> dict:
    out = args.out / f"{kind}_{mode}_{gpus}"
    shutil.rmtree(out, ignore_errors=True)  # this bench's own run folder of an earlier invocation
    head = {"kind": kind, "mode": mode, "gpus": gpus, "boxes": num_boxes(mode, gpus, args.subgrids),
            "target_samples_per_step": target_samples_per_step(kind, mode, gpus, args.samples_per_step)}
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=pythonpath)
    if args.device == "cpu":  # one core per rank, as one GPU per rank (the launcher does so for its workers)
        env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(train_command(args, kind, mode, gpus, out), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return {**head, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    run = RunDir(out)
    evaluation = json.loads(run.eval_path.read_text()) if run.eval_path.is_file() else {}
    return {**head, **summarise(read_metrics(run.metrics_path(0)), evaluation, args.psnr_target, run.read_status())}


COLUMNS = ("kind", "mode", "gpus", "boxes", "steps", "samples_per_s", "speedup", "efficiency", "comm_share",
           "imbalance", "busbw_gb_per_s", "time_to_psnr_s", "psnr_db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--gpus", type=parse_counts, default=[1, 2], help="GPU (process) counts, e.g. 1,2,4,8")
    parser.add_argument("--modes", type=parse_choices(MODES), default=list(MODES), help="data,subgrid")
    parser.add_argument("--scaling", type=parse_choices(KINDS), default=["weak"], help="weak,strong")
    parser.add_argument("--time-budget", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--samples-per-step", type=int, default=2**18,
                        help="weak: samples per GPU per step; strong: samples per step of the job")
    parser.add_argument("--subgrids", type=int, default=None, help="num_subgrids (default: = GPUs)")
    parser.add_argument("--psnr", action="store_true", help="evaluate every run (PSNR at equal wall time)")
    parser.add_argument("--eval-images", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=0, help="with --psnr: evaluate every N steps too")
    parser.add_argument("--psnr-target", type=float, default=33.0, help="dB, for time_to_psnr_s")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--downscale", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--emulate-interconnect", choices=("nvlink", "pcie", "sockets"), default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("runs/scaling"))
    args = parser.parse_args()

    results = []
    for kind in args.scaling:
        for mode in args.modes:
            for gpus in args.gpus:
                result = run_one(args, kind, mode, gpus)
                print(json.dumps(result), flush=True)
                results.append(result)
    rows = add_scaling(results)
    emulation = f", emulated {args.emulate_interconnect}" if args.emulate_interconnect else ""
    print_table(
        f"scaling on {args.scene.name}, {args.time_budget:.0f} s of training per run, S = {args.samples_per_step} "
        f"samples per step{emulation}, {machine_description()}",
        [*COLUMNS[:-2], f"time_to_{args.psnr_target:g}db_s", f"psnr_db ({args.eval_images} views)" if args.psnr else "psnr_db"],
        [[row.get(c, float("nan")) if "error" not in row or c in ("kind", "mode", "gpus", "boxes")
          else ("failed: " + row["error"] if c == "steps" else "") for c in COLUMNS] for row in rows],
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

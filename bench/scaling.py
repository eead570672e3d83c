"""Scaling of distributed training over GPU counts and parallel modes (prints a table).

For each mode and GPU count, launches ``ngptune train --nproc-per-node N`` for a fixed training
time, then reads the run's metrics (``trainer.schema``) and evaluation:

* weak scaling (default): ``training.target_samples_per_step`` per GPU stays fixed, so the global
  batch grows with the GPU count; efficiency = throughput_N / (N · throughput_1).
* strong scaling (``--strong``): the global batch stays fixed (per-GPU target divided by N);
  efficiency = throughput_N / (N · throughput_1) as well.

    python bench/scaling.py --scene .scenes/lego_400 --gpus 1,2 --modes data,subgrid --time-budget 60
    python bench/scaling.py --scene ../shared/data/nerf_synthetic_lego_400 --gpus 1,2 --device cpu \
        --config configs/small.json --downscale 4 --time-budget 20      # CPU/gloo smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import REPO, machine_description, print_table

from trainer.rundir import RunDir
from trainer.schema import read_metrics


def run_one(args: argparse.Namespace, mode: str, gpus: int, out: Path) -> dict:
    per_gpu_target = args.samples_per_step if not args.strong else max(256, args.samples_per_step // gpus)
    cmd = [
        sys.executable, "-m", "ngptune.cli", "train",
        "--scene", str(args.scene), "--out", str(out), "--quiet",
        "--n-steps", "1000000", "--time-budget", str(args.time_budget),
        "--set", f"training.target_samples_per_step={per_gpu_target}",
        "--set", f"parallel.mode=\"{mode}\"",
        "--set", f"training.log_every={args.log_every}",
        "--eval-max-images", str(args.eval_images),
    ]
    if mode == "subgrid":
        cmd += ["--set", f"parallel.num_subgrids={max(gpus, args.subgrids or gpus)}"]
    if args.config:
        cmd += ["--config", str(args.config)]
    if args.downscale:
        cmd += ["--downscale", str(args.downscale)]
    if args.device:
        cmd += ["--device", args.device]
    if gpus > 1:
        cmd += ["--nproc-per-node", str(gpus)]
    for item in args.overrides:
        cmd += ["--set", item]
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONPATH=pythonpath)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return {"mode": mode, "gpus": gpus, "error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    run = RunDir(out)
    records = read_metrics(run.metrics_path(0))
    steady = records[len(records) // 3 :] or records
    evaluation = json.loads(run.eval_path.read_text()) if run.eval_path.is_file() else {}

    def median(key: str) -> float:
        values = [r[key] for r in steady if r.get(key) is not None]
        return statistics.median(values) if values else float("nan")

    return {
        "mode": mode,
        "gpus": gpus,
        "steps": records[-1]["step"] if records else 0,
        "samples_per_s": median("throughput_samples_per_s"),
        "step_time_ms": median("step_time_ms"),
        "comm_ms": median("comm_ms"),
        "imbalance": median("imbalance"),
        "busbw_gb_per_s": median("comm_busbw_gb_per_s"),
        "psnr_db": evaluation.get("mean_psnr_db", float("nan")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--gpus", default="1,2", help="comma-separated process counts")
    parser.add_argument("--modes", default="data,subgrid")
    parser.add_argument("--time-budget", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--samples-per-step", type=int, default=2**18, help="per-GPU target (weak scaling)")
    parser.add_argument("--strong", action="store_true", help="keep the global batch fixed instead")
    parser.add_argument("--subgrids", type=int, default=None, help="num_subgrids (default: = GPUs)")
    parser.add_argument("--eval-images", type=int, default=20)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--downscale", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("runs/scaling"))
    args = parser.parse_args()

    rows, results = [], []
    for mode in args.modes.split(","):
        base = None
        for gpus in [int(g) for g in args.gpus.split(",")]:
            res = run_one(args, mode, gpus, args.out / f"{mode}_{gpus}")
            results.append(res)
            if "error" in res:
                rows.append([mode, gpus, "failed: " + " ".join(res["error"])] + [""] * 7)
                continue
            if base is None:
                base = res
            speedup = res["samples_per_s"] / base["samples_per_s"] * base["gpus"]
            efficiency = speedup / gpus
            comm_share = res["comm_ms"] / res["step_time_ms"] if res["step_time_ms"] else float("nan")
            rows.append([mode, gpus, res["steps"], res["samples_per_s"], speedup, efficiency,
                         comm_share, res["imbalance"], res["busbw_gb_per_s"], res["psnr_db"]])
            print(json.dumps(res), flush=True)
    kind = "strong" if args.strong else "weak"
    print_table(
        f"{kind} scaling on {args.scene.name}, {args.time_budget:.0f} s of training per run, {machine_description()}",
        ["mode", "gpus", "steps", "samples_per_s", "speedup", "efficiency", "comm_share", "imbalance",
         "busbw_gb_per_s", f"psnr_db ({args.eval_images} views)"],
        rows,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Overhead of the profiler's always-on instrumentation (prints a table).

Trains the same scene for the same time twice per round, alternating: *plain* (phase timers off,
no sampler) and *instrumented* (phase timers on — CUDA events and NVTX ranges — and the NVML
sampler thread of ``ngptune profile`` at its default 100 ms in this process). No trace window.
Throughput is the mean of the run's metrics records after the first (warm-up) one.

    python bench/profile_overhead.py --scene .scenes/lego_400 --time-budget 25 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from _common import REPO, machine_description, print_table

from ngptune.profiling.nvml import NvmlSampler
from trainer.schema import read_metrics


def run(args: argparse.Namespace, out: Path, instrumented: bool) -> float:
    cmd = [sys.executable, "-m", "ngptune", "train", "--scene", str(args.scene), "--out", str(out), "--quiet",
           "--no-eval", "--n-steps", "10000000", "--time-budget", str(args.time_budget),
           "--set", f"training.log_every={args.log_every}",
           "--set", f"profile.phase_timers={'true' if instrumented else 'false'}"]
    for item in args.overrides:
        cmd += ["--set", item]
    sampler = NvmlSampler(interval_s=0.1).start() if instrumented else None
    try:
        subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, text=True)
    finally:
        if sampler is not None:
            status = sampler.stop()
            print(f"  NVML sampler: {status.status} ({status.detail}), {len(sampler.rows)} samples", file=sys.stderr)
    records = read_metrics(out / "metrics.jsonl")[1:]
    return statistics.mean(r["throughput_samples_per_s"] for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--time-budget", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("runs/profile_overhead"))
    args = parser.parse_args()
    plain, instrumented = [], []
    for i in range(args.rounds):
        plain.append(run(args, args.out / f"plain_{i}", False))
        instrumented.append(run(args, args.out / f"instrumented_{i}", True))
    rows = [[i, p, q, 100 * (q / p - 1)] for i, (p, q) in enumerate(zip(plain, instrumented))]
    mp, mq = statistics.mean(plain), statistics.mean(instrumented)
    rows.append(["mean", mp, mq, 100 * (mq / mp - 1)])
    print_table(f"instrumentation overhead, {args.scene.name}, {args.time_budget:g} s per run, {machine_description()}",
                ["round", "plain samples/s", "instrumented samples/s", "change %"], rows)


if __name__ == "__main__":
    main()

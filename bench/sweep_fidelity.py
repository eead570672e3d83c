"""Sweep throughput on one GPU: trials per hour with K trials packed on the GPU, and configurations
examined per GPU-hour with the best confirmed value, pruned against unpruned.

Each arm is one ``ngptune sweep`` in its own folder under ``--out`` with a wall-clock limit on
starting trials (``--timeout``); its numbers are kept in ``--out/<arm>.json`` and every arm found
there is printed, so arms can run in separate calls (a device call lasts at most 10 minutes).

    # trials per hour for K = 1, 2, 4 (the study's pruner off: every trial trains its whole budget)
    python bench/sweep_fidelity.py packing --study studies/psnr_steps.toml --scene SCENE --k 1 2 4 --wall-s 150
    # pruned (the study's pruner) against unpruned at equal wall time, then the confirmation re-runs
    python bench/sweep_fidelity.py pruning --study studies/psnr_budget.toml --scene SCENE --arms pruned unpruned \\
        --wall-s 240 --confirm-runs 3

Columns: trials finished by outcome, wall seconds of the whole sweep (with its confirmation when
asked), trials (configurations examined, pruned ones included) per hour of that wall time, mean steps/s of the completed
trials, the best single-run value and the confirmation's verdict with the re-runs' means.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, machine_description, print_table


def _study_variant(study: Path, out: Path, *, pruner_off: bool) -> Path:
    """The study file, with its ``[pruner]`` table replaced by ``type = "none"`` when ``pruner_off``
    (paths in it resolve from the repository root, where a copy elsewhere finds them too)."""
    text = study.read_text(encoding="utf-8")
    if pruner_off:
        text = re.sub(r"(?ms)^\[pruner\]\n.*?(?=^\[)", '[pruner]\ntype = "none"\n\n', text)
    path = out / f"{study.stem}.{'unpruned' if pruner_off else 'as_shipped'}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _rows(csv_path: Path) -> list[dict[str, str]]:
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def run_arm(name: str, study: Path, scene: str, out: Path, wall_s: float, flags: list[str]) -> dict:
    """One sweep; returns (and writes to ``out/<name>.json``) its numbers."""
    folder = out / name
    cmd = [sys.executable, "-m", "ngptune", "sweep", "--study", str(study), "--scene", scene, "--out", str(folder),
           "--trials", "1000", "--timeout", str(wall_s), "--nproc-per-node", "1", *flags]
    print("$", " ".join(cmd), flush=True)
    start = time.monotonic()
    log = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    total_s = time.monotonic() - start
    (out / f"{name}.log").write_text(log.stdout + log.stderr)
    rows = _rows(folder / "trials.csv") if (folder / "trials.csv").is_file() else []
    outcomes = [r["outcome"] for r in rows]
    completed = [r for r in rows if r["outcome"] == "completed"]
    steps_per_s = [_number(r.get("steps_per_s", "")) for r in completed]
    values = [_number(r["psnr_at_budget_db"]) for r in completed if "psnr_at_budget_db" in r]
    confirmation = folder / "best_config.confirmation.json"
    verdict = json.loads(confirmation.read_text())["verdict"] if confirmation.is_file() else {}
    mean = lambda xs: statistics.fmean(xs) if xs else math.nan  # noqa: E731
    result = {
        "arm": name, "flags": " ".join(flags), "exit": log.returncode,
        "completed": outcomes.count("completed"), "pruned": outcomes.count("pruned"),
        "failed": outcomes.count("failed"), "wall_s": total_s,
        "trials_per_hour": 3600.0 * len(rows) / total_s if total_s > 0 else math.nan,
        "steps_per_s": mean([v for v in steps_per_s if math.isfinite(v)]),
        "best_single_db": max((v for v in values if math.isfinite(v)), default=math.nan),
        "verdict": verdict.get("status", "none"),
        "candidate_db": mean([v for v in verdict.get("best_values", []) if v is not None]),
        "default_db": mean([v for v in verdict.get("default_values", []) if v is not None]),
        "p_value": verdict.get("p_value"),
        "machine": machine_description(),
    }
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["packing", "pruning"])
    parser.add_argument("--study", type=Path, required=True)
    parser.add_argument("--scene", required=True)
    parser.add_argument("--out", type=Path, default=Path("/tmp/sweep_fidelity"))
    parser.add_argument("--wall-s", type=float, default=150.0, help="stop starting trials after this many seconds")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4], help="packing: trials per GPU")
    parser.add_argument("--arms", nargs="+", default=["pruned", "unpruned"], choices=["pruned", "unpruned"])
    parser.add_argument("--confirm-runs", type=int, default=0, help="pruning: re-runs each (0: --no-confirm)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    confirm = ["--confirm-runs", str(args.confirm_runs)] if args.confirm_runs else ["--no-confirm"]
    if args.mode == "packing":
        study = _study_variant(args.study, args.out, pruner_off=True)
        for k in args.k:
            run_arm(f"packing_k{k}", study, args.scene, args.out, args.wall_s,
                    ["--trials-per-gpu", str(k), "--concurrent-trials", str(k), "--no-confirm"])
    else:
        for arm in args.arms:
            study = _study_variant(args.study, args.out, pruner_off=arm == "unpruned")
            run_arm(f"pruning_{arm}", study, args.scene, args.out, args.wall_s, confirm)
    results = [json.loads(p.read_text()) for p in sorted(args.out.glob(f"{args.mode}_*.json"))]
    print_table(f"{args.mode}: {args.study} on {args.scene} ({results[0]['machine'] if results else ''})",
                ["arm", "completed", "pruned", "failed", "wall s", "trials/hour", "steps/s", "best single dB",
                 "verdict", "candidate dB", "default dB", "p"],
                [[r["arm"], r["completed"], r["pruned"], r["failed"], r["wall_s"], r["trials_per_hour"],
                  r["steps_per_s"], r["best_single_db"], r["verdict"], r["candidate_db"], r["default_db"],
                  r["p_value"] if r["p_value"] is not None else math.nan] for r in results])


if __name__ == "__main__":
    main()

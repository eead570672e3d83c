"""bench/scaling.py's arithmetic: per-run sample targets for weak/strong scaling in data and subgrid
mode, the command line it launches, and speedup/efficiency against the smallest GPU count."""

from __future__ import annotations

import math
import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

BENCH = REPO / "bench"


@pytest.fixture(scope="module")
def scaling():
    sys.path.insert(0, str(BENCH))  # the script imports its sibling _common
    try:
        spec = importlib.util.spec_from_file_location("bench_scaling", BENCH / "scaling.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


@pytest.mark.parametrize(
    ("kind", "mode", "gpus", "expected"),
    [
        ("weak", "data", 1, 4096), ("weak", "data", 4, 4096),  # the trainer's target is per GPU
        ("weak", "subgrid", 1, 4096), ("weak", "subgrid", 4, 16384),  # the job's target: S · N
        ("strong", "data", 1, 4096), ("strong", "data", 4, 1024),  # S / N per GPU
        ("strong", "subgrid", 4, 4096),
    ],
)
def test_sample_targets(scaling, kind, mode, gpus, expected):
    assert scaling.target_samples_per_step(kind, mode, gpus, 4096) == expected


def test_boxes_and_command_line(scaling):
    assert [scaling.num_boxes("subgrid", n, None) for n in (1, 2, 4)] == [1, 2, 4]
    assert scaling.num_boxes("subgrid", 2, 4) == 4 and scaling.num_boxes("data", 4, 8) == 1
    args = argparse.Namespace(scene=Path("s"), time_budget=30.0, samples_per_step=4096, subgrids=None, log_every=5,
                              psnr=False, eval_images=3, config=None, downscale=None, device="cpu",
                              emulate_interconnect="pcie", overrides=["training.seed=3"])
    cmd = scaling.train_command(args, "weak", "subgrid", 2, Path("out"))
    assert cmd[1:4] == ["-m", "ngptune", "train"]
    pairs = {cmd[i + 1] for i, c in enumerate(cmd) if c == "--set"}
    assert {"training.target_samples_per_step=8192", "parallel.mode=subgrid", "parallel.num_subgrids=2",
            "training.seed=3"} <= pairs
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and "--no-eval" in cmd
    assert cmd[cmd.index("--emulate-interconnect") + 1] == "pcie"
    assert "--nproc-per-node" not in scaling.train_command(args, "weak", "data", 1, Path("out"))


def test_speedup_and_efficiency_against_the_smallest_count(scaling):
    results = [
        {"kind": "weak", "mode": "data", "gpus": 1, "samples_per_s": 100.0},
        {"kind": "weak", "mode": "data", "gpus": 2, "samples_per_s": 190.0},
        {"kind": "weak", "mode": "data", "gpus": 4, "error": "rank 3 ran out of memory"},
        {"kind": "strong", "mode": "subgrid", "gpus": 2, "samples_per_s": 150.0},
        {"kind": "strong", "mode": "subgrid", "gpus": 4, "samples_per_s": 240.0},
    ]
    rows = scaling.add_scaling(results)
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency"] == 1.0
    assert rows[1]["speedup"] == pytest.approx(1.9) and rows[1]["efficiency"] == pytest.approx(0.95)
    assert "speedup" not in rows[2]
    assert rows[3]["speedup"] == 2.0  # the base is 2 GPUs
    assert rows[4]["speedup"] == pytest.approx(3.2) and rows[4]["efficiency"] == pytest.approx(0.8)


def test_summary_of_a_run(scaling):
    records = [{"step": 5 * i, "throughput_samples_per_s": float(i), "step_time_ms": 10.0, "comm_ms": 2.5,
                "imbalance": 1.1, "comm_busbw_gb_per_s": None} for i in range(1, 7)]
    summary = scaling.summarise(records, {"mean_psnr_db": 21.5})
    assert summary["steps"] == 30 and summary["samples_per_s"] == 4.5  # median of intervals 3..6
    assert summary["comm_share"] == 0.25 and summary["imbalance"] == 1.1 and summary["psnr_db"] == 21.5
    assert summary["busbw_gb_per_s"] != summary["busbw_gb_per_s"]  # nan: no all-reduce (subgrid)


def test_gpu_counts_argument(scaling):
    assert scaling.parse_counts("1,2,4,8") == [1, 2, 4, 8]
    for bad in ("2,1", "0,1", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            scaling.parse_counts(bad)


def test_time_to_psnr_is_the_first_evaluation_at_the_target(scaling):
    records = [
        {"step": 100, "wall_time_s": 5.0, "eval_psnr_db": 30.0},
        {"step": 200, "wall_time_s": 10.0},
        {"step": 300, "wall_time_s": 15.0, "eval_psnr_db": 33.2},
        {"step": 400, "wall_time_s": 20.0, "eval_psnr_db": 32.9},
    ]
    assert scaling.time_to_psnr_s(records, 33.0) == 15.0
    assert scaling.time_to_psnr_s(records, 30.0) == 5.0
    assert math.isnan(scaling.time_to_psnr_s(records, 34.0))

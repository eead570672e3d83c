"""Diagnoses of real short CPU runs (demo scene, configs/small.json) from their metrics alone
(``diagnose_run``): a slow data path, a rank slowed 2x, and a healthy two-rank run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ngptune.profiling.diagnoses import DiagnosisError, assess, diagnose_run, inputs_from_run, rank_phase_means
from tests.support.paths import REPO
from trainer.contract.rundir import RunDir

pytestmark = pytest.mark.timeout(240)

SMALL = REPO / "configs" / "small.json"
# 20 steps logged every 5 (the first interval is warm-up); small batches keep a step near 100 ms
# on an idle CI machine (several times that on a loaded one)
FAST = (
    "training.log_every=5",
    "training.target_samples_per_step=1024",
    "training.max_march_steps=128",
    "training.occupancy_resolution=32",
    "parallel.balance_every=0",
)


def _train(out: Path, *sets: str, nproc: int = 1) -> Path:
    launch = ["--nproc-per-node", str(nproc)] if nproc > 1 else []
    cmd = [sys.executable, "-m", "ngptune", "train", *launch, "--config", str(SMALL), "--no-eval", "--quiet",
           "--n-steps", "20", "--out", str(out)]
    for item in (*FAST, *sets):
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory) -> Path:
    # an occupancy warm-up of 5 steps: the occupancy checks judge the 15 steps after it. Healthy
    # also on a loaded host: with FAST's 2^10 samples per step the gloo all-reduce (mostly its
    # latency) took 10-16 % of a 35-44 ms step, at the communication check's 15 %; 2^12 samples
    # per step and a 2^12-entry table keep it well below
    return _train(tmp_path_factory.mktemp("healthy") / "run", "training.occupancy_warmup_steps=5",
                  "encoding.log2_hashmap_size=12", "training.target_samples_per_step=4096", nproc=2)


def test_slow_data_path_is_diagnosed_as_data_loading(tmp_path: Path) -> None:
    # 250 ms per step: far past the 10 % threshold even when a loaded machine makes steps slow
    run = _train(tmp_path / "run", "faults.data_delay_ms=250")
    diagnoses = {d.bottleneck: d for d in diagnose_run(run)}
    assert set(diagnoses) == {"data_loading"}
    d = diagnoses["data_loading"]
    means = rank_phase_means(inputs_from_run(run).phases)
    assert means.at[0, "data"] >= 250.0
    assert d.value == pytest.approx(means.at[0, "data"] / means.at[0, "step_time_ms"])
    assert "rank 0" in d.evidence and "data.placement" in d.knob


def test_rank_slowed_twice_is_diagnosed_as_load_imbalance(tmp_path: Path) -> None:
    run = _train(tmp_path / "run", "faults.ranks=[1]", "faults.compute_slowdown=2.0", nproc=2)
    diagnoses = {d.bottleneck: d for d in diagnose_run(run)}
    assert set(diagnoses) == {"load_imbalance"}
    d = diagnoses["load_imbalance"]
    # compute times t and 2t: max/mean = 4/3. On a loaded 2-core host the slowed rank's sleep
    # frees a core for rank 0 while its own compute still competes, so the ratio drifts upward
    # (up to 1.46 seen); 2.0 would mean rank 0 did no compute at all.
    assert 1.2 < d.value < 1.7
    assert "rank 1 slowest" in d.evidence and "rank 0 longest" in d.evidence
    assert "parallel.balance_every" in d.knob


def test_healthy_run_triggers_no_diagnosis(healthy_run: Path) -> None:
    checks = assess(inputs_from_run(healthy_run))
    assert diagnose_run(healthy_run) == [], [c.detail for c in checks]
    status = {c.bottleneck: c.status for c in checks}
    # the phase-based checks were evaluated (two ranks), the GPU-only ones had no source
    assert status == {
        "compute_underused": "not_evaluated",
        "data_loading": "clear",
        "hash_grid_contention": "not_evaluated",
        "communication": "clear",
        "load_imbalance": "clear",
        "wasted_samples": "clear",
        "occupancy_update": "clear",
        "background_collapse": "not_evaluated",  # trained with --no-eval
    }
    detail = {c.bottleneck: c.detail for c in checks}
    assert "after the occupancy warm-up (5 steps)" in detail["occupancy_update"]
    assert "at step 20 (" in detail["wasted_samples"] and "at step 5 (" not in detail["wasted_samples"]


def test_a_run_inside_the_occupancy_warm_up_leaves_the_occupancy_checks_unevaluated(tmp_path: Path) -> None:
    run = _train(tmp_path / "run")  # configs/small.json: warm-up of 64 steps, 20 trained
    checks = {c.bottleneck: c for c in assess(inputs_from_run(run))}
    sentence = ("the profile's steps are all inside the occupancy warm-up (training.occupancy_warmup_steps = 64, "
                "the last record is at step 20)")
    assert checks["occupancy_update"].status == "not_evaluated" and sentence in checks["occupancy_update"].detail
    assert checks["wasted_samples"].status == "not_evaluated" and sentence in checks["wasted_samples"].detail
    assert "--steps 80 or more" in checks["occupancy_update"].detail  # 64 + 16 (occupancy_update_every), log_every 5


def test_a_rank_without_metrics_is_an_error_naming_the_file(healthy_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(healthy_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    RunDir(run).metrics_path(1).unlink()
    with pytest.raises(DiagnosisError, match=r"world size 2 but ranks \[1\] wrote no metrics .*metrics\.rank1\.jsonl"):
        diagnose_run(run)


def test_a_run_whose_eval_json_shows_a_collapse_to_the_background_is_diagnosed(healthy_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(healthy_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    evaluation = {"step": 20, "mean_psnr_db": 9.93, "background_psnr_db": 9.98, "occupancy_warmup_steps": 16}
    RunDir(run).eval_path.write_text(json.dumps(evaluation))
    fired = {d.bottleneck: d for d in diagnose_run(run)}
    assert set(fired) == {"background_collapse"} and fired["background_collapse"].severity == "high"
    assert "9.93 dB at step 20 vs 9.98 dB" in fired["background_collapse"].evidence

"""profile.* and faults.* config keys acting on real short runs, and the interconnect-emulation rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.contract.config import TrainConfig, apply_overrides
from trainer.contract.errors import ConfigError
from trainer.contract.backend import interconnect_env
from trainer.parallel.dist_env import detect_dist_env
from trainer.contract.metrics import read_metrics
from trainer.train.timing import PhaseFaults, PhaseTimer

SMALL = REPO / "configs" / "small.json"


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ngptune", "train", "--config", str(SMALL), "--no-eval", "--quiet",
           "--out", str(out), "--set", "training.log_every=5", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_trace_window_writes_a_chrome_trace_with_phase_ranges(tmp_path: Path) -> None:
    proc = _train(tmp_path / "run", "--n-steps", "10", "--trace-steps", "3:5", "--set", "faults.data_delay_ms=30")
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((tmp_path / "run" / "traces" / "rank0.pt.trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"phase:data", "phase:field_forward", "phase:backward"} <= names
    data_ranges = [e for e in trace["traceEvents"] if e.get("name") == "phase:data" and e.get("ph") == "X"]
    assert len(data_ranges) == 2  # steps 3 and 4
    assert all(e["dur"] >= 30_000 for e in data_ranges)  # µs: the 30 ms delay sits inside the phase
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(r["data_ms"] >= 30.0 for r in records)
    assert all(r["emulated_interconnect"] == "none" for r in records)


def test_step_faults_fail_the_run_and_name_themselves(tmp_path: Path) -> None:
    proc = _train(tmp_path / "oom", "--n-steps", "10", "--set", "faults.oom_at_step=2")
    assert proc.returncode != 0
    status = json.loads((tmp_path / "oom" / "status.json").read_text())
    assert status["state"] == "failed"
    assert "OutOfMemoryError" in status["reason"] and "faults.oom_at_step=2" in status["reason"]


def test_phase_timer_compute_slowdown_and_data_delay() -> None:
    import time

    import torch

    timer = PhaseTimer(torch.device("cpu"), faults=PhaseFaults(data_delay_ms=10.0, compute_slowdown=3.0))
    with timer.phase("data"):
        pass
    with timer.phase("field_forward"):
        time.sleep(0.02)
    with timer.phase("backward"):
        time.sleep(0.01)
    ms = timer.collect()
    assert ms["data"] >= 10.0
    # backward = its own 10 ms + (3 - 1) x (20 + 10) ms of compute
    assert ms["backward"] >= 70.0
    assert ms["field_forward"] < 40.0


def test_phase_timer_disabled_times_nothing_but_faults_still_act() -> None:
    import torch

    timer = PhaseTimer(torch.device("cpu"), enabled=False, faults=PhaseFaults(data_delay_ms=5.0))
    import time

    t0 = time.perf_counter()
    with timer.phase("data"):
        pass
    assert time.perf_counter() - t0 >= 0.005
    assert timer.collect() == {}


@pytest.mark.parametrize("value", ["5:3", "3:3", "x:4", "3-5"])
def test_bad_trace_window_is_rejected_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="profile.trace_steps"):
        apply_overrides(TrainConfig(), {"profile.trace_steps": value})


def test_faults_ranks_must_be_distinct_non_negative() -> None:
    with pytest.raises(ConfigError, match="faults.ranks"):
        apply_overrides(TrainConfig(), {"faults.ranks": [1, 1]})
    with pytest.raises(ConfigError, match="faults.compute_slowdown"):
        apply_overrides(TrainConfig(), {"faults.compute_slowdown": 0.5})


def test_interconnect_emulation_sets_nccl_variables_and_is_rejected_on_gloo() -> None:
    assert interconnect_env("pcie", "nccl") == {"NCCL_P2P_DISABLE": "1"}
    assert interconnect_env("sockets", "nccl") == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert interconnect_env("nvlink", "nccl") == {}
    assert interconnect_env("none", "gloo") == {}
    with pytest.raises(ConfigError, match="distributed.emulate_interconnect.*gloo"):
        interconnect_env("sockets", "gloo")
    cfg = apply_overrides(TrainConfig(), {"distributed.emulate_interconnect": "pcie", "training.device": "cpu"})
    with pytest.raises(ConfigError, match="distributed.emulate_interconnect"):
        detect_dist_env(cfg, environ={}, cuda_device_count=0)


def test_emulate_flag_on_cpu_is_one_clear_error(tmp_path: Path) -> None:
    proc = _train(tmp_path / "emu", "--n-steps", "2", "--emulate-interconnect", "sockets")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: distributed.emulate_interconnect")


def test_fault_ranks_beyond_one_process_are_refused(demo_scene):
    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    with pytest.raises(ConfigError, match=r"faults.ranks\[0\]: expected a rank < world size \(1\), got 5"):
        Trainer(tiny_config(faults__ranks=[5], training__device="cpu"), load_scene(demo_scene))

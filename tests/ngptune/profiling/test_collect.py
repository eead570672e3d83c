"""collect.py on a real short CPU run: phase coverage, the trace window, trace tables, and broken inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ngptune.profiling import SourceStatus
from ngptune.profiling.collect import (
    ProfileDir,
    RunOutcome,
    align_gpu_timeline,
    collect,
    collect_phases,
    collect_traces,
    write_failure,
    write_tables,
)
from ngptune.profiling.nvml import NvmlSampler, timeline_frame
from ngptune.profiling.runs import ProfileError
from ngptune.profiling.traces import TraceError
from tests.support.fake_nvml import FakeGpu, make_fake_nvml
from tests.support.paths import REPO
from trainer.contract.rundir import RunDir
from trainer.contract.runstatus import TRAIN_START_KEY
from ngptune.profiling.tables import DIAGNOSES_TABLE, KERNELS_TABLE, OVERLAP_TABLE
from trainer.contract.metrics import PHASES, MetricsError, read_metrics

SMALL = REPO / "configs" / "small.json"
STEPS = 10
WINDOW = (3, 5)


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory, demo_scene: Path) -> ProfileDir:  # noqa: F811
    """A real single-process run with one record per step and a torch.profiler window, laid out
    as a profile folder."""
    profile = ProfileDir(tmp_path_factory.mktemp("collect") / "profile")
    cmd = [sys.executable, "-m", "ngptune", "train", "--scene", str(demo_scene), "--config", str(SMALL),
           "--n-steps", str(STEPS), "--trace-steps", f"{WINDOW[0]}:{WINDOW[1]}", "--no-eval", "--quiet",
           "--out", str(profile.run.root), "--set", "training.log_every=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return profile


def test_named_phases_cover_at_least_90_percent_of_the_step(profiled_run: ProfileDir) -> None:
    """Quality bar: named phases ≥ 90 % of the measured wall-clock step time on CPU."""
    phases, summary, status = collect_phases(profiled_run.run, trace_window=WINDOW, completed=True)
    assert status.status == "ok"
    assert f"steps {WINDOW[0] + 1}..{WINDOW[1] + 1} (torch.profiler window" in status.detail
    (row,) = summary.to_dict("records")
    assert row["phase_coverage"] >= 0.90, row
    # the coverage is what the phase table says: named phase time over step time
    steady = phases[phases["step"] > phases["step"].min()]
    per_step = steady.pivot_table(index="step", columns="phase", values="time_ms")
    named = per_step[[p for p in PHASES if p in per_step.columns]].sum(axis=1)
    step_time = named + per_step["other"]
    assert (named / step_time).mean() == pytest.approx(row["phase_coverage"], rel=0.05)
    # the profiler window's records (steps A+1..B+1) are left out; every other step is there
    assert sorted(phases["step"].unique()) == [s for s in range(1, STEPS + 1) if not WINDOW[0] + 1 <= s <= WINDOW[1] + 1]
    assert set(phases["phase"]) == {*PHASES, "other"}


def test_trace_tables_of_the_window(profiled_run: ProfileDir) -> None:
    kernels, overlap, status = collect_traces(profiled_run.run, world_size=1, trace_window=WINDOW, completed=True)
    assert status.status == "ok" and "CPU operators" in status.detail
    assert list(kernels.columns) == list(KERNELS_TABLE) and list(overlap.columns) == list(OVERLAP_TABLE)
    by_category = kernels.groupby("category")["total_ms"].sum()
    assert {"hash_grid_fwd", "hash_grid_bwd", "mlp", "march"} <= set(by_category.index)
    assert by_category["hash_grid_fwd"] > by_category["march"]  # the torch hash grid dominates a CPU step
    assert kernels["share_pct"].sum() == pytest.approx(100.0)
    (row,) = overlap.to_dict("records")
    assert row["rank"] == 0 and row["comm_ms"] == 0.0
    assert row["compute_ms"] + row["idle_ms"] == pytest.approx(row["window_ms"])
    assert row["compute_ms"] > 0.5 * row["window_ms"]


def test_collect_and_write_a_cpu_profile(profiled_run: ProfileDir, tmp_path: Path) -> None:
    profile = ProfileDir(tmp_path / "copy")
    shutil.copytree(profiled_run.run.root, profile.run.root)
    missing_nvml = SourceStatus("missing", "no GPU (NVML: NVML Shared Library Not Found)")
    collected = collect(profile, world_size=1, trace_window=WINDOW, outcome=RunOutcome(True, 0),
                        gpu_timeline=timeline_frame([]),
                        extra_sources={"nvml": missing_nvml, "nsys": SourceStatus("missing", "not requested (--nsys)"),
                                       "ncu": SourceStatus("missing", "not requested (--ncu)"),
                                       "link_busbw": SourceStatus("missing", "not requested (--link-busbw off)")})
    write_tables(profile, collected, pd.DataFrame(columns=list(DIAGNOSES_TABLE)))
    sources = json.loads(profile.sources_path.read_text())
    assert list(sources) == ["phase_timers", "nvml", "torch_profiler", "hta", "nsys", "ncu", "link_busbw"]
    assert sources["nvml"] == {"status": "missing", "detail": "no GPU (NVML: NVML Shared Library Not Found)"}
    assert sources["link_busbw"] == {"status": "missing", "detail": "not requested (--link-busbw off)"}
    assert sources["hta"]["status"] == "missing" and "jupyterlab" in sources["hta"]["detail"]
    assert sources["phase_timers"]["status"] == sources["torch_profiler"]["status"] == "ok"
    timeline = pd.read_csv(profile.table_path("gpu_timeline"))
    assert timeline.empty and "util_pct" in timeline.columns  # header only
    assert len(pd.read_csv(profile.table_path("kernels"))) == len(collected.kernels)
    assert pd.read_csv(profile.table_path("summary"))["rank"].tolist() == [0]


def test_missing_steps_in_a_metrics_file_name_the_file(profiled_run: ProfileDir, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(profiled_run.run.root, run.root)
    lines = run.metrics_path(0).read_text().splitlines()
    run.metrics_path(0).write_text("\n".join(lines[:3] + lines[5:]) + "\n")  # drop the records of steps 4 and 5
    with pytest.raises(MetricsError, match=rf"{run.metrics_path(0)}: missing steps: no record between step 3 and step 6"):
        collect_phases(run, trace_window=WINDOW, completed=True)
    # a failed run's broken metrics are reported as a missing source, not raised
    _, _, status = collect_phases(run, trace_window=WINDOW, completed=False)
    assert status.status == "missing" and "missing steps" in status.detail


def test_a_completed_run_without_a_rank_s_metrics_is_an_error(profiled_run: ProfileDir, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(profiled_run.run.root, run.root)
    records = [json.loads(line) for line in run.metrics_path(0).read_text().splitlines()]
    run.metrics_path(0).write_text("".join(json.dumps({**r, "world_size": 2}) + "\n" for r in records))
    with pytest.raises(ProfileError, match=r"world size 2 but no metrics from ranks \[1\]"):
        collect_phases(run, trace_window=WINDOW, completed=True)


def test_corrupt_and_rankless_traces(profiled_run: ProfileDir, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    shutil.copytree(profiled_run.run.root, run.root)
    trace = run.trace_path(0)
    good = trace.read_text()
    # a distributed run whose traces carry no rank: never guessed from the file name
    shutil.copy(trace, run.trace_path(1))
    with pytest.raises(TraceError, match=rf"{run.trace_path(0)}: no rank information"):
        collect_traces(run, world_size=2, trace_window=WINDOW, completed=True)
    run.trace_path(1).unlink()
    trace.write_text(good[: len(good) // 3])
    with pytest.raises(TraceError, match=rf"{trace}: truncated or corrupt Chrome trace"):
        collect_traces(run, world_size=1, trace_window=WINDOW, completed=True)
    # the same file in collect(): the source fails with that message, the rest is collected
    profile = ProfileDir(tmp_path)
    collected = collect(profile, world_size=1, trace_window=WINDOW, outcome=RunOutcome(True, 0),
                        gpu_timeline=timeline_frame([]), extra_sources={})
    assert collected.sources["torch_profiler"].status == "failed"
    assert "truncated or corrupt Chrome trace" in collected.sources["torch_profiler"].detail
    assert collected.kernels is None and len(collected.phases) > 0


def test_failed_run_before_the_window(profiled_run: ProfileDir, tmp_path: Path) -> None:
    profile = ProfileDir(tmp_path)
    shutil.copytree(profiled_run.run.root, profile.run.root)
    shutil.rmtree(profile.run.traces_dir)
    outcome = RunOutcome(False, 1, "RuntimeError: simulated crash", profile.trainer_log_path)
    collected = collect(profile, world_size=1, trace_window=(20, 25), outcome=outcome,
                        gpu_timeline=timeline_frame([]), extra_sources={})
    status = collected.sources["torch_profiler"]
    assert status.status == "missing" and status.detail.startswith("the run ended before its trace window (20:25")
    write_failure(profile, outcome)
    assert json.loads(profile.failure_path.read_text()) == {
        "reason": "RuntimeError: simulated crash", "log_path": str(profile.trainer_log_path), "exit_code": 1,
    }


def test_gpu_timeline_is_on_the_training_clock(profiled_run: ProfileDir, tmp_path: Path) -> None:
    """t_s of gpu_timeline.csv: seconds since the training loop started (status.json), from the
    sampler's wall-clock origin; samples from the fake NVML."""
    profile = ProfileDir(tmp_path / "copy")
    shutil.copytree(profiled_run.run.root, profile.run.root)
    start = profile.run.read_status()[TRAIN_START_KEY]  # written by the real trainer
    last = read_metrics(profile.run.metrics_path(0))[-1]
    # the step clock (wall_time_s) starts there: the last record was written no earlier than start + its wall_time_s
    assert start + last["wall_time_s"] <= profiled_run.run.metrics_path(0).stat().st_mtime + 1e-3

    sampler = NvmlSampler(0.01, nvml=make_fake_nvml([FakeGpu(), FakeGpu()])).start()
    time.sleep(0.05)
    nvml_status = sampler.stop()
    raw = sampler.frame()
    collected = collect(profile, world_size=1, trace_window=WINDOW, outcome=RunOutcome(True, 0), gpu_timeline=raw,
                        extra_sources={"nvml": nvml_status}, gpu_timeline_origin_unix_s=sampler.origin_unix_s,
                        link_busbw_gb_per_s=12.5)
    offset_s = sampler.origin_unix_s - start
    assert collected.gpu_timeline["t_s"].tolist() == pytest.approx((raw["t_s"] + offset_s).tolist(), abs=1e-9)
    assert collected.gpu_timeline["gpu"].tolist() == raw["gpu"].tolist()
    # this sampler ran after the training had ended: every sample lies past its last step
    assert (collected.gpu_timeline["t_s"] > last["wall_time_s"]).all()
    assert collected.sources["nvml"].detail == (
        f"{nvml_status.detail}; t_s: seconds since the training loop started (train_start_unix_s in status.json; "
        f"the sampler started at t_s = {offset_s:.2f} s)")
    assert collected.summary["link_busbw_gb_per_s"].tolist() == [12.5]

    # a run that ended before its training loop has no start: the sampler's own clock, said so
    status = profile.run.read_status()
    del status[TRAIN_START_KEY]
    profile.run.write_json(profile.run.status_path, status)
    timeline, clock = align_gpu_timeline(raw, sampler.origin_unix_s, profile.run)
    assert timeline["t_s"].tolist() == raw["t_s"].tolist()
    assert clock == (f"t_s: seconds since the sampler started, just before the trainer command "
                     f"({profile.run.status_path} holds no train_start_unix_s (the run ended before training))")
    assert align_gpu_timeline(timeline_frame([]), sampler.origin_unix_s, profile.run)[1] == ""
    # unknown link: the summary column stays empty
    collected = collect(profile, world_size=1, trace_window=WINDOW, outcome=RunOutcome(True, 0),
                        gpu_timeline=timeline_frame([]), extra_sources={})
    assert collected.summary["link_busbw_gb_per_s"].isna().all()

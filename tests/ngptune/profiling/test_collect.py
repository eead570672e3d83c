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
    steady_windows,
    window_records,
    write_failure,
    write_tables,
)
from ngptune.profiling.diagnoses import ProfileInputs, assess, config_of_run
from ngptune.profiling.nvml import NvmlSampler, timeline_frame
from ngptune.profiling.runs import ProfileError
from ngptune.profiling.traces import TraceError
from tests.support.fake_nvml import FakeGpu, make_fake_nvml
from tests.support.paths import REPO
from trainer.contract.rundir import RunDir
from trainer.contract.runstatus import TRAIN_START_KEY
from ngptune.profiling.tables import DIAGNOSES_TABLE, KERNELS_TABLE, OVERLAP_TABLE
from trainer.contract.config import TrainConfig, apply_overrides, dump_config
from trainer.contract.metrics import PHASES, MetricsError, MetricsWriter, read_metrics

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
    # the summary's parts add up to its step time
    parts = row["compute_ms"] + row["data_ms"] + row["occupancy_update_ms"] + row["wait_ms"] + row["other_ms"]
    assert parts == pytest.approx(row["step_time_ms"])
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


# ------------------------------------------------------------- interval records of a captured step
START_UNIX_S = 1.8e9  # the training loop's start (status.json)
STARTUP_S = 6.0  # start-up steps after it: compilation, capture (not on the steps' clock)
INTERVAL_S = 0.35  # 100 replayed steps of 3.5 ms
SAMPLED = {"data": 0.5, "march": 1.1, "compact": 2.8, "field_forward": 0.9, "render": 1.0, "backward": 2.7,
           "optimizer": 0.3}  # the sampled eager step: 9.3 ms, longer than the mean step


def _interval_records(rank: int, steps: int = 1000, log_every: int = 100) -> list[dict]:
    """A captured step's records as the trainer writes them: one per ``log_every`` steps, the
    phases of each interval's sampled eager step, step_kind on the first record only."""
    records = []
    for i, step in enumerate(range(log_every, steps + 1, log_every)):
        record = {"rank": rank, "world_size": 2, "step": step, "wall_time_s": INTERVAL_S * (i + 1), "loss": 0.01,
                  "unix_time_s": START_UNIX_S + STARTUP_S + INTERVAL_S * (i + 1) + 0.001 * rank,
                  "throughput_samples_per_s": 7.5e7, "step_time_ms": 3.5, "steps_per_s": 1e3 / 3.5,
                  **{f"{p}_ms": SAMPLED.get(p, 0.0) for p in PHASES}, "other_ms": 0.0}
        if i == 0:
            record.update(step_kind="captured", startup_s=9.0, startup_steps=4)
        records.append(record)
    return records


def _captured_run(root: Path) -> ProfileDir:
    profile = ProfileDir(root)
    profile.run.root.mkdir(parents=True)
    profile.run.config_path.write_text(dump_config(apply_overrides(TrainConfig(), {"training.log_every": 100})))
    profile.run.write_json(profile.run.status_path, {"state": "completed", TRAIN_START_KEY: START_UNIX_S})
    for rank in (0, 1):
        with MetricsWriter(profile.run.metrics_path(rank)) as writer:
            for record in _interval_records(rank):
                writer.write(record)
    return profile


def _nvml_samples(steady_util: float) -> pd.DataFrame:
    """What the sampler read from 3 s before the training loop (set-up) to 3 s after its last
    record (final snapshot, evaluation), every 0.1 s on its own clock: start-up at 20 %, the
    steady steps at ``steady_util``, the trace's export idle, the tail at 5 %."""
    rows = []
    last = STARTUP_S + 10 * INTERVAL_S
    for i in range(int((3.0 + last + 3.0) / 0.1)):
        t = -3.0 + 0.1 * i  # on the training clock
        util = (0.0 if t <= 0 else 20.0 if t <= STARTUP_S + INTERVAL_S else 0.0 if 8 * INTERVAL_S < t - STARTUP_S <= 9 * INTERVAL_S
                else steady_util if t <= last else 5.0)
        rows.append({"t_s": t + 3.0, "gpu": 0, "util_pct": util})
    return timeline_frame(rows)


def test_window_records_of_interval_records() -> None:
    metrics = pd.DataFrame({"rank": [0] * 10 + [1] * 10, "step": list(range(100, 1001, 100)) * 2})
    # the window 801:806 and its export at step 806 lie in the interval that ends at step 900
    assert metrics[window_records(metrics, (801, 806))]["step"].tolist() == [900, 900]
    # a window across an interval's end touches both intervals
    assert metrics[window_records(metrics, (798, 803))]["step"].tolist() == [800, 900, 800, 900]
    # one record per step: the records of steps A+1..B+1
    per_step = pd.DataFrame({"rank": 0, "step": range(1, 11)})
    assert per_step[window_records(per_step, (3, 5))]["step"].tolist() == [4, 5, 6]
    assert not window_records(metrics, None).any()


def test_steady_windows_are_the_summary_s_records_on_the_timeline_s_clock() -> None:
    metrics = pd.DataFrame(_interval_records(0) + _interval_records(1))
    windows = steady_windows(metrics, (801, 806), START_UNIX_S)
    # the warm-up record (100) and the window's (900) are left out; a record's interval starts at the previous one
    assert windows[windows["rank"] == 0]["step"].tolist() == [200, 300, 400, 500, 600, 700, 800, 1000]
    first = windows.iloc[0]
    assert (first["from_s"], first["to_s"]) == pytest.approx((STARTUP_S + INTERVAL_S, STARTUP_S + 2 * INTERVAL_S))
    last = windows[windows["rank"] == 1].iloc[-1]
    assert (last["from_s"], last["to_s"]) == pytest.approx((STARTUP_S + 9 * INTERVAL_S + 0.001, STARTUP_S + 10 * INTERVAL_S + 0.001))
    # records of a trainer without the wall clock column: unknown
    assert steady_windows(metrics.drop(columns="unix_time_s"), None, START_UNIX_S).empty


@pytest.mark.parametrize("util, fires", [(79.0, True), (81.0, False)])
def test_a_captured_run_s_interval_records_and_its_steady_utilisation(tmp_path: Path, util: float, fires: bool) -> None:
    profile = _captured_run(tmp_path / "profile")
    collected = collect(profile, world_size=2, trace_window=(801, 806), outcome=RunOutcome(True, 0),
                        gpu_timeline=_nvml_samples(util), extra_sources={},
                        gpu_timeline_origin_unix_s=START_UNIX_S - 3.0)
    summary = collected.summary.set_index("rank")
    # step time and throughput of every step of the intervals (replays), not the sampled eager step
    assert summary["step_time_ms"].tolist() == pytest.approx([3.5, 3.5])
    assert summary["steps_per_s"].tolist() == pytest.approx([1e3 / 3.5] * 2)
    assert summary["throughput_samples_per_s"].tolist() == pytest.approx([7.5e7] * 2)
    assert summary["step_kind"].tolist() == ["captured", "captured"] and summary["steps"].tolist() == [1000, 1000]
    assert summary["compute_ms"].tolist() == pytest.approx([8.8, 8.8])  # the sampled eager step's phases
    assert summary["phase_coverage"].isna().all() and summary["other_ms"].isna().all()  # not the replayed step
    detail = collected.sources["phase_timers"].detail
    assert "the record of step 900 (torch.profiler window 801:806 and its export) is left out" in detail
    assert "the phases are those of the sampled eager step of each interval" in detail
    assert "named phases cover" not in detail
    assert sorted(collected.phases["step"].unique()) == [100, 200, 300, 400, 500, 600, 700, 800, 1000]
    # compute_underused: the steady window only (start-up at 20 %, the export idle and the tail at 5 % left out)
    inputs = ProfileInputs(phases=collected.phases, summary=collected.summary, gpu_timeline=collected.gpu_timeline,
                           config=config_of_run(profile.run.root), steady_windows=collected.steady_windows)
    check = {c.bottleneck: c for c in assess(inputs)}["compute_underused"]
    assert check.value == pytest.approx(util)
    assert check.status == ("fired" if fires else "clear")
    assert f"mean GPU utilisation {util:.0f}% (GPU 0 {util:.0f}%) over the steady training window (t_s 6.3–9.5 s" in check.detail

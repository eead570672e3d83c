"""The profile report (ngptune/reporting/profile_report.py) in a real headless browser: a full
synthetic GPU profile folder, a real CPU-only profile and a real crashed one; and bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ngptune.profiling.collect import ProfileDir
from ngptune.profiling.diagnoses import ProfileInputs, assess, diagnoses_table
from ngptune.reporting.profile_report import CAPTURED_PHASES_TEXT, ProfileReportError, write_profile_report
from tests.support.browser import view_in_browser
from ngptune.profiling.tables import GPU_TIMELINE_TABLE, KERNELS_TABLE, OVERLAP_TABLE, PHASES_TABLE, SUMMARY_TABLE
from tests.support.paths import REPO
from trainer.contract.metrics import PHASES, MetricsWriter

pytestmark = pytest.mark.timeout(240)

SECTIONS = (
    "Diagnoses",
    "Summary per rank",
    "Step-time breakdown per rank",
    "Per-rank imbalance",
    "GPU timelines (NVML)",
    "Top kernels",
    "Communication vs computation overlap",
    "Gradient all-reduce vs the link",
    "Data sources",
)
STEP_MS = {"data": 1.0, "march": 8.0, "compact": 0.0, "field_forward": 30.0, "render": 3.0, "backward": 30.0, "comm": 40.0,
           "optimizer": 4.0, "occupancy_update": 0.0, "balance": 1.0, "other": 3.0}


def _phases() -> pd.DataFrame:
    rows = [(rank, step, phase, ms * (1.1 if rank else 1.0) if phase != "comm" else ms)
            for rank in (0, 1) for step in (10, 20, 30, 40) for phase, ms in STEP_MS.items()]
    return pd.DataFrame(rows, columns=list(PHASES_TABLE))


def _summary() -> pd.DataFrame:
    return pd.DataFrame(
        {"rank": [0, 1], "steps": [40, 40], "step_time_ms": [120.0, 127.0], "compute_ms": [75.0, 82.5],
         "wait_ms": [41.0, 41.0], "throughput_samples_per_s": [2.1e6, 2.1e6], "rays_per_s": [3.0e4, 3.0e4],
         "rank_throughput_samples_per_s": [1.1e6, 1.0e6], "rank_rays_per_s": [1.55e4, 1.45e4], "imbalance": [1.05, 1.05],
         "comm_ms": [40.0, 40.0], "comm_busbw_gb_per_s": [3.1, 3.0], "link_busbw_gb_per_s": [26.0, 26.0],
         "phase_coverage": [0.975, 0.976]},
        columns=list(SUMMARY_TABLE),
    )


def _gpu_timeline() -> pd.DataFrame:
    t = np.arange(30) * 0.1
    frames = []
    for gpu in (0, 1):
        frames.append(pd.DataFrame({
            "t_s": t, "gpu": gpu, "util_pct": np.where(t > 0.3, 55.0, 0.0), "mem_util_pct": 20.0,
            "mem_used_mib": 4000.0 + 100 * t, "power_w": 300.0 + 10 * gpu, "temp_c": 50.0,
            "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0,
            "throttle_reasons": np.where(t > 2.0, "sw_power_cap|hw_slowdown", "none"),
            "pcie_tx_kib_per_s": 1e5, "pcie_rx_kib_per_s": 2e5,
            "nvlink_tx_kib_per_s": np.nan, "nvlink_rx_kib_per_s": np.nan,
        }))
    return pd.concat(frames, ignore_index=True)[list(GPU_TIMELINE_TABLE)]


def _kernels() -> pd.DataFrame:
    rows = []
    for rank in (0, 1):
        rows += [
            (rank, "_hash_grid_forward_kernel", "hash_grid_fwd", 5, 10.0),
            (rank, "_hash_grid_backward_kernel", "hash_grid_bwd", 5, 50.0),
            (rank, "ampere_sgemm_64x64", "mlp", 20, 30.0),
            (rank, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "comm", 5, 60.0),
        ]
    k = pd.DataFrame(rows, columns=["rank", "name", "category", "calls", "total_ms"])
    k["mean_us"] = 1e3 * k["total_ms"] / k["calls"]
    k["share_pct"] = 100 * k["total_ms"] / k.groupby("rank")["total_ms"].transform("sum")
    return k[list(KERNELS_TABLE)]


def _overlap() -> pd.DataFrame:
    return pd.DataFrame({"rank": [0, 1], "window_ms": [600.0, 640.0], "compute_ms": [450.0, 480.0],
                         "comm_ms": [300.0, 300.0], "exposed_comm_ms": [100.0, 110.0],
                         "overlapped_comm_ms": [200.0, 190.0], "idle_ms": [50.0, 50.0]})[list(OVERLAP_TABLE)]


def _write_metrics(profile: ProfileDir, emulated: str) -> None:
    for rank in (0, 1):
        with MetricsWriter(profile.run.metrics_path(rank)) as writer:
            for step in (10, 20):
                writer.write({"rank": rank, "world_size": 2, "step": step, "wall_time_s": step * 0.1, "loss": 0.01,
                              "throughput_samples_per_s": 1e6, "step_time_ms": 120.0, "emulated_interconnect": emulated})


@pytest.fixture()
def gpu_profile(tmp_path: Path) -> ProfileDir:
    """A full profile folder of a two-GPU run over an emulated PCIe link (synthetic tables)."""
    profile = ProfileDir(tmp_path / "gpu_profile")
    profile.root.mkdir()
    tables = {"phases": _phases(), "summary": _summary(), "gpu_timeline": _gpu_timeline(), "kernels": _kernels(),
              "overlap": _overlap()}
    inputs = ProfileInputs(phases=tables["phases"], summary=tables["summary"], gpu_timeline=tables["gpu_timeline"],
                           kernels=tables["kernels"], overlap=tables["overlap"], link_busbw_gb_per_s=26.0)
    tables["diagnoses"] = diagnoses_table(assess(inputs))
    for name, table in tables.items():
        table.to_csv(profile.table_path(name), index=False)
    sources = {name: {"status": "ok", "detail": f"{name} collected"} for name in ("phase_timers", "nvml", "torch_profiler")}
    sources["nsys"] = {"status": "missing", "detail": "not requested (--nsys)"}
    sources["link_busbw"] = {"status": "ok", "detail": "all_reduce of 64 MiB on 2 nccl ranks, emulated pcie: busbw 26 GB/s"}
    profile.sources_path.write_text(json.dumps(sources))
    _write_metrics(profile, "pcie")
    return profile


def test_full_gpu_profile_renders_every_section_and_plot(gpu_profile: ProfileDir, tmp_path: Path) -> None:
    diagnoses = pd.read_csv(gpu_profile.table_path("diagnoses")).set_index("bottleneck")
    # the synthetic run is communication bound (40 of 120 ms), with hash-grid backward 5x forward
    assert diagnoses["fired"].to_dict() == {"compute_underused": False, "data_loading": False,
                                            "hash_grid_contention": True, "communication": True,
                                            "load_imbalance": False, "wasted_samples": False,
                                            "occupancy_update": False, "background_collapse": False}
    path = write_profile_report(gpu_profile.root)
    assert path == gpu_profile.report_path
    view = view_in_browser(path, screenshot=tmp_path / "gpu_profile.png")
    assert (tmp_path / "gpu_profile.png").stat().st_size > 0
    assert view.errors == [] and view.failed_requests == []
    # breakdown bars, step-time line, imbalance, GPU timelines, kernels, overlap
    assert view.plots_total == 6 and view.plots_rendered == 6
    for title in (*SECTIONS, "Emulated interconnect: pcie"):
        assert title in view.text, title
    for evidence in diagnoses.loc[["communication", "hash_grid_contention"], "evidence"]:
        assert evidence in view.text
    assert diagnoses.at["communication", "knob"] in view.text
    assert "of the link's 26 GB/s" in view.text
    # compute under-used: 55 % utilisation, but explained by the communication wait
    assert "explain the low utilisation" in view.text
    assert "sw_power_cap" in view.text and "hw_slowdown" in view.text
    assert "Not reported by NVML on this machine: NVLink" in view.text
    assert "Run failed" not in view.text and "No GPU timeline" not in view.text
    assert "nsys\tmissing\tnot requested (--nsys)" in view.text
    # achieved busbw 3.1 and 3.0 GB/s of the link's 26: 11.9 % and 11.5 %
    assert ("The gradient all-reduce reaches at most 12% of the link's 26 GB/s (below 50%): the link is not what "
            "limits it") in view.text
    assert "0\t3.10 GB/s\t26.0 GB/s\t11.9 %" in view.text and "1\t3.00 GB/s\t26.0 GB/s\t11.5 %" in view.text
    assert "link_busbw: ok — all_reduce of 64 MiB on 2 nccl ranks, emulated pcie: busbw 26 GB/s" in view.text


def _profile(out: Path, *sets: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ngptune", "profile", "--config", str(REPO / "configs" / "small.json"),
           "--steps", "12", "--out", str(out)]
    for item in ("training.log_every=4", "training.target_samples_per_step=1024", "training.max_march_steps=128",
                 "training.occupancy_resolution=32", *sets):
        cmd += ["--set", item]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=REPO)


def test_cpu_only_profile_says_no_gpu_and_is_otherwise_complete(tmp_path: Path) -> None:
    proc = _profile(tmp_path / "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sources = json.loads(ProfileDir(tmp_path / "cpu").sources_path.read_text())
    path = write_profile_report(tmp_path / "cpu")  # the command wrote it; write it again under test
    view = view_in_browser(path, screenshot=tmp_path / "cpu_profile.png")
    assert view.errors == [] and view.failed_requests == []
    assert view.plots_total >= 3 and view.plots_rendered == view.plots_total
    for title in SECTIONS:
        assert title in view.text, title
    assert f"No GPU timeline: gpu_timeline.csv is empty (header only); nvml: missing — {sources['nvml']['detail']}" in view.text
    assert "no GPU" in sources["nvml"]["detail"]
    # 12 steps lie inside configs/small.json's occupancy warm-up of 64: the occupancy checks wait for it
    assert ("Not evaluated (inputs missing): compute_underused, communication, load_imbalance, wasted_samples, "
            "occupancy_update, background_collapse.") in view.text
    diagnoses = pd.read_csv(tmp_path / "cpu" / "diagnoses.csv").set_index("bottleneck")
    assert diagnoses.at["occupancy_update", "evidence"].startswith(
        "not evaluated: the profile's steps are all inside the occupancy warm-up (training.occupancy_warmup_steps = 64")
    assert "--steps 80 or more" in diagnoses.at["occupancy_update", "evidence"]
    assert "One rank: nothing to balance." in view.text
    assert (f"One rank: no gradient all-reduce to compare with the link. link_busbw: missing — "
            f"{sources['link_busbw']['detail']}") in view.text
    assert sources["link_busbw"]["detail"] == "one rank: no gradient all-reduce, so no link to measure"
    assert "No bottleneck passed its threshold." in view.text
    assert "Run failed" not in view.text and "Emulated interconnect" not in view.text


def test_crashed_run_report_shows_the_failure_and_what_was_collected(tmp_path: Path) -> None:
    proc = _profile(tmp_path / "crash", "faults.crash_at_step=7")
    assert proc.returncode != 0
    profile = ProfileDir(tmp_path / "crash")
    failure = json.loads(profile.failure_path.read_text())
    view = view_in_browser(profile.report_path, screenshot=tmp_path / "crash_profile.png")
    assert view.errors == [] and view.failed_requests == []
    assert view.plots_rendered == view.plots_total and view.plots_total >= 1
    assert "Run failed" in view.text
    assert "simulated crash (faults.crash_at_step=7" in failure["reason"]
    assert f"The run failed: {failure['reason']}" in view.text
    assert f"Log: {failure['log_path']}" in view.text and Path(failure["log_path"]).is_file()
    assert "Step-time breakdown per rank" in view.text and "Data sources" in view.text


def test_a_folder_with_sources_only_names_every_missing_table(tmp_path: Path) -> None:
    profile = ProfileDir(tmp_path / "bare")
    profile.root.mkdir()
    profile.sources_path.write_text(json.dumps({
        "phase_timers": {"status": "missing", "detail": "the run failed: no metrics.jsonl"},
        "torch_profiler": {"status": "missing", "detail": "the run ended before its trace window"},
    }))
    profile.failure_path.write_text(json.dumps({"reason": "LaunchError: rank 1 died", "log_path": "/x/rank1.log"}))
    html = write_profile_report(profile.root).read_text()
    assert "phases.csv is missing; phase_timers: missing — the run failed: no metrics.jsonl" in html
    assert "kernels.csv is missing; torch_profiler: missing — the run ended before its trace window" in html
    assert "gpu_timeline.csv is missing; sources.json does not say why" in html
    assert "diagnoses.csv is missing; not written" in html
    assert "LaunchError: rank 1 died" in html and "/x/rank1.log" in html
    assert 'class="plotly-graph-div"' not in html


def test_a_failed_link_measurement_says_why_the_link_is_unknown(gpu_profile: ProfileDir) -> None:
    summary = pd.read_csv(gpu_profile.table_path("summary"))
    summary["link_busbw_gb_per_s"] = 5.0  # a slow link: 3.1 GB/s is 62 % of it
    summary.to_csv(gpu_profile.table_path("summary"), index=False)
    html = write_profile_report(gpu_profile.root).read_text()
    assert ("reaches at most 62% of the link&#x27;s 5 GB/s (50% or more): the link itself limits it; only fewer "
            "bytes (parallel.compression, parallel.mode=subgrid) shorten it.") in html
    assert '<td class="num">62.0 %</td>' in html and '<td class="num">60.0 %</td>' in html  # 3.1/5, 3.0/5
    summary["link_busbw_gb_per_s"] = np.nan
    summary.to_csv(gpu_profile.table_path("summary"), index=False)
    sources = json.loads(gpu_profile.sources_path.read_text())
    why = "the link measurement (bench-comm) failed: rank 1 failed (exit code 1); log: /x/rank1.log"
    sources["link_busbw"] = {"status": "failed", "detail": why}
    gpu_profile.sources_path.write_text(json.dumps(sources))
    html = write_profile_report(gpu_profile.root).read_text()
    section = html[html.index("Gradient all-reduce vs the link</h2>"):html.index("Data sources</h2>")]
    assert f"The link&#x27;s bus bandwidth is unknown (link_busbw: failed — {why})." in section
    assert '<td class="num">3.10 GB/s</td>' in section and "achieved_of_link_pct" not in section  # achieved only, no ratio
    # subgrid mode: no gradient all-reduce, nothing achieved to compare
    summary["comm_busbw_gb_per_s"] = np.nan
    summary.to_csv(gpu_profile.table_path("summary"), index=False)
    html = write_profile_report(gpu_profile.root).read_text()
    assert "No achieved bus bandwidth: the run all-reduced no gradients" in html


def test_a_captured_step_s_phases_are_said_to_be_the_sampled_eager_step_s(gpu_profile: ProfileDir) -> None:
    html = write_profile_report(gpu_profile.root).read_text()
    assert CAPTURED_PHASES_TEXT not in html and "Step time over the run (mean of each logged interval)" in html
    summary = pd.read_csv(gpu_profile.table_path("summary"))
    summary["step_kind"], summary["phase_coverage"] = "captured", np.nan
    summary.to_csv(gpu_profile.table_path("summary"), index=False)
    html = write_profile_report(gpu_profile.root).read_text()
    breakdown = html[html.index("Step-time breakdown per rank</h2>"):html.index("Per-rank imbalance</h2>")]
    assert "the phases are those of the sampled eager step of each logging interval" in breakdown
    assert "Sampled eager step time over the run (the first step of each logged interval)" in breakdown
    summary_section = html[html.index("Summary per rank</h2>"):html.index("Step-time breakdown per rank</h2>")]
    assert "those of the sampled eager step of each interval" in summary_section


def test_unreadable_files_are_errors_naming_the_file(gpu_profile: ProfileDir) -> None:
    phases = gpu_profile.table_path("phases")
    phases.write_text("rank,step,phase\n0,10,data\n")
    with pytest.raises(ProfileReportError, match=r"phases.csv: missing columns \['time_ms'\]"):
        write_profile_report(gpu_profile.root)
    phases.write_text("")
    with pytest.raises(ProfileReportError, match="phases.csv: empty file without a header"):
        write_profile_report(gpu_profile.root)
    phases.unlink()
    gpu_profile.sources_path.write_text("{not json")
    with pytest.raises(ProfileReportError, match="sources.json: not valid JSON"):
        write_profile_report(gpu_profile.root)
    gpu_profile.sources_path.write_text(json.dumps({"nvml": "ok"}))
    with pytest.raises(ProfileReportError, match="sources.json: source 'nvml' must be an object"):
        write_profile_report(gpu_profile.root)
    with pytest.raises(ProfileReportError, match="profile folder not found"):
        write_profile_report(gpu_profile.root / "nowhere")


def test_phase_names_of_the_synthetic_profile_are_the_schema_phases() -> None:
    assert set(STEP_MS) == {*PHASES, "other"}


def test_the_diagnoses_read_in_their_units_not_as_raw_floats(gpu_profile: ProfileDir) -> None:
    import re

    diagnoses = pd.read_csv(gpu_profile.table_path("diagnoses")).set_index("bottleneck")
    html = write_profile_report(gpu_profile.root).read_text(encoding="utf-8")
    checks = html[html.index("<h3>All checks</h3>"):]
    cells = dict(re.findall(r"<tr><td class=\"text\">(\w+)</td>.*?((?:<td class=\"num\">[^<]*</td>){2})", checks))

    def shown(bottleneck: str) -> list[str]:
        return re.findall(r"<td class=\"num\">([^<]*)</td>", cells[bottleneck])

    data_share = diagnoses.at["data_loading", "value"]
    assert shown("data_loading") == [f"{100 * data_share:.1f} %", "10.0 %"]  # a share as a percentage
    assert shown("hash_grid_contention") == ["5.00×", "3.00×"]  # a ratio
    assert shown("communication")[1] == "15.0 %" and shown("communication")[0].endswith(" %")
    assert shown("compute_underused")[1] == "80.0 %"  # already a percentage
    assert shown("background_collapse") == ["", "0.10 dB"]  # not evaluated: no value
    assert not re.search(r"<td class=\"num\">\d+\.\d{5,}", html[html.index("Diagnoses"):])  # no raw floats

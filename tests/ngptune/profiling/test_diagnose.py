"""Bottleneck diagnoses (ngptune/profiling/diagnoses/) on hand-built tables: each threshold just
below and just above, severities, warm-up exclusion, the not-evaluated cases and bad inputs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ngptune.profiling import diagnoses as dg
from ngptune.profiling.diagnoses import data as data_loading
from ngptune.profiling.diagnoses import inputs as diagnosis_inputs
from ngptune.profiling.diagnoses import BOTTLENECKS, DiagnosisError, ProfileInputs, assess, diagnose, diagnoses_table
from ngptune.profiling.tables import DIAGNOSES_TABLE, GPU_TIMELINE_TABLE, KERNELS_TABLE, OVERLAP_TABLE, PHASES_TABLE
from trainer.contract.config import TrainConfig, apply_overrides
from trainer.contract.metrics import PHASES

STEPS = (10, 20, 30)  # 10 is the warm-up interval


def phases_frame(per_rank: dict[int, dict[str, float]], warmup: dict[str, float] | None = None) -> pd.DataFrame:
    """Rows (rank, step, phase, time_ms): the given phase times at every step after the warm-up;
    the warm-up step holds ``warmup`` (default: the same times)."""
    rows = []
    for rank, times in per_rank.items():
        for step in STEPS:
            use = warmup if (warmup is not None and step == STEPS[0]) else times
            rows += [(rank, step, phase, ms) for phase, ms in use.items()]
    return pd.DataFrame(rows, columns=list(PHASES_TABLE))


def inputs(per_rank: dict[int, dict[str, float]], **kw) -> ProfileInputs:
    summary = kw.pop("summary", pd.DataFrame({"rank": sorted(per_rank)}))
    return ProfileInputs(phases=phases_frame(per_rank, kw.pop("warmup", None)), summary=summary, **kw)


def check(inp: ProfileInputs, bottleneck: str) -> dg.Check:
    return {c.bottleneck: c for c in assess(inp)}[bottleneck]


def healthy(**extra: float) -> dict[str, float]:
    """A 100 ms step: 1 ms data, the rest compute (plus whatever ``extra`` sets)."""
    times = {"data": 1.0, "march": 10.0, "field_forward": 40.0, "render": 4.0, "backward": 40.0, "optimizer": 5.0}
    times.update(extra)
    return times


def gpu_timeline(util_pct: float, n: int = 20) -> pd.DataFrame:
    """Two GPUs sampled every 0.1 s: idle start-up and tail (0 %) around ``util_pct``."""
    rows = []
    for gpu in (0, 1):
        for i in range(n):
            util = 0.0 if i < 3 or i >= n - 2 else util_pct
            rows.append({"t_s": 0.1 * i, "gpu": gpu, "util_pct": util, "mem_used_mib": 1000.0})
    return pd.DataFrame(rows)


def kernels(fwd_ms: float, bwd_ms: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": [0, 0, 0, 1],
            "name": ["hashgrid_fwd", "hashgrid_bwd", "mlp_gemm", "hashgrid_bwd"],
            "total_ms": [fwd_ms, bwd_ms / 2, 50.0, bwd_ms / 2],
            "category": ["hash_grid_fwd", "hash_grid_bwd", "mlp", "hash_grid_bwd"],
        }
    )


# ------------------------------------------------------------------------------ data loading
@pytest.mark.parametrize("data_ms, fires", [(9.9, False), (10.1, True)])
def test_data_loading_threshold_edge(data_ms: float, fires: bool) -> None:
    # step = 100 ms: data share = data_ms / 100 around the 10 % threshold
    c = check(inputs({0: {"data": data_ms, "backward": 100.0 - data_ms}}), "data_loading")
    assert c.value == pytest.approx(data_ms / 100)
    assert c.status == ("fired" if fires else "clear")
    if fires:
        d = c.diagnosis
        assert (d.severity, d.threshold) == ("low", data_loading.THRESHOLD)
        assert "10.1%" in d.evidence and "rank 0" in d.evidence and "data.placement=device" in d.knob


@pytest.mark.parametrize("share, severity", [(0.11, "low"), (0.16, "medium"), (0.35, "high")])
def test_severity_grows_with_the_excess_over_the_threshold(share: float, severity: str) -> None:
    [d] = diagnose(inputs({0: {"data": 100 * share, "backward": 100 * (1 - share)}}))
    assert (d.bottleneck, d.severity) == ("data_loading", severity)


def test_the_worst_rank_decides_data_loading() -> None:
    c = check(inputs({0: healthy(), 1: healthy(data=30.0)}), "data_loading")
    assert c.status == "fired" and c.value == pytest.approx(30 / 129)
    assert "rank 1" in c.detail


def test_warmup_interval_is_left_out() -> None:
    # a first interval dominated by data (lazy start-up) does not count
    inp = inputs({0: healthy()}, warmup=healthy(data=500.0))
    assert check(inp, "data_loading").value == pytest.approx(1 / 100)
    assert diagnose(inp) == []


def captured_summary() -> pd.DataFrame:
    return pd.DataFrame({"rank": [0], "step_kind": ["captured"]})


def replay_kernels(drawing_ms: float) -> pd.DataFrame:
    """The traced replays of rank 0: the ray kernel and the rest of a 100 ms window's kernels."""
    return pd.DataFrame({"rank": [0, 0, 0], "name": ["_pinhole_rays_kernel", "_hash_grid_forward_kernel", "gemm"],
                         "total_ms": [drawing_ms, 40.0, 30.0], "category": ["data", "hash_grid_fwd", "mlp"]})


def window(ms: float = 100.0) -> pd.DataFrame:
    return pd.DataFrame({"rank": [0], "window_ms": [ms], "compute_ms": [ms - 5.0], "comm_ms": [0.0],
                         "exposed_comm_ms": [0.0], "overlapped_comm_ms": [0.0], "idle_ms": [5.0]})


@pytest.mark.parametrize("drawing_ms, fires", [(9.9, False), (10.1, True)])
def test_a_captured_step_is_judged_on_the_ray_kernels_of_its_replays(drawing_ms: float, fires: bool) -> None:
    """The sampled eager step spends 11 % drawing (its data phase, which would fire); the replays'
    ray kernel takes drawing_ms of the 100 ms traced window: that decides."""
    eager = healthy(data=11.0, backward=29.0)  # 100 ms: data 11 %
    c = check(inputs({0: eager}, summary=captured_summary(), kernels=replay_kernels(drawing_ms), overlap=window()),
              "data_loading")
    assert c.value == pytest.approx(drawing_ms / 100)
    assert c.status == ("fired" if fires else "clear")
    assert c.detail.startswith("captured CUDA graph, judged on its replays in the torch.profiler window: on rank 0 "
                               f"the ray-drawing kernels (_pinhole_rays_kernel) take {drawing_ms:.3g} ms of the 100 ms "
                               f"traced window ({drawing_ms:.1f}%)"), c.detail
    assert "the data phase of the sampled eager step is not the replays' time" in c.detail


def test_a_captured_step_without_its_replays_kernels_is_not_evaluated_and_says_why() -> None:
    eager = healthy(data=11.0, backward=29.0)
    no_trace = check(inputs({0: eager}, summary=captured_summary()), "data_loading")
    assert no_trace.status == "not_evaluated" and math.isnan(no_trace.value)
    assert no_trace.detail.startswith("the step is a captured CUDA graph: its replays draw the batch with kernels "
                                      "inside the graph, which the phase timers do not see")
    assert "kernels.csv" in no_trace.detail and "not collected" in no_trace.detail
    unnamed = replay_kernels(5.0).assign(category=["other", "hash_grid_fwd", "mlp"])  # rays_backend torch
    c = check(inputs({0: eager}, summary=captured_summary(), kernels=unnamed), "data_loading")
    assert c.status == "not_evaluated" and "names no ray-drawing kernel" in c.detail


def test_compute_underused_of_a_captured_step_is_not_explained_by_its_eager_step_s_data_phase() -> None:
    """Low utilisation on a captured run whose replays draw little: the eager step's 11 % data
    phase no longer explains it away."""
    eager = healthy(data=11.0, backward=29.0)
    inp = inputs({0: eager}, summary=captured_summary(), kernels=replay_kernels(1.0), overlap=window(),
                 gpu_timeline=gpu_timeline(50.0))
    c = check(inp, "compute_underused")
    assert c.status == "fired" and "data 1.0% and exposed communication 0.0% of the step" in c.detail


# ---------------------------------------------------------------------------- load imbalance
def _rank1_compute_for(imbalance: float) -> float:
    """Rank 1's compute ms with rank 0 at 100 ms so that max/mean = ``imbalance``."""
    return 100 * imbalance / (2 - imbalance)


@pytest.mark.parametrize("target, fires", [(1.14, False), (1.16, True)])
def test_load_imbalance_threshold_edge(target: float, fires: bool) -> None:
    slow = _rank1_compute_for(target)
    inp = inputs({0: {"backward": 100.0, "comm": slow - 100.0}, 1: {"backward": slow, "comm": 0.5}})
    c = check(inp, "load_imbalance")
    assert c.value == pytest.approx(target)
    assert c.status == ("fired" if fires else "clear")
    assert "rank 1 slowest" in c.detail
    # the fast rank waits in the collective for the slow one: the evidence names it
    assert "rank 0 longest" in c.detail


def test_load_imbalance_counts_compute_phases_only() -> None:
    # rank 0 waits 50 ms in collectives: a long step, but no compute imbalance
    inp = inputs({0: healthy(comm=50.0, balance=20.0), 1: healthy(comm=1.0)})
    c = check(inp, "load_imbalance")
    assert c.status == "clear" and c.value == pytest.approx(1.0)


def test_load_imbalance_falls_back_to_summary_compute_without_phase_timers() -> None:
    zero = {p: 0.0 for p in PHASES}
    summary = pd.DataFrame({"rank": [0, 1], "compute_ms": [100.0, 200.0]})
    c = check(inputs({0: {**zero, "other": 100.0}, 1: {**zero, "other": 200.0}}, summary=summary), "load_imbalance")
    assert c.status == "fired" and c.value == pytest.approx(200 / 150)
    assert "(summary)" in c.detail


# ----------------------------------------------------------------------------- communication
@pytest.mark.parametrize("comm_ms, fires", [(14.9, False), (15.1, True)])
def test_communication_threshold_edge(comm_ms: float, fires: bool) -> None:
    # rank 0 waits 40 % of its step in the all-reduce (for rank 1); rank 1's exposed share decides
    inp = inputs({0: {"backward": 60.0, "comm": 40.0}, 1: {"backward": 100.0 - comm_ms, "comm": comm_ms}})
    c = check(inp, "communication")
    assert c.value == pytest.approx(comm_ms / 100)
    assert c.status == ("fired" if fires else "clear")
    assert "rank 1" in c.detail


@pytest.mark.parametrize(
    "busbw, knob_part", [(2.0, "NCCL_ALGO"), (20.0, "parallel.compression=bf16")]
)
def test_communication_knob_follows_the_link_use(busbw: float, knob_part: str) -> None:
    summary = pd.DataFrame({"rank": [0, 1], "comm_busbw_gb_per_s": [busbw / 2, busbw]})
    inp = inputs({0: healthy(comm=40.0), 1: healthy(comm=40.0)}, summary=summary, link_busbw_gb_per_s=26.0)
    c = check(inp, "communication")
    assert c.status == "fired"
    assert knob_part in c.diagnosis.knob
    assert f"{busbw:.3g} GB/s of the link's 26 GB/s ({busbw / 26:.0%})" in c.detail


def test_communication_on_gloo_suggests_no_nccl_variable() -> None:
    """gloo ranks (a CPU run) are not told to set NCCL_ALGO: it would do nothing there."""
    from trainer.contract.config import TrainConfig, apply_overrides

    summary = pd.DataFrame({"rank": [0, 1], "comm_busbw_gb_per_s": [1.0, 2.0]})
    per_rank = {0: healthy(comm=40.0), 1: healthy(comm=40.0)}
    for device, backend, nccl in (("cpu", "auto", False), ("cuda", "gloo", False), ("cuda", "auto", True)):
        config = apply_overrides(TrainConfig(), {"training.device": device, "distributed.backend": backend})
        c = check(inputs(per_rank, summary=summary, link_busbw_gb_per_s=26.0, config=config), "communication")
        assert c.status == "fired" and ("NCCL_ALGO" in c.diagnosis.knob) == nccl, (device, backend, c.diagnosis.knob)
        assert "parallel.bucket_mib" in c.diagnosis.knob


def test_communication_without_link_bandwidth_says_so() -> None:
    summary = pd.DataFrame({"rank": [0, 1], "comm_busbw_gb_per_s": [1.0, float("nan")]})
    c = check(inputs({0: healthy(comm=40.0), 1: healthy(comm=40.0)}, summary=summary), "communication")
    assert "link bandwidth unknown" in c.detail and "parallel.mode=subgrid" in c.diagnosis.knob


# ---------------------------------------------------------------------------- compute under-used
@pytest.mark.parametrize("util, fires", [(79.0, True), (81.0, False)])
def test_compute_underused_threshold_edge(util: float, fires: bool) -> None:
    inp = inputs({0: healthy(), 1: healthy()}, gpu_timeline=gpu_timeline(util))
    c = check(inp, "compute_underused")
    # idle start-up and tail samples are left out: the mean is over the active window
    assert c.value == pytest.approx(util)
    assert c.status == ("fired" if fires else "clear")
    if fires:
        assert c.diagnosis.severity == "low" and "training.target_samples_per_step" in c.diagnosis.knob


def test_compute_underused_is_explained_by_data_waits() -> None:
    inp = inputs({0: healthy(data=40.0)}, gpu_timeline=gpu_timeline(40.0))
    checks = {c.bottleneck: c for c in assess(inp)}
    assert checks["compute_underused"].status == "clear" and "explain" in checks["compute_underused"].detail
    assert [d.bottleneck for d in diagnose(inp)] == ["data_loading"]


def test_compute_underused_severity_and_launch_gaps_from_the_trace() -> None:
    overlap = pd.DataFrame(
        {"rank": [0], "window_ms": [100.0], "compute_ms": [55.0], "comm_ms": [0.0], "exposed_comm_ms": [0.0],
         "overlapped_comm_ms": [0.0], "idle_ms": [45.0]}
    )
    c = check(inputs({0: healthy()}, gpu_timeline=gpu_timeline(55.0), overlap=overlap), "compute_underused")
    assert c.status == "fired" and c.diagnosis.severity == "high"  # (100-55)/(100-80) = 2.25
    assert "45% of the traced window" in c.detail


def run_timeline(steady_util: float, gpus: tuple[int, ...] = (0,)) -> pd.DataFrame:
    """One GPU sampled every 0.1 s on the training clock: set-up (t < 0, idle), start-up (0–6 s:
    compilation and capture, 20 %), steady training (6–10 s, ``steady_util``) and the evaluation
    and final snapshot (10–13 s, 5 %); a second GPU of ``gpus`` is never busy."""
    rows = []
    for gpu in gpus:
        for i in range(-20, 130):
            t = 0.1 * i
            util = 0.0 if t <= 0 else 20.0 if t <= 6.0 else steady_util if t <= 10.0 else 5.0
            rows.append({"t_s": round(t, 3), "gpu": gpu, "util_pct": util if gpu == gpus[0] else 0.0})
    return pd.DataFrame(rows)


def steady_windows(rank_from_to: dict[int, tuple[float, float]], records: int = 8) -> pd.DataFrame:
    """Each rank's steady interval records: ``records`` equal windows from ``from`` to ``to`` (s)."""
    rows = []
    for rank, (start, stop) in rank_from_to.items():
        edges = [start + (stop - start) * i / records for i in range(records + 1)]
        rows += [(rank, 100 * (i + 2), a, b) for i, (a, b) in enumerate(zip(edges, edges[1:]))]
    return pd.DataFrame(rows, columns=["rank", "step", "from_s", "to_s"])


@pytest.mark.parametrize("util, fires", [(79.0, True), (81.0, False)])
def test_compute_underused_averages_the_steady_training_window_only(util: float, fires: bool) -> None:
    """Start-up (compilation, capture), evaluation and the final snapshot leave the GPU mostly idle;
    the steady window of the interval records is what the threshold judges."""
    windows = steady_windows({0: (6.0, 10.0)})
    c = check(inputs({0: healthy()}, gpu_timeline=run_timeline(util), steady_windows=windows), "compute_underused")
    assert c.value == pytest.approx(util)
    assert c.status == ("fired" if fires else "clear")
    assert "over the steady training window (t_s 6.0–10.0 s, 40 samples" in c.detail
    # without the window: each GPU's active window, start-up and the tail included, reads far lower
    c = check(inputs({0: healthy()}, gpu_timeline=run_timeline(util)), "compute_underused")
    assert c.status == "fired" and c.value < 50 and "the steady window is unknown" in c.detail


def test_compute_underused_steady_window_of_every_rank_and_only_the_gpus_in_use() -> None:
    # rank 1 became steady 1 s later: the samples before it are not the job's steady state
    windows = steady_windows({0: (6.0, 10.0), 1: (7.0, 10.0)})
    timeline = run_timeline(90.0, gpus=(0, 1))
    timeline.loc[timeline["t_s"].between(6.05, 7.0) & (timeline["gpu"] == 0), "util_pct"] = 10.0
    c = check(inputs({0: healthy(), 1: healthy()}, gpu_timeline=timeline, steady_windows=windows), "compute_underused")
    assert c.value == pytest.approx(90.0) and c.status == "clear"  # GPU 1 never ran a kernel: not the run's
    assert "(GPU 0 90%)" in c.detail
    # windows that hold no sample (shorter than the sampling interval): the active window instead
    c = check(inputs({0: healthy()}, gpu_timeline=run_timeline(90.0),
                     steady_windows=steady_windows({0: (6.01, 6.02)}, records=1)), "compute_underused")
    assert "the steady window is unknown" in c.detail


# ------------------------------------------------------------------------ hash-grid contention
@pytest.mark.parametrize("ratio, fires", [(2.9, False), (3.1, True)])
def test_hash_grid_contention_threshold_edge(ratio: float, fires: bool) -> None:
    c = check(inputs({0: healthy()}, kernels=kernels(10.0, 10.0 * ratio)), "hash_grid_contention")
    assert c.value == pytest.approx(ratio)
    assert c.status == ("fired" if fires else "clear")
    if fires:
        assert "encoding.backend=triton" in c.diagnosis.knob and "31.0 ms vs forward 10.0 ms" in c.detail


def test_kernels_without_hash_grid_categories_are_not_evaluated() -> None:
    k = kernels(10.0, 40.0).assign(category="other")
    c = check(inputs({0: healthy()}, kernels=k), "hash_grid_contention")
    assert c.status == "not_evaluated" and math.isnan(c.value)


# ------------------------------------------------------------------------------ not evaluated
def test_missing_sources_are_not_evaluated_never_guessed() -> None:
    checks = assess(inputs({0: healthy(data=50.0)}))
    status = {c.bottleneck: c.status for c in checks}
    assert [c.bottleneck for c in checks] == list(BOTTLENECKS)
    assert status == {
        "compute_underused": "not_evaluated",  # no NVML samples
        "data_loading": "fired",
        "hash_grid_contention": "not_evaluated",  # no kernel table
        "communication": "not_evaluated",  # one rank
        "load_imbalance": "not_evaluated",
        "wasted_samples": "not_evaluated",  # no occupancy records
        "occupancy_update": "clear",
        "background_collapse": "not_evaluated",  # no eval.json
    }
    assert "one" in checks[3].detail and "NVML" in checks[0].detail


def test_phase_timers_off_leave_the_phase_diagnoses_unevaluated() -> None:
    off = {**{p: 0.0 for p in PHASES}, "other": 100.0}
    checks = assess(inputs({0: off, 1: off}, gpu_timeline=gpu_timeline(30.0)))
    assert {c.status for c in checks} == {"not_evaluated"}
    assert all("phase timers" in c.detail or "kernel" in c.detail or "occupancy fraction" in c.detail
               or "eval.json" in c.detail for c in checks)


def test_diagnoses_table_has_the_schema_columns_and_one_row_per_bottleneck() -> None:
    table = diagnoses_table(assess(inputs({0: healthy(data=50.0)})))
    assert tuple(table.columns) == DIAGNOSES_TABLE
    assert list(table["bottleneck"]) == list(BOTTLENECKS)
    row = table.set_index("bottleneck")
    assert bool(row.at["data_loading", "fired"]) and row.at["data_loading", "severity"] == "high"
    assert math.isnan(row.at["communication", "value"])
    assert row.at["communication", "evidence"].startswith("not evaluated: needs more than one rank")
    assert row.at["communication", "knob"] == "" and not bool(row.at["communication", "fired"])


def test_required_columns_are_part_of_the_schema_tables() -> None:
    assert set(diagnosis_inputs.GPU_TIMELINE_REQUIRED) <= set(GPU_TIMELINE_TABLE)
    assert set(diagnosis_inputs.KERNELS_REQUIRED) <= set(KERNELS_TABLE)
    assert set(diagnosis_inputs.OVERLAP_REQUIRED) <= set(OVERLAP_TABLE)


# -------------------------------------------------------------------------------- bad inputs
def test_bad_inputs_name_the_table_and_the_problem() -> None:
    good = phases_frame({0: healthy()})
    summary = pd.DataFrame({"rank": [0]})
    with pytest.raises(DiagnosisError, match=r"phases: missing columns \['time_ms'\]"):
        ProfileInputs(phases=good.drop(columns="time_ms"), summary=summary)
    with pytest.raises(DiagnosisError, match="phases: unknown phases \\['loading'\\]"):
        ProfileInputs(phases=good.replace({"phase": {"data": "loading"}}), summary=summary)
    with pytest.raises(DiagnosisError, match="duplicate row for rank 0, step 10, phase 'data'"):
        ProfileInputs(phases=pd.concat([good, good.iloc[:1]]), summary=summary)
    with pytest.raises(DiagnosisError, match=r"summary: duplicate ranks \[0\]"):
        ProfileInputs(phases=good, summary=pd.DataFrame({"rank": [0, 0]}))
    with pytest.raises(DiagnosisError, match=r"phases has ranks \[0\] but summary has ranks \[0, 1\]"):
        ProfileInputs(phases=good, summary=pd.DataFrame({"rank": [0, 1]}))
    with pytest.raises(DiagnosisError, match=r"gpu_timeline: missing columns \['util_pct'\]"):
        ProfileInputs(phases=good, summary=summary, gpu_timeline=pd.DataFrame({"t_s": [0.0], "gpu": [0]}))
    with pytest.raises(DiagnosisError, match="link_busbw_gb_per_s: expected a positive number, got 0"):
        ProfileInputs(phases=good, summary=summary, link_busbw_gb_per_s=0)


def test_a_run_without_any_phase_rows_is_not_evaluated_for_lack_of_timers() -> None:
    empty = ProfileInputs(phases=pd.DataFrame(columns=list(PHASES_TABLE)), summary=pd.DataFrame(columns=["rank"]))
    checks = assess(empty)
    assert {c.status for c in checks} == {"not_evaluated"}
    assert diagnose(empty) == []
    by_name = {c.bottleneck: c.detail for c in checks}
    assert by_name["communication"] == by_name["load_imbalance"] == by_name["data_loading"]
    assert "phase timers" in by_name["communication"]


# ------------------------------------------------------------------- occupancy-grid diagnoses
def occupancy(fractions: list[float], samples_per_ray: float) -> pd.DataFrame:
    """Rank 0's records: 1024 rays per step, the given occupied fractions at steps 10, 20, ..."""
    return pd.DataFrame({"step": [10 * (i + 1) for i in range(len(fractions))], "occupancy_fraction": fractions,
                         "rays_per_step": 1024.0, "samples_per_step": 1024.0 * samples_per_ray})


@pytest.mark.parametrize("fractions, per_ray, fires", [
    ([1.0, 0.6, 0.45], 220.0, True),    # the grid keeps empty space: samples marched there
    ([1.0, 0.3, 0.15], 90.0, False),    # the grid carved out the empty space
    ([1.0, 0.6, 0.57], 11.0, False),    # a capture that fills its box: occupied, but few samples per ray
])
def test_wasted_samples_fires_on_a_grid_that_stays_occupied(fractions, per_ray, fires) -> None:
    c = check(inputs({0: healthy()}, occupancy=occupancy(fractions, per_ray)), "wasted_samples")
    assert c.status == ("fired" if fires else "clear")
    assert c.value == pytest.approx(fractions[-1])
    assert f"{per_ray:.0f} samples per ray" in c.detail and f"{fractions[-1]:.1%} occupied at step 30" in c.detail
    if fires:
        assert "training.occupancy_update_every" in c.diagnosis.knob and c.diagnosis.severity == "medium"  # 0.45 / 0.30 = 1.5


def test_occupancy_update_dominating_the_step_fires() -> None:
    c = check(inputs({0: healthy(occupancy_update=60.0)}), "occupancy_update")  # 60 of 160 ms
    assert c.status == "fired" and c.value == pytest.approx(60.0 / 160.0)
    assert "updating the occupancy grid" in c.detail and "occupancy_update_every (higher" in c.diagnosis.knob
    assert check(inputs({0: healthy(occupancy_update=5.0)}), "occupancy_update").status == "clear"


# ------------------------------------------------------------------------ background collapse
def evaluation(mean_db: float, background_db: float, step: int = 300, warmup: int = 256) -> dict:
    return {"step": step, "mean_psnr_db": mean_db, "background_psnr_db": background_db,
            "occupancy_warmup_steps": warmup}


@pytest.mark.parametrize("mean_db, status", [(11.05, "fired"), (10.95, "fired"), (11.2, "clear"), (25.0, "clear")])
def test_background_collapse_threshold_edge(mean_db: float, status: str) -> None:
    c = check(inputs({0: healthy()}, evaluation=evaluation(mean_db, 11.0)), "background_collapse")
    assert c.status == status and c.value == pytest.approx(mean_db - 11.0)
    if status == "fired":
        assert c.diagnosis.severity == "high" and "renders only the background" in c.detail
        assert "training.background=random" in c.diagnosis.knob and "optimizer.learning_rate" in c.diagnosis.knob
        assert "crop" not in c.diagnosis.knob  # no such setting


def test_background_collapse_names_the_cures_the_evaluation_found_for_its_capture() -> None:
    found = {**evaluation(11.0, 11.0), "collapse_cures": "train against the images' white backdrop (...)"}
    c = check(inputs({0: healthy()}, evaluation=found), "background_collapse")
    assert c.status == "fired" and c.diagnosis.knob == found["collapse_cures"]


def test_background_collapse_within_the_warm_up_or_without_the_keys_is_not_evaluated() -> None:
    early = check(inputs({0: healthy()}, evaluation=evaluation(11.0, 11.0, step=200)), "background_collapse")
    assert early.status == "not_evaluated" and "warm-up (256 steps)" in early.detail
    old = check(inputs({0: healthy()}, evaluation={"step": 300, "mean_psnr_db": 11.0}), "background_collapse")
    assert old.status == "not_evaluated" and "background_psnr_db" in old.detail


def test_a_run_directory_with_a_collapsed_eval_json_is_diagnosed(tmp_path) -> None:
    import json

    bad = tmp_path / "eval.json"
    bad.write_text("[1, 2]")
    with pytest.raises(DiagnosisError, match="eval.json: expected a JSON object"):
        dg.evaluation_of_run(tmp_path)
    bad.write_text(json.dumps(evaluation(9.98, 9.98)))
    c = check(inputs({0: healthy()}, evaluation=dg.evaluation_of_run(tmp_path)), "background_collapse")
    assert c.status == "fired"
    assert dg.evaluation_of_run(tmp_path / "missing") is None


# ------------------------------------------------------------------- the run's config
def config(**training: object) -> TrainConfig:
    sets = {f"training.{k}": v for k, v in training.items() if k != "mode"}
    if "mode" in training:
        sets.update({"parallel.mode": training["mode"], "parallel.num_subgrids": 2})
    return apply_overrides(TrainConfig(), sets)


def test_occupancy_update_is_judged_after_the_occupancy_warm_up_only() -> None:
    # log_every 10: the record at step 10 covers steps 0..9 (warm-up of 10 steps), 20 and 30 after it
    cfg = config(occupancy_warmup_steps=10, log_every=10)
    during, after = healthy(occupancy_update=300.0), healthy(occupancy_update=5.0)
    c = check(inputs({0: after}, warmup=during, config=cfg), "occupancy_update")
    assert c.status == "clear" and "after the occupancy warm-up (10 steps)" in c.detail
    assert check(inputs({0: after}, warmup=during), "occupancy_update").status == "clear"  # (steady intervals alone)
    fired = check(inputs({0: healthy(occupancy_update=60.0)}, config=cfg), "occupancy_update")
    assert fired.status == "fired"


def test_a_profile_inside_the_occupancy_warm_up_leaves_both_occupancy_checks_unevaluated() -> None:
    cfg = config(occupancy_warmup_steps=64, log_every=1, occupancy_update_every=16)
    c = check(inputs({0: healthy(occupancy_update=150.0)}, config=cfg,
                     occupancy=occupancy([0.9, 0.8, 0.7], 200.0)), "occupancy_update")  # steps 10..30
    assert c.status == "not_evaluated" and c.diagnosis is None
    row = diagnoses_table([c]).iloc[0]
    assert row["evidence"].startswith("not evaluated: the profile's steps are all inside the occupancy warm-up "
                                      "(training.occupancy_warmup_steps = 64")
    assert "--steps 80 or more" in row["evidence"]  # 64 + one update period of 16
    wasted = check(inputs({0: healthy()}, config=cfg, occupancy=occupancy([0.9, 0.8, 0.7], 200.0)), "wasted_samples")
    assert wasted.status == "not_evaluated" and "judged after the warm-up" in wasted.detail
    assert "--steps 80 or more" in wasted.detail


def test_wasted_samples_says_why_the_occupancy_fraction_is_missing() -> None:
    not_read = check(inputs({0: healthy()}), "wasted_samples")
    assert "were not read" in not_read.detail
    logged_none = occupancy([0.5, 0.5, 0.5], 100.0).assign(occupancy_fraction=float("nan"))
    c = check(inputs({0: healthy()}, occupancy=logged_none), "wasted_samples")
    assert c.status == "not_evaluated" and "carry no occupancy_fraction" in c.detail
    # past the warm-up, the records after it decide
    cfg = config(occupancy_warmup_steps=15, log_every=10)
    past = check(inputs({0: healthy()}, config=cfg, occupancy=occupancy([0.9, 0.2, 0.1], 100.0)), "wasted_samples")
    assert past.status == "clear" and "at step 20)" in past.detail


def test_suggestions_leave_out_the_values_the_run_already_has() -> None:
    summary = pd.DataFrame({"rank": [0, 1], "comm_busbw_gb_per_s": [10.0, 20.0]})
    busy = dict(summary=summary, link_busbw_gb_per_s=26.0)
    per_rank = {0: healthy(comm=40.0), 1: healthy(comm=40.0)}
    knob = check(inputs(per_rank, **busy, config=config(mode="subgrid")), "communication").diagnosis.knob
    assert "parallel.mode=subgrid" not in knob.split(" (the run already uses")[0]
    assert knob.startswith("parallel.compression=bf16 (half the bytes)")
    assert knob.endswith("(the run already uses parallel.mode=subgrid)")
    unknown = check(inputs(per_rank, **busy), "communication").diagnosis.knob
    assert "parallel.mode=subgrid" in unknown  # no config: every suggestion
    everything = apply_overrides(config(mode="subgrid"), {"parallel.compression": "bf16", "parallel.overlap_comm": True})
    nothing = check(inputs(per_rank, **busy, config=everything), "communication").diagnosis.knob
    assert nothing == ("nothing left to suggest: the run already uses parallel.compression=bf16, "
                       "parallel.overlap_comm=true, parallel.mode=subgrid")


def test_the_registry_the_modules_and_the_documented_table_agree() -> None:
    import importlib
    import re

    from ngptune.profiling.diagnoses import DIAGNOSES

    assert BOTTLENECKS == tuple(d.name for d in DIAGNOSES) and len(set(BOTTLENECKS)) == 8
    documented = re.findall(r"^([a-z_]+)\s{2,}", dg.__doc__, flags=re.M)
    assert tuple(documented) == ("bottleneck", *BOTTLENECKS)  # the package docstring's table, row by row
    for diagnosis in DIAGNOSES:
        module = importlib.import_module(diagnosis.check.__module__)
        assert (module.NAME, module.THRESHOLD, module.KNOB) == (diagnosis.name, diagnosis.threshold, diagnosis.knob)


def test_a_value_and_its_threshold_read_in_the_unit_of_their_diagnosis():
    import math

    from ngptune.profiling.diagnoses import diagnosis_measure_text
    from ngptune.profiling.diagnoses.checks import measure_text, plain_number

    assert diagnosis_measure_text("data_loading", 0.11095879662604494) == "11.1 %"
    assert diagnosis_measure_text("compute_underused", 55.0) == "55.0 %"
    assert diagnosis_measure_text("load_imbalance", 1.15) == "1.15×"
    assert diagnosis_measure_text("background_collapse", 0.1) == "0.10 dB"
    assert diagnosis_measure_text("wasted_samples", math.nan) == ""
    assert diagnosis_measure_text("a_future_check", 0.11095879662604494) == "0.111"
    assert plain_number(1083.2) == "1083" and plain_number(0.4281) == "0.428"  # never 1.08e+03
    with pytest.raises(ValueError, match="unit 'x'"):
        measure_text(1.0, "x")

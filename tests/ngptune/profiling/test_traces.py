"""Chrome-trace analysis: interval arithmetic and categories on hand-built traces with known answers,
a real torch.profiler trace, and bad trace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ngptune.profiling.tables import KERNELS_TABLE, OVERLAP_TABLE
from ngptune.profiling.traces import (
    TraceError,
    analyze_traces,
    category_of_name,
    kernel_table,
    load_trace,
    merge_intervals,
    overlap_row,
    overlap_table,
    union_length,
)


def _x(name: str, cat: str, ts: float, dur: float, *, pid: object = 1, tid: object = 1, **args: object) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(path: Path, events: list[dict], rank: int | None = 0, world_size: int = 2) -> Path:
    payload: dict = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        payload["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    path.write_text(json.dumps(payload))
    return path


# --------------------------------------------------------------------------- interval arithmetic


def test_merge_and_union_of_intervals() -> None:
    s, e = merge_intervals([5, 0, 2, 10, 12], [7, 3, 4, 11, 12])
    assert s.tolist() == [0, 5, 10, 12] and e.tolist() == [4, 7, 11, 12]
    assert union_length([0, 1, 2], [10, 3, 4]) == 10
    assert union_length([], []) == 0


def test_overlap_row_known_answer() -> None:
    # compute [0,4) [6,10); comm [3,8) ; window [0,12)
    row = overlap_row(([0, 6], [4, 10]), ([3], [8]), (0, 12))
    assert row == pytest.approx({
        "window_ms": 12e-3, "compute_ms": 8e-3, "comm_ms": 5e-3,
        "overlapped_comm_ms": 3e-3, "exposed_comm_ms": 2e-3, "idle_ms": 2e-3,
    })


def test_overlap_row_clips_to_the_window() -> None:
    row = overlap_row(([-5], [5]), ([8], [20]), (0, 10))
    assert row["compute_ms"] == pytest.approx(5e-3) and row["comm_ms"] == pytest.approx(2e-3)
    assert row["idle_ms"] == pytest.approx(3e-3)


# --------------------------------------------------------------------------- hand-built GPU trace


def _gpu_trace_events() -> list[dict]:
    """Host thread 1: phase ranges, operators, launches; thread 2: autograd backward; GPU stream 7
    compute, stream 20 NCCL."""
    host = [
        _x("phase:field_forward", "user_annotation", 0, 100),
        _x("aten::mul", "cpu_op", 10, 20, **{"Sequence number": 7}),
        _x("cudaLaunchKernel", "cuda_runtime", 12, 5, correlation=3),
        _x("hash_fwd_op", "cpu_op", 40, 10),
        _x("cudaLaunchKernel", "cuda_runtime", 41, 5, correlation=1),
        _x("aten::mm", "cpu_op", 60, 10),
        _x("cudaLaunchKernel", "cuda_runtime", 61, 5, correlation=2),
        _x("phase:backward", "user_annotation", 200, 100),
        # CUDA runs the backward on its autograd device thread, outside the phase ranges
        _x("autograd::engine::evaluate_function: MulBackward0", "cpu_op", 210, 30, tid=2, **{"Sequence number": 7}),
        _x("cudaLaunchKernel", "cuda_runtime", 215, 5, tid=2, correlation=4),
        _x("phase:comm", "user_annotation", 300, 50),
        _x("c10d::allreduce_", "cpu_op", 305, 10),
        _x("cudaLaunchKernel", "cuda_runtime", 306, 5, correlation=5),
        _x("phase:data", "user_annotation", 500, 20),
        _x("cudaMemcpyAsync", "cuda_runtime", 505, 5, correlation=6),
    ]
    gpu = [
        _x("_hash_grid_forward_kernel", "kernel", 1000, 100, pid=0, tid=7, correlation=1),
        _x("ampere_sgemm_64x64_nn", "kernel", 1100, 50, pid=0, tid=7, correlation=2),
        _x("elementwise_kernel<mul>", "kernel", 1150, 50, pid=0, tid=7, correlation=3),
        _x("elementwise_kernel<mul>", "kernel", 1300, 100, pid=0, tid=7, correlation=4),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 1350, 150, pid=0, tid=20, correlation=5),
        _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 1600, 10, pid=0, tid=7, correlation=6),
    ]
    return host + gpu


def test_gpu_trace_overlap_known_answer(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path / "rank1.json", _gpu_trace_events(), rank=1))
    assert trace.rank == 1 and trace.world_size == 2 and trace.has_gpu
    (row,) = overlap_table(trace).to_dict("records")
    # window [1000, 1610); compute [1000,1200) [1300,1400) [1600,1610) = 310 µs; comm [1350,1500) = 150 µs;
    # overlap [1350,1400) = 50 µs; busy union = 200 + 200 + 10 = 410 µs -> idle 200 µs
    assert row == pytest.approx({
        "rank": 1, "window_ms": 0.610, "compute_ms": 0.310, "comm_ms": 0.150,
        "exposed_comm_ms": 0.100, "overlapped_comm_ms": 0.050, "idle_ms": 0.200,
    })
    assert list(overlap_table(trace).columns) == list(OVERLAP_TABLE)


def test_gpu_trace_kernel_categories(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path / "rank0.json", _gpu_trace_events(), rank=0))
    table = kernel_table(trace)
    assert list(table.columns) == list(KERNELS_TABLE)
    got = {(r["name"], r["category"]): (r["calls"], r["total_ms"]) for r in table.to_dict("records")}
    assert got == pytest.approx({
        ("_hash_grid_forward_kernel", "hash_grid_fwd"): (1, 0.100),  # by its name
        ("ampere_sgemm_64x64_nn", "mlp"): (1, 0.050),  # by its name
        ("elementwise_kernel<mul>", "hash_grid_fwd"): (1, 0.050),  # launched in field_forward
        ("elementwise_kernel<mul>", "hash_grid_bwd"): (1, 0.100),  # backward of a field_forward op
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "comm"): (1, 0.150),
        ("Memcpy DtoH (Device -> Pinned)", "other"): (1, 0.010),  # launched in the data phase
    })
    assert table["share_pct"].sum() == pytest.approx(100.0)
    assert table.iloc[0]["total_ms"] == pytest.approx(0.150)  # sorted by time
    nccl = table[table["category"] == "comm"].iloc[0]
    assert nccl["share_pct"] == pytest.approx(100 * 150 / 460)
    assert nccl["mean_us"] == pytest.approx(150.0)


# --------------------------------------------------------------------------- hand-built CPU trace


def test_cpu_trace_top_level_ops_and_gloo_overlap(tmp_path: Path) -> None:
    events = [
        _x("phase:field_forward", "user_annotation", 0, 100, tid=1),
        _x("aten::index", "cpu_op", 0, 40, tid=1),
        _x("aten::empty", "cpu_op", 5, 5, tid=1),  # nested: not a top-level operator
        _x("aten::linear", "cpu_op", 40, 30, tid=1),
        _x("phase:comm", "user_annotation", 100, 100, tid=1),
        _x("c10d::allreduce_", "cpu_op", 100, 10, tid=1),
        _x("gloo:all_reduce", "user_annotation", 105, 60, tid=9),  # gloo's worker thread
        _x("aten::copy_", "cpu_op", 110, 20, tid=9),  # inside the gloo range: part of comm
        _x("phase:optimizer", "user_annotation", 200, 50, tid=1),
        _x("aten::add_", "cpu_op", 150, 60, tid=1),  # overlaps the gloo range from 150 on
    ]
    trace = load_trace(_write(tmp_path / "rank0.json", events, rank=0))
    assert not trace.has_gpu
    table = kernel_table(trace)
    got = {(r["name"], r["category"]): (r["calls"], r["total_ms"]) for r in table.to_dict("records")}
    assert got == pytest.approx({
        ("aten::index", "hash_grid_fwd"): (1, 0.040),
        ("aten::linear", "mlp"): (1, 0.030),
        ("c10d::allreduce_", "comm"): (1, 0.010),
        ("gloo:all_reduce", "comm"): (1, 0.060),
        ("aten::add_", "comm"): (1, 0.060),  # issued inside phase:comm
    })
    # compute = index [0,40) + linear [40,70) = 70 µs (aten::add_ counts as comm: issued in the comm phase)
    # comm = [100,110) ∪ [105,165) ∪ [150,210) = [100,210) = 110 µs; window [0,210)
    (row,) = overlap_table(trace).to_dict("records")
    assert row == pytest.approx({
        "rank": 0, "window_ms": 0.210, "compute_ms": 0.070, "comm_ms": 0.110,
        "exposed_comm_ms": 0.110, "overlapped_comm_ms": 0.0, "idle_ms": 0.030,
    })


def test_category_names() -> None:
    assert category_of_name("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "comm"
    assert category_of_name("gloo:all_gather") == "comm"
    assert category_of_name("aten::broadcast_tensors") is None
    assert category_of_name("_hash_grid_forward_kernel") == "hash_grid_fwd"
    assert category_of_name("kernel_grid_backward<float, 3, 2>") == "hash_grid_bwd"
    assert category_of_name("autograd::engine::evaluate_function: MmBackward0") == "mlp"
    assert category_of_name("sm90_xmma_gemm_f32f32_tf32f32") == "mlp"
    assert category_of_name("march_rays_kernel") == "march"
    assert category_of_name("_pinhole_rays_kernel") == "data"  # a captured step's replays: only the name places it
    assert category_of_name("aten::mul") is None


# --------------------------------------------------------------------------- a real torch.profiler trace


def test_real_torch_profiler_trace_of_phases(tmp_path: Path) -> None:
    torch.manual_seed(0)
    table = torch.randn(4096, 2, requires_grad=True)
    weight = torch.randn(16, 32, requires_grad=True)
    index = torch.randint(0, 4096, (2048, 8))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            with torch.profiler.record_function("phase:field_forward"):
                features = table[index].reshape(2048, 16)
                out = torch.relu(features @ weight)
            with torch.profiler.record_function("phase:backward"):
                out.sum().backward()
    path = tmp_path / "rank0.pt.trace.json"
    prof.export_chrome_trace(str(path))
    with pytest.raises(TraceError, match="no rank information"):
        load_trace(path)  # a single-process trace is never silently rank 0
    trace = load_trace(path, rank=0)
    kernels = kernel_table(trace)
    cats = kernels.groupby("category")["calls"].sum().to_dict()
    assert cats.get("hash_grid_fwd", 0) >= 2  # the gather (aten::index / reshape) in field_forward
    assert cats.get("mlp", 0) >= 4  # aten::matmul/mm and relu, twice
    assert cats.get("hash_grid_bwd", 0) >= 2  # IndexBackward of the forward gather
    (row,) = overlap_table(trace).to_dict("records")
    assert row["comm_ms"] == 0.0 and row["compute_ms"] > 0
    assert row["compute_ms"] + row["idle_ms"] == pytest.approx(row["window_ms"])
    kernels2, overlaps = analyze_traces([trace])
    assert len(overlaps) == 1 and len(kernels2) == len(kernels)


# --------------------------------------------------------------------------- bad input


def test_truncated_trace_names_the_file_and_position(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.json", _gpu_trace_events())
    cut = tmp_path / "rank0.pt.trace.json"
    cut.write_text(good.read_text()[: len(good.read_text()) // 2])
    with pytest.raises(TraceError, match=rf"{cut}: truncated or corrupt Chrome trace \(invalid JSON at line 1"):
        load_trace(cut)


def test_bad_traces_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="trace file not found"):
        load_trace(tmp_path / "absent.json")
    not_trace = tmp_path / "list.json"
    not_trace.write_text("[1, 2]")
    with pytest.raises(TraceError, match=r"list.json: not a torch.profiler Chrome trace \(no 'traceEvents' list\)"):
        load_trace(not_trace)
    no_rank = _write(tmp_path / "norank.json", _gpu_trace_events(), rank=None)
    with pytest.raises(TraceError, match=r"norank.json: no rank information"):
        load_trace(no_rank)
    with pytest.raises(TraceError, match=r"trace of rank 1, expected rank 0"):
        load_trace(_write(tmp_path / "r1.json", _gpu_trace_events(), rank=1), rank=0)
    empty = _write(tmp_path / "empty.json", [{"ph": "M", "name": "process_name", "pid": 1}])
    with pytest.raises(TraceError, match=r"empty.json: no complete \('X'\) events"):
        load_trace(empty)
    bad_ts = _write(tmp_path / "badts.json", [{"ph": "X", "name": "k", "ts": "soon", "dur": 1}])
    with pytest.raises(TraceError, match="badts.json: complete event without a numeric"):
        load_trace(bad_ts)


def test_two_traces_of_one_rank_are_an_error(tmp_path: Path) -> None:
    a = load_trace(_write(tmp_path / "a.json", _gpu_trace_events(), rank=0))
    b = load_trace(_write(tmp_path / "b.json", _gpu_trace_events(), rank=0))
    with pytest.raises(TraceError, match=r"b.json: a second trace of rank 0"):
        analyze_traces([a, b])

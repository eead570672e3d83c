"""torch.profiler Chrome traces → the kernel and overlap tables of a profile (DESIGN.md §4).

The trainer writes one Chrome trace per rank for the ``profile.trace_steps`` window
(:meth:`trainer.contract.rundir.RunDir.trace_path`). This module reads them with ``json`` + pandas:

* :func:`load_trace` → :class:`Trace` (the complete ``"X"`` events of one rank as a DataFrame);
* :func:`kernel_table` → ``kernels.csv`` rows (:data:`ngptune.profiling.tables.KERNELS_TABLE`): GPU kernels,
  memcpys and memsets of a GPU trace, or the top-level operators of a CPU-only trace, grouped by
  name and category, with their time in the window;
* :func:`overlap_table` → one ``overlap.csv`` row (:data:`ngptune.profiling.tables.OVERLAP_TABLE`): busy
  time of computation and communication and how much of the communication is hidden behind
  computation, by interval arithmetic (:func:`union_length`).

Holistic Trace Analysis is not used (see :data:`HTA_NOT_USED`).

Categories (:data:`CATEGORIES`) come from the kernel or operator name first (:func:`category_of_name`),
then from the trainer phase the work was issued in (the ``phase:<name>`` ranges the phase timer
records while the window is open): work issued in ``field_forward`` is hash-grid forward, an
autograd backward node of such work (matched through the autograd sequence number, on whichever
thread the backward runs) is hash-grid backward, ``march``/``occupancy_update`` is marching,
``comm`` is communication, ``data`` is drawing the next batch (in a captured step's graph replays,
which have no phase ranges, only the ray kernel's name places it). On the CPU aten operators
carry no kernel names, so there the phase rule does most of the work and the split between the
hash grid and the small elementwise ops around it (SH encoding, activations) is approximate.
GPU kernels take the category of the CPU operator that launched them (through the CUDA runtime
call's ``correlation`` id) unless their own name places them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ngptune.errors import NgptuneError
from ngptune.profiling.tables import KERNELS_TABLE, OVERLAP_TABLE

CATEGORIES: tuple[str, ...] = ("hash_grid_fwd", "hash_grid_bwd", "mlp", "comm", "march", "data", "other")
"""Kernel categories; ``data``: drawing the next batch (the ray kernel by its name, work issued in the data phase)."""

HTA_NOT_USED = (
    "not used: HolisticTraceAnalysis 0.5.0 imports and runs next to pandas 3, but it requires "
    "jupyterlab and pytest at run time (about 40 extra packages) and only analyses GPU kernels: "
    "on CPU-only traces its kernel breakdown is empty and its overlap NaN; kernels.csv and "
    "overlap.csv come from ngptune's own Chrome-trace reader (pandas, ngptune.profiling.traces)"
)

GPU_EVENT_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
_PHASE_PREFIX = "phase:"
_BACKWARD_NODE_PREFIX = "autograd::engine::evaluate_function:"

_COMM_RE = re.compile(
    r"nccl|gloo|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|"
    r"ProcessGroup",
    re.IGNORECASE,
)
_HASH_GRID_RE = re.compile(r"hash_?grid|kernel_grid|grid_encod", re.IGNORECASE)
_BACKWARD_RE = re.compile(r"backward|bwd", re.IGNORECASE)
_MARCH_RE = re.compile(r"march|occupancy|ray_aabb", re.IGNORECASE)
_DATA_RE = re.compile(r"pinhole_rays", re.IGNORECASE)  # trainer/data/triton_rays.py: the batch's rays and colours
_MLP_RE = re.compile(
    r"gemm|gemv|cutlass|cublas|xmma|fully_?fused|"
    r"aten::(?:mm|addmm|bmm|matmul|linear|relu|threshold_backward)\b|"
    r"\b(?:Mm|Addmm|Bmm|Linear|Relu)Backward",
    re.IGNORECASE,
)
# Category of work issued inside a trainer phase when the name does not place it.
_PHASE_CATEGORY = {"field_forward": "hash_grid_fwd", "compact": "hash_grid_fwd", "march": "march", "occupancy_update": "march",
                   "comm": "comm", "data": "data"}
# Category of the backward of work whose forward ran in a phase.
_BACKWARD_OF_PHASE = {"field_forward": "hash_grid_bwd", "march": "march", "occupancy_update": "march"}


class TraceError(NgptuneError):
    """A Chrome trace that cannot be analysed: names the file and the problem."""


@dataclasses.dataclass(frozen=True)
class Trace:
    """The complete events of one rank's Chrome trace.

    Attributes:
        path: the trace file.
        rank: the rank that wrote it.
        world_size: ranks in the job (``distributedInfo.world_size``), None for a single process.
        events: one row per complete (``"ph": "X"``) event: ``name`` str, ``cat`` str, ``pid``
            and ``tid`` str, ``ts_us`` and ``end_us`` float64 (µs, trace clock), ``dur_us``
            float64, ``correlation`` float64 (NaN when absent), ``seq`` float64 (autograd
            sequence number, NaN when absent), ``is_gpu`` bool (a kernel, memcpy or memset).
    """

    path: Path
    rank: int
    world_size: int | None
    events: pd.DataFrame

    @property
    def has_gpu(self) -> bool:
        """Whether the trace holds GPU activity (else it is a CPU-only trace)."""
        return bool(self.events["is_gpu"].any())


def load_trace(path: Path, *, rank: int | None = None) -> Trace:
    """Read one torch.profiler Chrome trace.

    Args:
        path: a ``*.pt.trace.json`` file (``torch.profiler.profile.export_chrome_trace``).
        rank: the rank the caller expects. Distributed traces name their rank in
            ``distributedInfo.rank``; a single-process trace has none, and the caller must then
            say which rank it is (never assumed).

    Raises:
        TraceError: the file is missing, truncated or not JSON; has no ``traceEvents`` list or no
            complete events; carries no rank information and ``rank`` is None; or names another
            rank than ``rank``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: trace file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}: truncated or corrupt Chrome trace (invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: not a torch.profiler Chrome trace (no 'traceEvents' list)")
    trace_rank, world_size = _rank_info(path, data, rank)
    events = _complete_events(path, data["traceEvents"])
    return Trace(path=path, rank=trace_rank, world_size=world_size, events=events)


def _rank_info(path: Path, data: dict[str, Any], expected: int | None) -> tuple[int, int | None]:
    info = data.get("distributedInfo")
    if isinstance(info, dict) and "rank" in info:
        try:
            found = int(info["rank"])
            world_size = int(info["world_size"]) if info.get("world_size") is not None else None
        except (TypeError, ValueError):
            raise TraceError(f"{path}: distributedInfo has a non-integer rank or world_size: {info!r}") from None
        if expected is not None and found != expected:
            raise TraceError(f"{path}: trace of rank {found}, expected rank {expected}")
        return found, world_size
    if expected is None:
        raise TraceError(
            f"{path}: no rank information (no 'distributedInfo.rank'); a single-process trace needs its rank given"
        )
    return expected, None


def _complete_events(path: Path, raw: list[Any]) -> pd.DataFrame:
    rows = []
    for event in raw:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        try:
            ts = float(event["ts"])
            dur = float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{path}: complete event without a numeric 'ts'/'dur': {str(event)[:200]}") from None
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        rows.append((
            str(event.get("name", "")), str(event.get("cat", "")), str(event.get("pid", "")),
            str(event.get("tid", "")), ts, dur, args.get("correlation"), args.get("Sequence number"),
        ))
    if not rows:
        raise TraceError(f"{path}: no complete ('X') events in the trace")
    frame = pd.DataFrame(rows, columns=["name", "cat", "pid", "tid", "ts_us", "dur_us", "correlation", "seq"])
    frame["correlation"] = pd.to_numeric(frame["correlation"], errors="coerce").astype("float64")
    frame["seq"] = pd.to_numeric(frame["seq"], errors="coerce").astype("float64")
    frame["end_us"] = frame["ts_us"] + frame["dur_us"]
    frame["is_gpu"] = frame["cat"].isin(GPU_EVENT_CATEGORIES)
    return frame


# ---------------------------------------------------------------------------------------------
# interval arithmetic
# ---------------------------------------------------------------------------------------------


def merge_intervals(starts: Iterable[float], ends: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted disjoint intervals.

    Args:
        starts, ends: equal-length sequences (any unit); ``end >= start``.

    Returns:
        (starts, ends) float64 arrays of the disjoint intervals covering the union, sorted.
    """
    s = np.asarray(list(starts) if not isinstance(starts, (np.ndarray, pd.Series)) else starts, dtype=np.float64)
    e = np.asarray(list(ends) if not isinstance(ends, (np.ndarray, pd.Series)) else ends, dtype=np.float64)
    if s.shape != e.shape:
        raise ValueError(f"starts and ends differ in length: {s.shape} vs {e.shape}")
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.empty(s.size, dtype=bool)
    first[0] = True
    first[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(first)
    return s[heads], np.maximum.reduceat(e, heads)


def union_length(starts: Iterable[float], ends: Iterable[float]) -> float:
    """Length of the union of intervals [start, end) (overlaps counted once)."""
    s, e = merge_intervals(starts, ends)
    return float(np.sum(e - s))


def clip_intervals(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi); those outside it become empty (length 0)."""
    s = np.clip(np.asarray(starts, dtype=np.float64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.float64), lo, hi)
    return s, e


def overlap_row(
    compute: tuple[np.ndarray, np.ndarray], comm: tuple[np.ndarray, np.ndarray], window: tuple[float, float]
) -> dict[str, float]:
    """Busy and overlapped time of compute and communication intervals in a window (µs in, ms out).

    With K the union of the compute intervals, C that of the communication intervals and W the
    window (all clipped to W):

        compute_ms = |K|, comm_ms = |C|, overlapped_comm_ms = |C ∩ K| = |K| + |C| − |K ∪ C|,
        exposed_comm_ms = |C| − |C ∩ K|, idle_ms = |W| − |K ∪ C|, window_ms = |W|.
    """
    lo, hi = window
    ks, ke = clip_intervals(*compute, lo, hi)
    cs, ce = clip_intervals(*comm, lo, hi)
    k = union_length(ks, ke)
    c = union_length(cs, ce)
    both = union_length(np.concatenate([ks, cs]), np.concatenate([ke, ce]))
    overlapped = max(k + c - both, 0.0)
    return {
        "window_ms": (hi - lo) / 1e3,
        "compute_ms": k / 1e3,
        "comm_ms": c / 1e3,
        "exposed_comm_ms": (c - overlapped) / 1e3,
        "overlapped_comm_ms": overlapped / 1e3,
        "idle_ms": max((hi - lo) - both, 0.0) / 1e3,
    }


# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------


def category_of_name(name: str) -> str | None:
    """The category a kernel or operator name alone places it in, or None when it does not.

    >>> category_of_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    'comm'
    >>> category_of_name("_hash_grid_backward_kernel")
    'hash_grid_bwd'
    >>> category_of_name("aten::linear")
    'mlp'
    >>> category_of_name("aten::index") is None
    True
    """
    if _COMM_RE.search(name):
        return "comm"
    if _HASH_GRID_RE.search(name):
        return "hash_grid_bwd" if _BACKWARD_RE.search(name) else "hash_grid_fwd"
    if _MARCH_RE.search(name):
        return "march"
    if _DATA_RE.search(name):
        return "data"
    if _MLP_RE.search(name):
        return "mlp"
    return None


def _enclosing(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.Series:
    """For each event, the index (in ``ranges``) of the range on the same pid/tid that contains
    its start, or -1. Ranges of one thread must not overlap each other."""
    result = pd.Series(-1, index=events.index, dtype="int64")
    if events.empty or ranges.empty:
        return result
    left = events[["pid", "tid", "ts_us"]].reset_index(names="event_idx").sort_values("ts_us", kind="stable")
    right = ranges[["pid", "tid", "ts_us", "end_us"]].reset_index(names="range_idx")
    right = right.rename(columns={"ts_us": "range_ts"}).sort_values("range_ts", kind="stable")
    joined = pd.merge_asof(left, right, left_on="ts_us", right_on="range_ts", by=["pid", "tid"], direction="backward")
    inside = joined["range_idx"].notna() & (joined["ts_us"] <= joined["end_us"])
    hits = joined[inside]
    result.loc[hits["event_idx"].to_numpy()] = hits["range_idx"].astype("int64").to_numpy()
    return result


def _top_level(frame: pd.DataFrame) -> pd.Series:
    """Mask of events not nested in an earlier, longer event of the same pid/tid."""
    ordered = frame.sort_values(["pid", "tid", "ts_us", "dur_us"], ascending=[True, True, True, False], kind="stable")
    keys = [ordered["pid"], ordered["tid"]]
    reach = ordered.groupby(keys, sort=False)["end_us"].cummax()
    previous = reach.groupby(keys, sort=False).shift().fillna(-np.inf)
    return (ordered["ts_us"] >= previous).reindex(frame.index)


@dataclasses.dataclass(frozen=True)
class _Classified:
    """Events of interest with their category: the units of the kernel table and of the overlap."""

    units: pd.DataFrame  # name, category, ts_us, end_us, dur_us
    window: tuple[float, float]


def _classify(trace: Trace) -> _Classified:
    ev = trace.events
    cpu = ev[~ev["is_gpu"]]
    phases = cpu[(cpu["cat"] == "user_annotation") & cpu["name"].str.startswith(_PHASE_PREFIX)]
    phase_of = _enclosing(cpu, phases).map(lambda i: phases.at[i, "name"][len(_PHASE_PREFIX):] if i >= 0 else None)

    comm_named = cpu["name"].map(category_of_name) == "comm"
    containers = cpu[(cpu["cat"] == "cpu_op") | ((cpu["cat"] == "user_annotation") & comm_named)]
    top = containers[_top_level(containers)]

    # forward phase of each autograd sequence number: the backward node carries the same number
    # (and may run on another thread, e.g. CUDA's autograd device thread, outside any phase range)
    backward_node = cpu["name"].str.startswith(_BACKWARD_NODE_PREFIX) | cpu["name"].str.contains("Backward", regex=False)
    forward = cpu[(cpu["cat"] == "cpu_op") & cpu["seq"].notna() & ~backward_node & (phase_of != "backward")]
    forward_phase = phase_of[forward.index].groupby(forward["seq"]).first()

    def top_category(idx: Any) -> str:
        name = top.at[idx, "name"]
        by_name = category_of_name(name)
        if by_name is not None:
            return by_name
        if name.startswith(_BACKWARD_NODE_PREFIX):
            seq = top.at[idx, "seq"]
            origin = forward_phase.get(seq) if not np.isnan(seq) else None
            return _BACKWARD_OF_PHASE.get(origin, "other")
        return _PHASE_CATEGORY.get(phase_of.get(idx), "other")

    top_cat = pd.Series({idx: top_category(idx) for idx in top.index}, dtype="object")

    if not trace.has_gpu:
        units = top.assign(category=top_cat.reindex(top.index))
        window = (float(units["ts_us"].min()), float(units["end_us"].max()))
        return _Classified(units[["name", "category", "ts_us", "end_us", "dur_us"]], window)

    gpu = ev[ev["is_gpu"]]
    launches = cpu[cpu["cat"].isin(_LAUNCH_CATEGORIES) & cpu["correlation"].notna()]
    launch_top = _enclosing(launches, top)
    launcher_cat = pd.Series(
        [top_cat.get(i, "other") if i >= 0 else "other" for i in launch_top], index=launches["correlation"].to_numpy()
    )
    launcher_cat = launcher_cat[~launcher_cat.index.duplicated()]

    def gpu_category(name: str, correlation: float) -> str:
        by_name = category_of_name(name)
        if by_name is not None:
            return by_name
        if np.isnan(correlation):
            return "other"
        return launcher_cat.get(correlation, "other")

    cats = [gpu_category(n, c) for n, c in zip(gpu["name"], gpu["correlation"])]
    units = gpu.assign(category=cats)
    window = (float(units["ts_us"].min()), float(units["end_us"].max()))
    return _Classified(units[["name", "category", "ts_us", "end_us", "dur_us"]], window)


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------


def kernel_table(trace: Trace) -> pd.DataFrame:
    """``kernels.csv`` rows of one rank (:data:`ngptune.profiling.tables.KERNELS_TABLE`).

    GPU traces: every kernel, memcpy and memset; CPU-only traces: the top-level operators
    (``cpu_op`` events not nested in another operator) and the communication ranges (``gloo:*``).
    Rows are grouped by (name, category): ``calls``, ``total_ms`` (sum of durations in the trace
    window), ``mean_us`` and ``share_pct`` (of the rank's total), sorted by ``total_ms``.
    """
    units = _classify(trace).units
    grouped = units.groupby(["name", "category"], sort=False)["dur_us"].agg(["count", "sum"]).reset_index()
    total_us = float(grouped["sum"].sum())
    table = pd.DataFrame({
        "rank": trace.rank,
        "name": grouped["name"],
        "category": grouped["category"],
        "calls": grouped["count"].astype("int64"),
        "total_ms": grouped["sum"] / 1e3,
        "mean_us": grouped["sum"] / grouped["count"],
        "share_pct": 100.0 * grouped["sum"] / total_us if total_us > 0 else 0.0,
    })
    table = table.sort_values(["total_ms", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return table[list(KERNELS_TABLE)]


def overlap_table(trace: Trace) -> pd.DataFrame:
    """One ``overlap.csv`` row (:data:`ngptune.profiling.tables.OVERLAP_TABLE`) for the trace's rank.

    GPU traces: compute = GPU events that are not communication, comm = communication kernels
    (NCCL), window = first to last GPU event. CPU-only traces: compute = top-level operators
    that are not communication, comm = the communication ranges and operators (gloo, c10d),
    window = first to last of those. The arithmetic is :func:`overlap_row`.
    """
    classified = _classify(trace)
    units = classified.units
    is_comm = (units["category"] == "comm").to_numpy()
    compute = (units["ts_us"].to_numpy()[~is_comm], units["end_us"].to_numpy()[~is_comm])
    comm = (units["ts_us"].to_numpy()[is_comm], units["end_us"].to_numpy()[is_comm])
    row = {"rank": trace.rank, **overlap_row(compute, comm, classified.window)}
    return pd.DataFrame([row], columns=list(OVERLAP_TABLE))


def analyze_traces(traces: Iterable[Trace]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kernel and overlap tables of several ranks (one trace per rank).

    Raises:
        TraceError: two traces of the same rank.
    """
    kernels, overlaps, seen = [], [], {}
    for trace in traces:
        if trace.rank in seen:
            raise TraceError(f"{trace.path}: a second trace of rank {trace.rank} (first: {seen[trace.rank]})")
        seen[trace.rank] = trace.path
        kernels.append(kernel_table(trace))
        overlaps.append(overlap_table(trace))
    if not kernels:
        return pd.DataFrame(columns=list(KERNELS_TABLE)), pd.DataFrame(columns=list(OVERLAP_TABLE))
    return pd.concat(kernels, ignore_index=True), pd.concat(overlaps, ignore_index=True)

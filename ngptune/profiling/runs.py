"""Phase and summary tables of a trainer run directory, from every rank's ``metrics.jsonl``, and
the one warm-up rule every analysis of those records follows (:func:`steady_records`,
:func:`drop_warmup`).

Columns are the schema's (:data:`ngptune.profiling.tables.PHASES_TABLE`, :data:`ngptune.profiling.tables.SUMMARY_TABLE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd

from ngptune.errors import NgptuneError
from ngptune.profiling.tables import COMPUTE_PHASES, PHASES_TABLE, SUMMARY_TABLE, WAIT_PHASES
from trainer.contract import PHASES, RunDir, read_metrics


WARMUP_INTERVALS = 1
"""Logged intervals at the start of each rank's records that are warm-up: the first interval holds
one-off costs (lazy initialisation, the first occupancy update, allocator growth, the occupancy
warm-up's short steps). They are left out when the rank has later records (:func:`steady_records`)."""

_Record = TypeVar("_Record")


def steady_records(records: Sequence[_Record]) -> Sequence[_Record]:
    """One rank's records (in step order) without the first :data:`WARMUP_INTERVALS`, or all of them
    when the rank has no later record.

    The profile's summary and diagnoses (:func:`drop_warmup`) and the sweep objectives
    (:mod:`ngptune.tuning.objectives`) all leave out warm-up through this function.

    >>> steady_records([10, 20, 30]), steady_records([10])
    ([20, 30], [10])
    """
    return records[WARMUP_INTERVALS:] if len(records) > WARMUP_INTERVALS else records


def drop_warmup(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``table`` without each rank's warm-up steps (:func:`steady_records` of the rank's
    logged steps in order).

    Args:
        table: at least ``rank`` and ``step`` columns; a step may have several rows (one per phase,
            as in ``phases.csv``), they are kept or dropped together.

    Returns:
        The kept rows, in their original order within each rank, ranks ascending.
    """
    kept = []
    for _, group in table.groupby("rank", sort=True):
        steps = steady_records(sorted(group["step"].unique()))
        kept.append(group[group["step"].isin(steps)])
    return pd.concat(kept) if kept else table


class ProfileError(NgptuneError):
    """A run directory or profile folder that cannot be analysed (names the path and the problem)."""


def metrics_frame(run_dir: Path) -> pd.DataFrame:
    """All ranks' metrics records of ``run_dir`` as one DataFrame (one row per record).

    Raises:
        ProfileError: when no rank wrote a metrics file.
        trainer.contract.metrics.MetricsError: for a corrupt metrics file (names file and line).
    """
    rd = RunDir(run_dir)
    ranks = rd.metrics_ranks()
    if not ranks:
        raise ProfileError(f"{rd.root}: no metrics.jsonl (the run wrote no metrics record)")
    frames = []
    for rank in ranks:
        records = [r for r in read_metrics(rd.metrics_path(rank)) if "eval_psnr_db" not in r or "step_time_ms" in r]
        frame = pd.DataFrame.from_records(records)
        if frame.empty:
            continue
        if (frame["rank"] != rank).any():
            raise ProfileError(f"{rd.metrics_path(rank)}: records name rank {sorted(set(frame['rank']))}, expected {rank}")
        frames.append(frame)
    if not frames:
        raise ProfileError(f"{rd.root}: metrics files hold no records")
    return pd.concat(frames, ignore_index=True)


def phases_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Long table (rank, step, phase, time_ms): each record's mean time per step of every phase,
    and "other" (step time not covered by a named phase)."""
    columns = [f"{p}_ms" for p in (*PHASES, "other") if f"{p}_ms" in metrics.columns]
    long = metrics.melt(id_vars=["rank", "step"], value_vars=columns, var_name="phase", value_name="time_ms")
    long["phase"] = long["phase"].str.removesuffix("_ms")
    long = long.dropna(subset=["time_ms"])
    return long[list(PHASES_TABLE)].sort_values(["rank", "step"], kind="stable").reset_index(drop=True)


def _mean(frame: pd.DataFrame, column: str) -> float:
    return float(frame[column].mean()) if column in frame.columns and frame[column].notna().any() else float("nan")


CAPTURED = "captured"
"""``step_kind`` of the step replayed from a CUDA graph (``trainer.train.capture``): each logging
interval's first step runs eagerly with the phase timers and its phase columns are that step's
times; the other steps are replays, which have no phases."""


def step_kinds(metrics: pd.DataFrame) -> pd.Series:
    """Each rank's training step (``step_kind`` of its first record that has one: ``captured``,
    ``fixed`` or ``dynamic``), indexed by rank; ``""`` for a rank whose records do not say."""
    ranks = sorted(int(r) for r in metrics["rank"].unique())
    kinds = pd.Series("", index=pd.Index(ranks, name="rank"), dtype=object)
    if "step_kind" in metrics.columns:
        named = metrics.dropna(subset=["step_kind"]).sort_values(["rank", "step"], kind="stable")
        for rank, kind in named.groupby("rank")["step_kind"].first().items():
            kinds[int(rank)] = str(kind)
    return kinds


def summary_table(metrics: pd.DataFrame, *, steady: bool = True) -> pd.DataFrame:
    """One row per rank: means over the run's interval records (:data:`ngptune.profiling.tables.SUMMARY_TABLE`).

    Args:
        metrics: from :func:`metrics_frame` (one record per ``training.log_every`` steps).
        steady: leave out each rank's warm-up records (:func:`drop_warmup`).

    ``step_time_ms`` is the mean of the records' ``step_time_ms`` (every step of each interval,
    graph replays included; the intervals are equally long but for a last, shorter one) and
    ``steps_per_s`` its inverse. ``compute_ms`` sums the compute phases
    (:data:`ngptune.profiling.tables.COMPUTE_PHASES`), ``wait_ms`` the collective phases
    (:data:`ngptune.profiling.tables.WAIT_PHASES`); with ``data_ms``, ``occupancy_update_ms`` and
    ``other_ms`` (the step time outside every named phase) they add up to ``step_time_ms``.
    ``imbalance`` is max/mean of the ranks'
    ``compute_ms`` (DESIGN.md §4, diagnosis 5), the same value on every row. With a captured step
    (``step_kind`` :data:`CAPTURED`) the phase columns are those of each interval's sampled eager
    step, so ``phase_coverage`` (named phases / step time) and ``other_ms`` are left empty (NaN):
    that step is not the replayed step the step time measures.
    """
    rows = []
    kinds = step_kinds(metrics)
    for rank, frame in (drop_warmup(metrics) if steady else metrics).groupby("rank", sort=True):
        step_ms = _mean(frame, "step_time_ms")
        named = sum(_mean(frame, f"{p}_ms") for p in PHASES if f"{p}_ms" in frame.columns)
        compute = sum(_mean(frame, f"{p}_ms") for p in COMPUTE_PHASES if f"{p}_ms" in frame.columns)
        wait = sum(_mean(frame, f"{p}_ms") for p in WAIT_PHASES if f"{p}_ms" in frame.columns)
        data, occupancy = (_mean(frame, f"{p}_ms") if f"{p}_ms" in frame.columns else 0.0
                           for p in ("data", "occupancy_update"))
        kind = kinds.get(int(rank), "")
        rows.append({
            "rank": int(rank),
            "steps": int(frame["step"].max()),
            "step_kind": kind,
            "step_time_ms": step_ms,
            "steps_per_s": 1e3 / step_ms if step_ms > 0 else float("nan"),
            "compute_ms": compute,
            "wait_ms": wait,
            "data_ms": data,
            "occupancy_update_ms": occupancy,
            "other_ms": step_ms - named if kind != CAPTURED else float("nan"),
            "throughput_samples_per_s": _mean(frame, "throughput_samples_per_s"),
            "rays_per_s": _mean(frame, "rays_per_s"),
            "rank_throughput_samples_per_s": _mean(frame, "rank_throughput_samples_per_s"
                                                   if "rank_throughput_samples_per_s" in frame.columns
                                                   else "throughput_samples_per_s"),
            "rank_rays_per_s": _mean(frame, "rank_rays_per_s" if "rank_rays_per_s" in frame.columns else "rays_per_s"),
            "imbalance": float("nan"),
            "comm_ms": _mean(frame, "comm_ms"),
            "comm_busbw_gb_per_s": _mean(frame, "comm_busbw_gb_per_s"),
            "phase_coverage": named / step_ms if step_ms > 0 and kind != CAPTURED else float("nan"),
        })
    table = pd.DataFrame(rows, columns=list(SUMMARY_TABLE))
    computes = table["compute_ms"]
    if len(table) and computes.mean() > 0:
        table["imbalance"] = float(computes.max() / computes.mean())
    return table

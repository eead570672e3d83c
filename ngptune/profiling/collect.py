"""A finished (or crashed) trainer run + the NVML samples → the CSV tables of a profile folder.

The profile folder (:class:`ProfileDir`, the one place its file names are spelled)::

    PROFILE/
      run/               the trainer's run directory (trainer.contract.rundir.RunDir)
      trainer.log        the trainer command's stdout and stderr
      phases.csv         PHASES_TABLE          summary.csv    SUMMARY_TABLE
      gpu_timeline.csv   GPU_TIMELINE_TABLE    kernels.csv    KERNELS_TABLE
      overlap.csv        OVERLAP_TABLE         diagnoses.csv  DIAGNOSES_TABLE   (ngptune.profiling.tables)
      sources.json       {source: {"status": "ok"|"missing"|"failed", "detail": str}} for SOURCES
      failure.json       {"reason", "log_path", "exit_code"} when the run failed
      bench_comm.csv, bench_comm/   the link measurement (ngptune.profiling.link) and its rank logs
      nsys/, nsys_*.csv, ncu/, ncu_hashgrid.csv   Nsight output when requested and available
      report.html        written by ngptune.reporting.profile_report

Phase tables come from every rank's metrics file (:mod:`ngptune.profiling.runs`): one record per
``training.log_every`` steps, whose times and rates cover every step of its interval and whose
phase columns, with a captured step, are those of the interval's sampled eager step. Records of
the torch.profiler window carry its overhead (recording every operator, and exporting the trace
before the step after the window), so ``phases.csv`` and ``summary.csv`` leave out the records
whose interval holds a step A..B of a window ``A:B`` (:func:`window_records`; a record's ``step``
counts the steps done when it was written); the summary also leaves out each rank's warm-up record
(:func:`ngptune.profiling.runs.drop_warmup`) and carries the link's busbw
(``link_busbw_gb_per_s``, the same on every row). ``gpu_timeline.csv``'s ``t_s`` is on the
training clock: seconds since the training loop started (:func:`align_gpu_timeline`), the clock of
:attr:`Collected.steady_windows` (:func:`steady_windows`), the intervals of the records the summary
covers, over which the compute_underused diagnosis averages the GPU utilisation. Missing sources
are recorded as such; only a completed run's broken inputs are failures.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ngptune.errors import NgptuneError, USER_ERRORS
from ngptune.profiling import SourceStatus
from ngptune.profiling.runs import CAPTURED, ProfileError, drop_warmup, metrics_frame, phases_table, step_kinds, summary_table
from ngptune.profiling.traces import HTA_NOT_USED, TraceError, analyze_traces, load_trace
from ngptune.profiling.tables import GPU_TIMELINE_TABLE, KERNELS_TABLE, OVERLAP_TABLE, PHASES_TABLE, SUMMARY_TABLE
from trainer.contract import PHASES, TRAIN_START_KEY, MetricsError, RunDir, atomic_write_text, load_config

SOURCES: tuple[str, ...] = ("phase_timers", "nvml", "torch_profiler", "hta", "nsys", "ncu", "link_busbw")


@dataclasses.dataclass(frozen=True)
class ProfileDir:
    """Paths inside one profile folder (nothing is created until asked)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def run(self) -> RunDir:
        return RunDir(self.root / "run")

    @property
    def trainer_log_path(self) -> Path:
        return self.root / "trainer.log"

    def table_path(self, name: str) -> Path:
        """``<name>.csv`` for name in phases, gpu_timeline, kernels, overlap, diagnoses, summary."""
        if name not in ("phases", "gpu_timeline", "kernels", "overlap", "diagnoses", "summary"):
            raise KeyError(f"unknown profile table {name!r}")
        return self.root / f"{name}.csv"

    @property
    def sources_path(self) -> Path:
        return self.root / "sources.json"

    @property
    def failure_path(self) -> Path:
        return self.root / "failure.json"

    @property
    def report_path(self) -> Path:
        return self.root / "report.html"

    @property
    def nsys_report_base(self) -> Path:
        """``nsys profile -o`` target (nsys appends ``.nsys-rep``)."""
        return self.root / "nsys" / "report"

    @property
    def nsys_csv_prefix(self) -> Path:
        """``nsys stats --output`` prefix: files ``nsys_<report>.csv``."""
        return self.root / "nsys"

    @property
    def ncu_report_base(self) -> Path:
        return self.root / "ncu" / "hashgrid"

    @property
    def ncu_run(self) -> RunDir:
        return RunDir(self.root / "ncu" / "run")

    @property
    def ncu_csv_path(self) -> Path:
        return self.root / "ncu_hashgrid.csv"

    @property
    def bench_comm_csv_path(self) -> Path:
        """The link measurement's table (``ngptune bench-comm`` columns)."""
        return self.root / "bench_comm.csv"

    @property
    def bench_comm_dir(self) -> Path:
        """The link measurement's launch folder (rank logs)."""
        return self.root / "bench_comm"


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """How the trainer command ended.

    Attributes:
        completed: it exited 0 and its run finished.
        exit_code: the command's exit status.
        reason: why it failed (empty when completed).
        log_path: the log that shows it (the failed rank's log, else trainer.log).
    """

    completed: bool
    exit_code: int
    reason: str = ""
    log_path: Path | None = None


@dataclasses.dataclass
class Collected:
    """The tables of a profile and how each source fared (``None``: not collected).

    ``steady_windows``: :func:`steady_windows` on the GPU timeline's clock, or None when there is
    no GPU timeline or the metrics could not be read.
    """

    phases: pd.DataFrame
    summary: pd.DataFrame
    gpu_timeline: pd.DataFrame
    kernels: pd.DataFrame | None
    overlap: pd.DataFrame | None
    sources: dict[str, SourceStatus]
    steady_windows: pd.DataFrame | None = None


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))


def check_metrics_steps(run: RunDir, metrics: pd.DataFrame, log_every: int, *, completed: bool) -> None:
    """Every rank logged every interval: steps increase, no gap wider than ``log_every``, and in a
    completed run every rank of the world size reached the same last step.

    Raises:
        MetricsError: naming the rank's metrics file and the missing or repeated steps.
        ProfileError: a completed run in which a rank wrote no metrics file.
    """
    last_steps = {}
    for rank, frame in metrics.groupby("rank", sort=True):
        path = run.metrics_path(int(rank))
        previous = 0
        for step in frame["step"].astype(int):
            if step <= previous:
                raise MetricsError(f"{path}: step {step} after step {previous} (steps must increase)")
            if step - previous > log_every:
                raise MetricsError(
                    f"{path}: missing steps: no record between step {previous} and step {step} "
                    f"(training.log_every={log_every})"
                )
            previous = step
        last_steps[int(rank)] = previous
    if completed:
        world_size = int(metrics["world_size"].max())
        absent = sorted(set(range(world_size)) - set(last_steps))
        if absent:
            raise ProfileError(
                f"{run.root}: world size {world_size} but no metrics from ranks {absent} "
                f"({', '.join(str(run.metrics_path(r)) for r in absent)})"
            )
        final = max(last_steps.values())
        for rank, step in last_steps.items():
            if step != final:
                raise MetricsError(f"{run.metrics_path(rank)}: missing steps: last record at step {step}, other ranks reach {final}")


def window_records(metrics: pd.DataFrame, window: tuple[int, int] | None) -> pd.Series:
    """Which records (a boolean Series on ``metrics``' index) cover a step of the torch.profiler
    window ``(A, B)``: its steps A..B-1, or step B, before which the trace is exported.

    A record at ``step`` s whose rank's previous record is at step p (0 for the first) covers the
    steps p..s-1 (0-based indices): it is in the window when s >= A + 1 and p <= B. With one
    record per step these are the records of steps A+1..B+1.

    >>> frame = pd.DataFrame({"rank": [0] * 5, "step": [100, 200, 300, 400, 500]})
    >>> window_records(frame, (201, 206)).tolist()
    [False, False, True, False, False]
    """
    if window is None:
        return pd.Series(False, index=metrics.index)
    start, stop = window
    ordered = metrics.sort_values(["rank", "step"], kind="stable")
    previous = ordered.groupby("rank")["step"].shift(fill_value=0)
    return ((ordered["step"] >= start + 1) & (previous <= stop)).reindex(metrics.index)


def measured_records(metrics: pd.DataFrame, window: tuple[int, int] | None) -> pd.DataFrame:
    """The records the phase and summary tables are made of: those outside the torch.profiler
    window (:func:`window_records`), or all of them when every record is in it."""
    in_window = window_records(metrics, window)
    return metrics[~in_window] if (~in_window).any() else metrics


def steady_windows(metrics: pd.DataFrame, window: tuple[int, int] | None, zero_unix_s: float) -> pd.DataFrame:
    """When each rank trained in the steady state: the interval of every record that the summary
    means cover (:func:`measured_records` after each rank's warm-up,
    :func:`ngptune.profiling.runs.drop_warmup`), on the clock whose 0 is ``zero_unix_s``.

    A record's interval runs from its rank's previous record to itself (``unix_time_s``, the
    wall clock the trainer writes into each record). Start-up, the warm-up interval, the
    torch.profiler window with its export, and everything after the last record (final snapshot,
    evaluation) lie outside every interval.

    Args:
        metrics: every rank's records (:func:`ngptune.profiling.runs.metrics_frame`).
        window: the torch.profiler window ``(A, B)``, or None.
        zero_unix_s: wall clock (s) of the clock's 0 (the GPU timeline's: the training loop's start).

    Returns:
        Columns ``rank``, ``step``, ``from_s``, ``to_s`` (s), one row per steady record; empty when
        the records carry no ``unix_time_s`` (a trainer older than the column).
    """
    columns = ["rank", "step", "from_s", "to_s"]
    if "unix_time_s" not in metrics.columns:
        return pd.DataFrame(columns=columns)
    ordered = metrics.sort_values(["rank", "step"], kind="stable")
    unix = pd.to_numeric(ordered["unix_time_s"], errors="coerce")
    spans = pd.DataFrame({"rank": ordered["rank"].astype(int), "step": ordered["step"].astype(int),
                          "from_s": unix.groupby(ordered["rank"]).shift() - zero_unix_s, "to_s": unix - zero_unix_s})
    steady = drop_warmup(spans.loc[measured_records(ordered, window).index])
    return steady.dropna(subset=["from_s", "to_s"]).reset_index(drop=True)[columns]


def collect_phases(
    run: RunDir, *, trace_window: tuple[int, int] | None, completed: bool
) -> tuple[pd.DataFrame, pd.DataFrame, SourceStatus]:
    """``phases.csv`` and ``summary.csv`` tables of the run (module docstring) and the
    ``phase_timers`` source status.

    Raises:
        MetricsError, ProfileError: a completed run's metrics are missing, corrupt or have
            missing steps (naming the file). A failed run's missing metrics are a missing source.
    """
    try:
        metrics = metrics_frame(run.root)
        log_every = load_config(run.config_path).training.log_every
        check_metrics_steps(run, metrics, log_every, completed=completed)
    except USER_ERRORS as exc:
        if completed:
            raise
        return _empty(PHASES_TABLE), _empty(SUMMARY_TABLE), SourceStatus("missing", f"the run failed: {exc}")
    in_window = window_records(metrics, trace_window)
    measured = measured_records(metrics, trace_window)
    phases = phases_table(measured)
    summary = summary_table(measured)
    summary["steps"] = summary["rank"].map(metrics.groupby("rank")["step"].max()).astype("int64")  # steps trained
    kinds = step_kinds(metrics)  # the first record after start-up says it, and may lie in the window
    summary["step_kind"] = summary["rank"].map(kinds)
    for column in ("phase_coverage", "other_ms"):  # parts of the replayed step, which has no phases
        summary[column] = summary[column].where(summary["step_kind"] != CAPTURED)
    ranks = sorted(int(r) for r in metrics["rank"].unique())
    detail = (
        f"{len(metrics)} metrics records of rank(s) {', '.join(map(str, ranks))}, "
        f"steps {int(metrics['step'].min())}..{int(metrics['step'].max())}"
    )
    if in_window.any() and (~in_window).any():
        a, b = trace_window  # type: ignore[misc]
        left_out = metrics.loc[in_window, "step"].astype(int)
        records = (f"the record of step {left_out.min()} (torch.profiler window {a}:{b} and its export) is"
                   if left_out.nunique() == 1 else
                   f"the records of steps {left_out.min()}..{left_out.max()} (torch.profiler window {a}:{b} and its export) are")
        detail += f"; {records} left out"
    elif in_window.any():
        detail += "; every record lies in the torch.profiler window: phase times include its overhead"
    named = measured[[f"{p}_ms" for p in PHASES]].fillna(0.0).to_numpy().sum()
    if named == 0:
        return phases, summary, SourceStatus("missing", f"phase timers were off (profile.phase_timers=false): {detail}")
    captured = summary["step_kind"] == CAPTURED
    if captured.any():
        detail += (f"; captured step (rank(s) {', '.join(str(int(r)) for r in summary.loc[captured, 'rank'])}): "
                   "the phases are those of the sampled eager step of each interval, its first step, run "
                   "eagerly with the phase timers (a graph replay has none)")
    coverage = ", ".join(f"rank {int(r)} {c:.1%}" for r, c, k in
                         zip(summary["rank"], summary["phase_coverage"], summary["step_kind"]) if k != CAPTURED)
    if coverage:
        detail += f"; named phases cover {coverage} of the step time"
    return phases, summary, SourceStatus("ok", detail)


def collect_traces(
    run: RunDir, *, world_size: int, trace_window: tuple[int, int] | None, completed: bool
) -> tuple[pd.DataFrame | None, pd.DataFrame | None, SourceStatus]:
    """``kernels.csv`` and ``overlap.csv`` tables from every rank's Chrome trace
    (:meth:`RunDir.trace_path`) and the ``torch_profiler`` source status.

    A single-process run's trace carries no rank and is rank 0; a distributed run's traces must
    name their rank (``distributedInfo``), matching their file.

    Raises:
        TraceError: a completed run's trace is corrupt, lacks rank information, or a rank's
            trace is missing.
    """
    if trace_window is None:
        return None, None, SourceStatus("missing", "no torch.profiler window (profile.trace_steps unset)")
    window_txt = f"{trace_window[0]}:{trace_window[1]}"
    paths = {rank: run.trace_path(rank) for rank in range(world_size)}
    present = {rank: p for rank, p in paths.items() if p.is_file()}
    if not present:
        why = "the run ended before its trace window" if not completed else "no rank wrote its trace"
        status = SourceStatus("missing" if not completed else "failed", f"{why} ({window_txt}; expected {paths[0]})")
        return None, None, status
    try:
        absent = sorted(set(paths) - set(present))
        if absent and completed:
            raise TraceError(f"{paths[absent[0]]}: trace file not found (ranks with traces: {sorted(present)})")
        traces = []
        for rank, path in present.items():
            trace = load_trace(path, rank=0) if world_size == 1 else load_trace(path)
            if trace.rank != rank:
                raise TraceError(f"{path}: trace of rank {trace.rank}, expected rank {rank}")
            traces.append(trace)
        kernels, overlap = analyze_traces(traces)
    except TraceError as exc:
        if completed:
            raise
        return None, None, SourceStatus("missing", f"the run failed: {exc}")
    device = "GPU kernels" if any(t.has_gpu for t in traces) else "CPU operators (no GPU activity)"
    detail = f"Chrome traces of rank(s) {', '.join(map(str, sorted(present)))} for steps {window_txt}: {device}"
    if len(present) < world_size:
        detail += f"; ranks {sorted(set(paths) - set(present))} wrote none before the run failed"
    return kernels, overlap, SourceStatus("ok", detail)


def collect(
    profile: ProfileDir,
    *,
    world_size: int,
    trace_window: tuple[int, int] | None,
    outcome: RunOutcome,
    gpu_timeline: pd.DataFrame,
    extra_sources: dict[str, SourceStatus],
    gpu_timeline_origin_unix_s: float | None = None,
    link_busbw_gb_per_s: float | None = None,
) -> Collected:
    """Build every table of the profile from its run directory.

    Args:
        profile: the profile folder; its ``run`` holds the trainer's run directory.
        world_size: ranks the trainer was started with.
        trace_window: the ``(A, B)`` steps of ``profile.trace_steps``, or None.
        outcome: how the trainer command ended.
        gpu_timeline: the NVML samples (``gpu_timeline.csv`` rows; empty without a GPU), ``t_s``
            counted from ``gpu_timeline_origin_unix_s``.
        extra_sources: statuses of the sources collected outside the run directory (``nvml``,
            ``nsys``, ``ncu``, ``link_busbw``).
        gpu_timeline_origin_unix_s: wall clock (s) of the samples' ``t_s = 0``
            (:attr:`ngptune.profiling.nvml.NvmlSampler.origin_unix_s`); the table is moved to the
            training clock (:func:`align_gpu_timeline`) and the ``nvml`` detail names the clock.
        link_busbw_gb_per_s: the link's all-reduce busbw (GB/s) for the summary's
            ``link_busbw_gb_per_s``, or None (unknown: the column stays empty).

    A source that breaks on a completed run is recorded as ``failed`` with the error (which
    names the file and the problem); on a failed run, what is missing is ``missing``.
    """
    run = profile.run
    sources: dict[str, SourceStatus] = dict(extra_sources)
    try:
        phases, summary, sources["phase_timers"] = collect_phases(
            run, trace_window=trace_window, completed=outcome.completed
        )
    except USER_ERRORS as exc:
        phases, summary = _empty(PHASES_TABLE), _empty(SUMMARY_TABLE)
        sources["phase_timers"] = SourceStatus("failed", str(exc))
    try:
        kernels, overlap, sources["torch_profiler"] = collect_traces(
            run, world_size=world_size, trace_window=trace_window, completed=outcome.completed
        )
    except USER_ERRORS as exc:
        kernels, overlap = None, None
        sources["torch_profiler"] = SourceStatus("failed", str(exc))
    sources["hta"] = SourceStatus("missing", HTA_NOT_USED)
    summary["link_busbw_gb_per_s"] = math.nan if link_busbw_gb_per_s is None else float(link_busbw_gb_per_s)
    timeline, clock = align_gpu_timeline(gpu_timeline.reindex(columns=list(GPU_TIMELINE_TABLE)),
                                         gpu_timeline_origin_unix_s, run)
    if clock and "nvml" in sources:
        sources["nvml"] = SourceStatus(sources["nvml"].status, f"{sources['nvml'].detail}; {clock}")
    windows = None
    if len(timeline) and gpu_timeline_origin_unix_s is not None:
        start = train_start_unix_s(run)  # the timeline's 0, as align_gpu_timeline put it
        try:
            windows = steady_windows(metrics_frame(run.root), trace_window,
                                     start if start is not None else gpu_timeline_origin_unix_s)
        except USER_ERRORS:
            windows = None  # the phase_timers source says why
    return Collected(phases, summary, timeline, kernels, overlap,
                     {name: sources[name] for name in SOURCES if name in sources}, windows)


def train_start_unix_s(run: RunDir) -> float | None:
    """Wall clock (s) at which the run's training loop started (``status.json``
    :data:`TRAIN_START_KEY`), or None when the run ended before it (or it is not a number)."""
    start = (run.read_status() or {}).get(TRAIN_START_KEY)
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
        return None
    return float(start)


def align_gpu_timeline(
    timeline: pd.DataFrame, origin_unix_s: float | None, run: RunDir
) -> tuple[pd.DataFrame, str]:
    """Put NVML samples on the training clock: ``t_s`` in seconds since the training loop started.

    The sampler's ``t_s`` counts from its reader's opening, whose wall clock is
    ``origin_unix_s`` (just before the trainer command starts); the trainer writes the wall clock
    of its training loop's start into ``status.json`` (:data:`TRAIN_START_KEY`). Then::

        t_s ← t_s + origin_unix_s − train_start_unix_s

    so samples of the set-up (imports, scene loading, rendezvous) have ``t_s < 0``. The metrics'
    ``wall_time_s`` counts only the time inside timed steps: a record lies later on this clock
    than its ``wall_time_s`` by the start-up steps (kernel compilation, graph capture; seconds) and
    the logging between steps. Its own time on this clock is its ``unix_time_s`` minus the
    training start (:func:`steady_windows`).

    Args:
        timeline: ``gpu_timeline.csv`` rows (may be empty).
        origin_unix_s: wall clock (s) of the rows' ``t_s = 0``, or None (unknown).
        run: the trainer's run directory.

    Returns:
        ``(table, clock)``: the shifted table (a copy) and a sentence naming its clock for the
        ``nvml`` source; ``clock`` is empty for an empty table. Without a training start in
        ``status.json`` (the run ended before its loop) or without ``origin_unix_s``, the table is
        unshifted and ``clock`` says that ``t_s`` counts from the sampler's start.
    """
    if timeline.empty:
        return timeline, ""
    start = train_start_unix_s(run)
    if origin_unix_s is None or start is None:
        why = f"{run.status_path} holds no {TRAIN_START_KEY} (the run ended before training)"
        if origin_unix_s is None:
            why = "the sampler's wall clock is unknown"
        return timeline, f"t_s: seconds since the sampler started, just before the trainer command ({why})"
    shifted = timeline.copy()
    offset_s = float(origin_unix_s) - float(start)
    shifted["t_s"] = pd.to_numeric(shifted["t_s"]) + offset_s
    return shifted, (f"t_s: seconds since the training loop started ({TRAIN_START_KEY} in status.json; "
                     f"the sampler started at t_s = {offset_s:.2f} s)")


def read_csv_table(path: Path, columns: Sequence[str], error: type[NgptuneError], **read_options: Any) -> pd.DataFrame:
    """A CSV table of a profile that must have ``columns`` (others may follow).

    Args:
        path: the file (must exist).
        columns: the required column names.
        error: the exception class to raise.
        read_options: passed to :func:`pandas.read_csv` (e.g. ``dtype=str``).

    Raises:
        error: naming the file: empty without a header, not a readable CSV table, or missing columns.
    """
    try:
        table = pd.read_csv(path, **read_options)
    except pd.errors.EmptyDataError:
        raise error(f"{path}: empty file without a header (truncated?)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not a readable CSV table ({exc})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise error(f"{path}: missing columns {missing}")
    return table


def write_tables(profile: ProfileDir, collected: Collected, diagnoses: pd.DataFrame) -> None:
    """Write the CSV tables and ``sources.json`` (header-only CSVs for sources not collected)."""
    profile.root.mkdir(parents=True, exist_ok=True)
    tables = {
        "phases": collected.phases,
        "summary": collected.summary,
        "gpu_timeline": collected.gpu_timeline,
        "kernels": collected.kernels if collected.kernels is not None else _empty(KERNELS_TABLE),
        "overlap": collected.overlap if collected.overlap is not None else _empty(OVERLAP_TABLE),
        "diagnoses": diagnoses,
    }
    for name, frame in tables.items():
        frame.to_csv(profile.table_path(name), index=False)
    write_json(profile.sources_path, {name: status.to_json() for name, status in collected.sources.items()})


def write_failure(profile: ProfileDir, outcome: RunOutcome) -> None:
    """``failure.json``: why the run failed and which log shows it."""
    write_json(profile.failure_path, {
        "reason": outcome.reason,
        "log_path": str(outcome.log_path) if outcome.log_path is not None else None,
        "exit_code": outcome.exit_code,
    })


def write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")

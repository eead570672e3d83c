"""The profile report: one self-contained ``report.html`` from the CSV tables of a profile folder
(DESIGN.md §4, §6).

Reads what ``ngptune profile`` wrote (:class:`ngptune.profiling.collect.ProfileDir` layout):
``phases.csv``, ``summary.csv``, ``gpu_timeline.csv``, ``kernels.csv``, ``overlap.csv``,
``diagnoses.csv`` (columns in :mod:`ngptune.profiling.tables`), ``sources.json``, ``failure.json`` and the
run's metrics (for the emulated-interconnect label). Every file may be missing or hold a header
only: its section then says so and why, from ``sources.json``; the rest of the report is complete.
A file that is present but unreadable (not CSV, columns missing, bad JSON) is an error naming it.

Sections: run failure banner and emulated-interconnect label (when they apply), per-rank summary,
step-time breakdown (stacked phases incl. "other", coverage; with a captured step, the phases of
each interval's sampled eager step, and the section says so), per-rank imbalance, GPU timelines
(NVML; time since the training loop started), top kernels, communication vs computation overlap,
the gradient all-reduce's achieved busbw vs the link's (``summary.csv`` ``comm_busbw_gb_per_s``
and ``link_busbw_gb_per_s``, the link's provenance from ``sources.json`` ``link_busbw``),
diagnoses and checks, data sources.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ngptune.errors import NgptuneError
from ngptune.profiling.collect import ProfileDir, read_csv_table
from ngptune.profiling.diagnoses import LINK_UNDERUSED_FRACTION, SEVERITIES, diagnosis_measure_text, rank_phase_means
from ngptune.profiling.runs import CAPTURED
from ngptune.reporting.html import Section, figure_html, render_page, table_html, text_html, transposed
from ngptune.profiling.tables import (
    COMPUTE_PHASES,
    DIAGNOSES_TABLE,
    GPU_TIMELINE_TABLE,
    KERNELS_TABLE,
    OVERLAP_TABLE,
    PHASES_TABLE,
    SUMMARY_TABLE,
    WAIT_PHASES,
)
from trainer.contract import PHASES, MetricsError, atomic_write_text, read_metrics

__all__ = ["ProfileReportError", "write_profile_report"]

#: The profile tables, their columns and the ``sources.json`` entries that produce them.
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "phases": (PHASES_TABLE, ("phase_timers",)),
    "summary": (SUMMARY_TABLE, ("phase_timers",)),
    "gpu_timeline": (GPU_TIMELINE_TABLE, ("nvml",)),
    "kernels": (KERNELS_TABLE, ("torch_profiler", "hta")),
    "overlap": (OVERLAP_TABLE, ("torch_profiler", "hta")),
    "diagnoses": (DIAGNOSES_TABLE, ()),
}
#: Coverage target of the named phases (the profiler's quality bar): the rest of the step is "other".
COVERAGE_TARGET = 0.90
TOP_KERNELS = 15

#: gpu_timeline.csv series drawn over time: (title, unit, columns).
_TIMELINE_PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("utilisation", "%", ("util_pct",)),
    ("memory used", "MiB", ("mem_used_mib",)),
    ("power", "W", ("power_w",)),
    ("SM clock", "MHz", ("sm_clock_mhz",)),
    ("temperature", "°C", ("temp_c",)),
    ("PCIe", "KiB/s", ("pcie_tx_kib_per_s", "pcie_rx_kib_per_s")),
    ("NVLink", "KiB/s", ("nvlink_tx_kib_per_s", "nvlink_rx_kib_per_s")),
)
_SEVERITY_ORDER = {severity: i for i, severity in enumerate(SEVERITIES)}


class ProfileReportError(NgptuneError):
    """A file of the profile folder is present but unreadable; names the file and the problem."""


@dataclasses.dataclass
class _Profile:
    """What the profile folder holds. A table is None when its file is missing."""

    root: Path
    tables: dict[str, pd.DataFrame | None]
    sources: dict[str, dict[str, str]] | None
    failure: dict[str, Any] | None
    emulated_interconnect: str | None

    def has(self, name: str) -> bool:
        table = self.tables[name]
        return table is not None and len(table) > 0

    def absent(self, name: str) -> str:
        """Why table ``name`` has no rows: the file's state and its sources' statuses."""
        path = f"{name}.csv"
        state = "missing" if self.tables[name] is None else "empty (header only)"
        reasons = []
        for source in TABLES[name][1]:
            entry = (self.sources or {}).get(source)
            if entry is not None:
                reasons.append(f"{source}: {entry['status']} — {entry['detail']}")
        if not reasons:
            reasons.append("sources.json does not say why" if TABLES[name][1] else "not written")
        return f"{path} is {state}; " + "; ".join(reasons)


# ------------------------------------------------------------------------------------ reading
def _read_table(path: Path, columns: tuple[str, ...]) -> pd.DataFrame | None:
    return read_csv_table(path, columns, ProfileReportError) if path.is_file() else None


def _read_json(path: Path) -> Any | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProfileReportError(f"{path}: not valid JSON ({exc})") from None


def _read_sources(path: Path) -> dict[str, dict[str, str]] | None:
    sources = _read_json(path)
    if sources is None:
        return None
    if not isinstance(sources, dict):
        raise ProfileReportError(f"{path}: expected an object of sources, got {type(sources).__name__}")
    for name, entry in sources.items():
        if not isinstance(entry, dict) or not {"status", "detail"} <= set(entry):
            raise ProfileReportError(f"{path}: source {name!r} must be an object with 'status' and 'detail'")
    return sources


def _emulated_interconnect(profile: ProfileDir, summary: pd.DataFrame | None) -> str | None:
    """The interconnect the run emulated (metrics column ``emulated_interconnect``), or None."""
    values: list[str] = []
    if summary is not None and "emulated_interconnect" in summary.columns:
        values = [str(v) for v in summary["emulated_interconnect"].dropna()]
    if not values:
        try:
            records = read_metrics(profile.run.metrics_path(0))
        except MetricsError:
            records = []
        values = [r["emulated_interconnect"] for r in records if r.get("emulated_interconnect")]
    emulated = sorted({v for v in values if v not in ("", "none")})
    return ", ".join(emulated) if emulated else None


def _load(root: Path) -> _Profile:
    profile = ProfileDir(root)
    if not profile.root.is_dir():
        raise ProfileReportError(f"{profile.root}: profile folder not found")
    tables = {name: _read_table(profile.table_path(name), columns) for name, (columns, _) in TABLES.items()}
    failure = _read_json(profile.failure_path)
    if failure is not None and not isinstance(failure, dict):
        raise ProfileReportError(f"{profile.failure_path}: expected an object with 'reason' and 'log_path'")
    return _Profile(
        root=profile.root,
        tables=tables,
        sources=_read_sources(profile.sources_path),
        failure=failure,
        emulated_interconnect=_emulated_interconnect(profile, tables["summary"]),
    )


# ----------------------------------------------------------------------------------- sections
def _missing_html(text: str) -> str:
    return text_html(text, "missing")


def _banner(text: str, colour: str) -> str:
    return (
        f'<div style="border:2px solid {colour}; border-radius:0.4rem; padding:0.6rem 1rem; '
        f'background:#fff6f4">{text}</div>'
    )


def _failure_section(p: _Profile) -> Section | None:
    if p.failure is None:
        return None
    reason = p.failure.get("reason") or "(no reason recorded)"
    log_path = p.failure.get("log_path") or "(no log recorded)"
    parts = [
        f"<p><strong>The run failed:</strong> {html.escape(str(reason))}</p>",
        f"<p>Log: <code>{html.escape(str(log_path))}</code></p>",
    ]
    if p.failure.get("exit_code") is not None:
        parts.append(f"<p>Exit code: {html.escape(str(p.failure['exit_code']))}</p>")
    parts.append("<p>The sections below show what was collected before it stopped.</p>")
    return Section("Run failed", _banner("".join(parts), "#c0392b"))


def _emulation_section(p: _Profile) -> Section | None:
    if p.emulated_interconnect is None:
        return None
    text = (
        f"<p><strong>Emulated interconnect: {html.escape(p.emulated_interconnect)}</strong> — NCCL was "
        "restricted through environment variables (distributed.emulate_interconnect), so the communication "
        "numbers describe the emulated link, not this machine's own.</p>"
    )
    return Section(f"Emulated interconnect: {p.emulated_interconnect}", _banner(text, "#d68910"))


def _captured(p: _Profile) -> bool:
    """Whether the run's step was the captured one (``summary.csv`` ``step_kind``; older folders lack it)."""
    summary = p.tables["summary"]
    return summary is not None and "step_kind" in summary.columns and bool((summary["step_kind"] == CAPTURED).any())


#: What the breakdown shows of a captured step.
CAPTURED_PHASES_TEXT = (
    "The step is captured in a CUDA graph (step_kind captured): a replay has no phases, so the phases are "
    "those of the sampled eager step of each logging interval, its first step, run eagerly with the phase "
    "timers. They show where an eager step's time goes, not the length of the replayed step (step_time_ms "
    "and steps_per_s in the summary, which cover every step of the intervals)."
)


def _summary_section(p: _Profile) -> Section:
    if not p.has("summary"):
        return Section("Summary per rank", _missing_html(p.absent("summary")))
    text = ("Means over each rank's interval records (one per training.log_every steps), its first (warm-up) "
            "interval and the records of the torch.profiler window left out; step_time_ms and steps_per_s cover "
            "every step of the intervals. throughput_samples_per_s and rays_per_s are the whole job's (all ranks "
            "together, the same on every row); rank_throughput_samples_per_s and rank_rays_per_s are each rank's "
            "own rays.")
    if _captured(p):
        text += (" compute_ms, wait_ms, data_ms and comm_ms are those of the sampled eager step of each interval "
                 "(the step is captured: a replay has no phases), so other_ms and phase_coverage are not given.")
    else:
        text += (" compute_ms, wait_ms, data_ms, occupancy_update_ms and other_ms (the time outside every named "
                 "phase) add up to step_time_ms.")
    summary = p.tables["summary"]  # one row per rank, ~20 quantities: a column per rank fits the page
    table = (table_html(transposed(summary, "rank", "quantity"), quantity_column="quantity") if "rank" in summary.columns
             else table_html(summary))
    return Section("Summary per rank", table + text_html(text))


def _rank_labels(index: pd.Index) -> list[str]:
    return [f"rank {int(r)}" for r in index]


def _breakdown_section(p: _Profile, means: pd.DataFrame | None) -> Section:
    title = "Step-time breakdown per rank"
    if means is None:
        return Section(title, _missing_html(p.absent("phases")))
    phases = [*PHASES, "other"]
    long = means[phases].rename_axis("rank").reset_index().melt(id_vars="rank", var_name="phase", value_name="time_ms")
    long["rank"] = long["rank"].map(lambda r: f"rank {int(r)}")
    fig = px.bar(long, x="rank", y="time_ms", color="phase", category_orders={"phase": phases},
                 labels={"time_ms": "ms per step"}, title="Mean time per step by phase")
    fig.update_layout(barmode="stack", height=420)
    named = means[list(PHASES)].sum(axis=1)
    coverage = pd.DataFrame(
        {
            "rank": means.index.astype(int),
            "step_time_ms": means["step_time_ms"],
            "named_ms": named,
            "other_ms": means["other"],
            "coverage_pct": 100 * named / means["step_time_ms"],
        }
    )
    low = coverage[coverage["coverage_pct"] < 100 * COVERAGE_TARGET]
    verdict = (
        f"Named phases cover at least {100 * COVERAGE_TARGET:.0f}% of the step on every rank."
        if low.empty
        else f"Named phases cover less than {100 * COVERAGE_TARGET:.0f}% of the step on rank(s) "
        f"{', '.join(map(str, low['rank']))}: the rest is 'other'."
    )
    captured = _captured(p)
    body = text_html(CAPTURED_PHASES_TEXT) if captured else ""
    body += figure_html(fig) + text_html("Coverage = named phases / step time. " + verdict) + table_html(coverage)
    table = p.tables["phases"]
    if table["step"].nunique() > 1:
        per_step = table.groupby(["rank", "step"], as_index=False)["time_ms"].sum()
        per_step["rank"] = per_step["rank"].map(lambda r: f"rank {int(r)}")
        what = ("Sampled eager step time over the run (the first step of each logged interval)" if captured
                else "Step time over the run (mean of each logged interval)")
        line = px.line(per_step, x="step", y="time_ms", color="rank", markers=True,
                       labels={"time_ms": "ms per step"}, title=what)
        line.update_layout(height=320)
        body += figure_html(line)
    body += text_html("Means leave out each rank's first logged interval (warm-up) when it has more.")
    return Section(title, body)


def _imbalance_section(p: _Profile, means: pd.DataFrame | None) -> Section:
    title = "Per-rank imbalance"
    if means is None:
        return Section(title, _missing_html(p.absent("phases")))
    compute = means[list(COMPUTE_PHASES)].sum(axis=1)
    wait = means[list(WAIT_PHASES)].sum(axis=1)
    table = pd.DataFrame({"rank": means.index.astype(int), "compute_ms": compute, "wait_ms": wait,
                          "step_time_ms": means["step_time_ms"]})
    if len(means) < 2:
        return Section(title, text_html("One rank: nothing to balance.") + table_html(table))
    ratio = float(compute.max() / compute.mean()) if compute.mean() > 0 else float("nan")
    fig = go.Figure(
        [
            go.Bar(name="compute (own work)", x=_rank_labels(means.index), y=compute.to_list()),
            go.Bar(name="waiting in collectives", x=_rank_labels(means.index), y=wait.to_list()),
        ]
    )
    fig.update_layout(barmode="group", height=360, yaxis_title="ms per step", title="Compute and wait time per rank")
    text = (
        f"Imbalance (max/mean compute time) = {ratio:.3g}. Compute = {' + '.join(COMPUTE_PHASES)}; "
        f"waits = {' + '.join(WAIT_PHASES)} (a faster rank waits there for the slowest)."
    )
    return Section(title, figure_html(fig) + text_html(text) + table_html(table))


def _throttle_table(timeline: pd.DataFrame) -> pd.DataFrame:
    """Share of samples (%) in which each clock-event reason was active, per GPU."""
    reasons = timeline[["gpu", "throttle_reasons"]].dropna()
    rows = []
    for gpu, group in reasons.groupby("gpu", sort=True):
        names = group["throttle_reasons"].astype(str).str.split("|").explode().str.strip()
        for reason, count in names.value_counts().items():
            rows.append({"gpu": gpu, "reason": reason, "samples_pct": 100.0 * count / len(group)})
    return pd.DataFrame(rows, columns=["gpu", "reason", "samples_pct"])


def _timeline_section(p: _Profile) -> Section:
    title = "GPU timelines (NVML)"
    if not p.has("gpu_timeline"):
        return Section(title, _missing_html("No GPU timeline: " + p.absent("gpu_timeline")))
    timeline = p.tables["gpu_timeline"].sort_values(["gpu", "t_s"])
    panels = [(name, unit, [c for c in cols if timeline[c].notna().any()]) for name, unit, cols in _TIMELINE_PANELS]
    drawn = [panel for panel in panels if panel[2]]
    empty = [name for name, _, cols in panels if not cols]
    fig = make_subplots(rows=len(drawn), cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        subplot_titles=[f"{name} ({unit})" for name, unit, _ in drawn])
    for row, (_, _, columns) in enumerate(drawn, start=1):
        for gpu, group in timeline.groupby("gpu", sort=True):
            for column in columns:
                label = f"GPU {gpu}" + (f" {column.split('_')[1]}" if len(columns) > 1 else "")
                fig.add_trace(go.Scatter(x=group["t_s"], y=group[column], mode="lines", name=label,
                                         legendgroup=f"GPU {gpu}", showlegend=row == 1 or len(columns) > 1), row=row, col=1)
    fig.update_xaxes(title_text="time since the training loop started (s)", row=len(drawn), col=1)
    fig.update_layout(height=220 * len(drawn) + 80, title="NVML samples per GPU")
    body = figure_html(fig) + text_html(
        "The compute_underused diagnosis averages util_pct over the steady training window only: the intervals "
        "of the metrics records after the warm-up, without start-up, the torch.profiler window, evaluation "
        "and the final snapshot (its evidence gives the span).")
    if empty:
        body += text_html(f"Not reported by NVML on this machine: {', '.join(empty)}.")
    body += "<h3>Clock-event (throttle) reasons</h3>" + table_html(_throttle_table(timeline))
    return Section(title, body)


def _kernels_section(p: _Profile) -> Section:
    title = "Top kernels"
    if not p.has("kernels"):
        return Section(title, _missing_html(p.absent("kernels")))
    kernels = p.tables["kernels"]
    top = (
        kernels.groupby(["name", "category"], as_index=False)
        .agg(calls=("calls", "sum"), total_ms=("total_ms", "sum"), ranks=("rank", "nunique"))
        .sort_values("total_ms", ascending=False)
        .head(TOP_KERNELS)
    )
    top["mean_us"] = 1e3 * top["total_ms"] / top["calls"].where(top["calls"] > 0)
    top["share_pct"] = 100 * top["total_ms"] / kernels["total_ms"].sum()
    # one bar per row: a name launched from two categories gets the category in its label
    repeated = top["name"].duplicated(keep=False)
    top["label"] = top["name"].where(~repeated, top["name"] + " [" + top["category"] + "]")
    fig = px.bar(top.iloc[::-1], x="total_ms", y="label", color="category", orientation="h",
                 labels={"total_ms": "total ms in the trace window (all ranks)", "label": ""},
                 title=f"Top {len(top)} kernels / operators by time")
    fig.update_layout(height=max(300, 28 * len(top) + 120), yaxis={"automargin": True})
    by_category = kernels.groupby("category", as_index=False)["total_ms"].sum().sort_values("total_ms", ascending=False)
    body = figure_html(fig) + table_html(top.drop(columns="label")) + "<h3>Time per category</h3>" + table_html(by_category)
    return Section(title, body)


def _overlap_section(p: _Profile) -> Section:
    title = "Communication vs computation overlap"
    if not p.has("overlap"):
        return Section(title, _missing_html(p.absent("overlap")))
    overlap = p.tables["overlap"].sort_values("rank")
    labels = _rank_labels(pd.Index(overlap["rank"]))
    fig = go.Figure(
        [
            go.Bar(name="compute", x=labels, y=overlap["compute_ms"]),
            go.Bar(name="exposed communication", x=labels, y=overlap["exposed_comm_ms"]),
            go.Bar(name="idle (no kernel)", x=labels, y=overlap["idle_ms"]),
        ]
    )
    fig.update_layout(barmode="stack", height=360, yaxis_title="ms in the trace window",
                      title="Trace window: compute, exposed communication, idle")
    text = "Overlapped communication runs under compute kernels and costs no step time; exposed communication does."
    return Section(title, figure_html(fig) + text_html(text) + table_html(overlap))


def _link_section(p: _Profile) -> Section:
    title = "Gradient all-reduce vs the link"
    if not p.has("summary"):
        return Section(title, _missing_html(p.absent("summary")))
    entry = (p.sources or {}).get("link_busbw")
    provenance = (f"link_busbw: {entry['status']} — {entry['detail']}" if entry is not None
                  else "sources.json does not say where the link's figure comes from")
    summary = p.tables["summary"].sort_values("rank")
    if len(summary) < 2:
        return Section(title, text_html("One rank: no gradient all-reduce to compare with the link. " + provenance))
    achieved = pd.to_numeric(summary["comm_busbw_gb_per_s"], errors="coerce")
    if not achieved.notna().any():
        return Section(title, _missing_html(
            "No achieved bus bandwidth: the run all-reduced no gradients (comm_busbw_gb_per_s is empty, e.g. "
            "parallel.mode=subgrid exchanges per-ray colours instead). " + provenance))
    table = pd.DataFrame({"rank": summary["rank"].astype(int), "comm_busbw_gb_per_s": achieved})
    link = pd.to_numeric(summary["link_busbw_gb_per_s"], errors="coerce").dropna()
    method = (
        "Achieved busbw = gradient bytes per step / time in the comm phase, scaled by 2(n−1)/n as nccl-tests; "
        "with parallel.overlap_comm the comm phase holds only the exposed wait, so it can exceed the link's."
    )
    if link.empty:
        return Section(title, _missing_html(f"The link's bus bandwidth is unknown ({provenance}).")
                       + text_html(method) + table_html(table))
    link_gb_per_s = float(link.iloc[0])
    table["link_busbw_gb_per_s"] = link_gb_per_s
    table["achieved_of_link_pct"] = 100 * achieved / link_gb_per_s
    best_pct, bound_pct = float(table["achieved_of_link_pct"].max()), 100 * LINK_UNDERUSED_FRACTION
    verdict = f"The gradient all-reduce reaches at most {best_pct:.0f}% of the link's {link_gb_per_s:.3g} GB/s " + (
        f"(below {bound_pct:.0f}%): the link is not what limits it (bucket sizes, NCCL algorithm and channels are)."
        if best_pct < bound_pct else
        f"({bound_pct:.0f}% or more): the link itself limits it; only fewer bytes (parallel.compression, "
        "parallel.mode=subgrid) shorten it."
    )
    return Section(title, text_html(verdict) + table_html(table) + text_html(method) + text_html(provenance))


def _diagnoses_section(p: _Profile) -> Section:
    title = "Diagnoses"
    if p.tables["diagnoses"] is None:
        return Section(title, _missing_html(p.absent("diagnoses")))
    table = p.tables["diagnoses"]
    values = pd.to_numeric(table["value"], errors="coerce")
    shown = table.assign(  # each bottleneck's value and threshold in its unit: 11.1 %, 5.00×
        value=[diagnosis_measure_text(b, float(v)) for b, v in zip(table["bottleneck"], values)],
        threshold=[diagnosis_measure_text(b, float(t)) for b, t in
                   zip(table["bottleneck"], pd.to_numeric(table["threshold"], errors="coerce"))])
    fired_mask = table["fired"].astype(str).str.lower().isin(("true", "1"))
    fired = shown[fired_mask].assign(order=lambda d: d["severity"].map(_SEVERITY_ORDER)).sort_values("order")
    measured = ("value", "threshold")
    if fired.empty:
        body = text_html("No bottleneck passed its threshold.")
    else:
        body = table_html(fired[["bottleneck", "severity", "value", "threshold", "evidence", "knob"]], numeric_text=measured)
    not_evaluated = table[values.isna()]
    results = shown.assign(
        result=["fired" if f else ("not evaluated" if pd.isna(v) else "clear") for f, v in zip(fired_mask, values)]
    )
    body += "<h3>All checks</h3>" + table_html(results[["bottleneck", "result", "value", "threshold", "evidence"]],
                                               numeric_text=measured)
    if len(not_evaluated):
        body += _missing_html("Not evaluated (inputs missing): " + ", ".join(not_evaluated["bottleneck"]) + ".")
    return Section(title, body)


def _sources_section(p: _Profile) -> Section:
    title = "Data sources"
    if p.sources is None:
        body = _missing_html("sources.json is missing: the state of each source is unknown.")
    else:
        body = table_html(
            pd.DataFrame(
                [(name, e["status"], e["detail"]) for name, e in p.sources.items()], columns=["source", "status", "detail"]
            )
        )
    files = pd.DataFrame(
        [
            (f"{name}.csv", "missing" if t is None else f"{len(t)} rows")
            for name, t in p.tables.items()
        ],
        columns=["file", "content"],
    )
    return Section(title, body + "<h3>Files</h3>" + table_html(files))


def _subtitle(p: _Profile) -> str:
    parts = [str(p.root)]
    summary = p.tables["summary"]
    if summary is not None and len(summary):
        parts.append(f"{len(summary)} rank(s)")
        if "steps" in summary.columns:
            parts.append(f"{int(summary['steps'].max())} steps")
    if p.failure is not None:
        parts.append("run FAILED")
    if p.emulated_interconnect is not None:
        parts.append(f"emulated interconnect: {p.emulated_interconnect}")
    return " — ".join(parts)


def write_profile_report(profile_dir: Path) -> Path:
    """Write ``report.html`` into a profile folder from the tables found there.

    Args:
        profile_dir: the folder ``ngptune profile`` wrote (``ProfileDir`` layout).

    Returns:
        The path of ``report.html``.

    Raises:
        ProfileReportError: the folder does not exist, or a file in it is present but unreadable
            (not CSV, required columns missing, invalid JSON), naming the file.
    """
    p = _load(Path(profile_dir))
    means = rank_phase_means(p.tables["phases"]) if p.has("phases") else None
    sections = [
        s
        for s in (
            _failure_section(p),
            _emulation_section(p),
            _diagnoses_section(p),
            _summary_section(p),
            _breakdown_section(p, means),
            _imbalance_section(p, means),
            _timeline_section(p),
            _kernels_section(p),
            _overlap_section(p),
            _link_section(p),
            _sources_section(p),
        )
        if s is not None
    ]
    page = render_page(f"Profile {p.root.name}", sections, subtitle=_subtitle(p))
    path = ProfileDir(p.root).report_path
    atomic_write_text(path, page)
    return path

"""Bottleneck diagnoses of a training run (DESIGN.md §4): which of eight bottlenecks holds it back,
the numbers that show it, and the tuner knob to try.

=====================  ==================================================  ==============================
bottleneck             value (unit) and evidence                           fires when
=====================  ==================================================  ==============================
compute_underused      mean GPU utilisation, % (NVML ``util_pct`` over     value < 80 % while data and
                       the active window); trace idle time (launch gaps)   comm shares are below theirs
data_loading           share of the step in the "data" phase (worst rank)  value > 0.10
hash_grid_contention   hash-grid backward / forward kernel time, ratio     value > 3
communication          exposed comm share of the step (least-waiting       value > 0.15
                       rank), achieved busbw vs the link
load_imbalance         max / mean per-rank compute time, ratio; waits in   value > 1.15
                       collectives
wasted_samples         occupied fraction of the occupancy grid at the      value > 0.30 (records past
                       run's end; samples per ray, the fraction's fall     the occupancy warm-up)
occupancy_update       share of the step in the "occupancy_update" phase   value > 0.25 (intervals past
                       (worst rank)                                        the occupancy warm-up)
background_collapse    test PSNR minus the PSNR of painting every pixel    |value| < 0.1 dB past the
                       the background colour, dB (``eval.json``)          occupancy warm-up (always high)
=====================  ==================================================  ==============================

Every diagnosis that fires carries a severity from how far the value is past its threshold,
measured from the value of a perfect run (``ideal``: 0 for shares, 1 for ratios, 100 % for
utilisation): ``excess = (value − ideal) / (threshold − ideal)``; high from 2, medium from 1.5,
low below. A diagnosis whose inputs are missing is *not evaluated* (:class:`Check`), never guessed.

Inputs (:class:`ProfileInputs`) are pandas DataFrames. Phase times come from the trainer's phase
timers (``metrics.jsonl`` of every rank, :mod:`trainer.schema`): one row per rank, logged step and
phase with the mean ms per step of the interval ending at that step. Each rank's warm-up intervals
(one-off costs: lazy initialisation, the first occupancy update, allocator growth) are left out when
the rank has later ones, by the rule the summary table and the sweep objectives share
(:func:`ngptune.profiling.runs.drop_warmup`).

Per-rank compute time is the sum of ``ngptune.profiling.tables.COMPUTE_PHASES``, the rank's own work in which
it waits for no other rank (the data phase is judged on its own); time in
``ngptune.profiling.tables.WAIT_PHASES`` (collectives) is where a faster rank waits for the slowest.

During the occupancy warm-up (``training.occupancy_warmup_steps``) every cell of the grid is
updated every step and the grid is not yet carved, so the two occupancy checks judge only what
follows it, from the run's config (:attr:`ProfileInputs.config`); a run that never leaves the
warm-up leaves them not evaluated, naming the ``--steps`` that would. The same config takes out
of each diagnosis's suggestions (:class:`Suggestion`) the values the run already has.

The result of every check, fired or not, is a :class:`Check`; :func:`diagnoses_table` turns them
into the rows of ``diagnoses.csv``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ngptune.profiling.runs import drop_warmup
from ngptune.profiling.tables import COMPUTE_PHASES, DIAGNOSES_TABLE, PHASES_TABLE, WAIT_PHASES
from trainer.config import TrainConfig, load_config
from trainer.errors import NgptuneError
from trainer.schema import PHASES
from trainer.train.collapse import COLLAPSE_CURES, COLLAPSE_MARGIN_DB, collapse_gap_db, past_occupancy_warmup

__all__ = [
    "BOTTLENECKS",
    "Check",
    "Suggestion",
    "Diagnosis",
    "DiagnosisError",
    "ProfileInputs",
    "assess",
    "assess_run",
    "config_of_run",
    "diagnose",
    "diagnose_run",
    "diagnoses_table",
    "evaluation_of_run",
    "inputs_from_run",
    "knob_text",
    "occupancy_records",
    "past_warmup_phases",
    "rank_phase_means",
    "steps_past_occupancy_warmup",
]

BOTTLENECKS: tuple[str, ...] = (
    "compute_underused",
    "data_loading",
    "hash_grid_contention",
    "communication",
    "load_imbalance",
    "wasted_samples",
    "occupancy_update",
    "background_collapse",
)
SEVERITIES: tuple[str, ...] = ("high", "medium", "low")

# ------------------------------------------------------------------------------------ thresholds
#: compute_underused: mean GPU utilisation (% of time a kernel runs, NVML) below which the GPU is
#: under-used. An instant-NGP step at a proper batch size keeps kernels queued back to back (> 95 %);
#: below 80 % more than a fifth of the time no kernel runs — launch gaps or host work between
#: kernels, which a larger batch (more work per launch) hides.
COMPUTE_UTIL_THRESHOLD_PCT = 80.0
#: data_loading: share of the step spent drawing the next batch. With the pixel table on the GPU the
#: draw is a gather kernel well under 1 % of the step; above 10 % the input pipeline (host decode,
#: host→device copies) holds the step back, and removing it gains more than the other knobs' noise.
DATA_SHARE_THRESHOLD = 0.10
#: hash_grid_contention: backward / forward time of the hash-grid kernels. The backward does the
#: forward's gathers plus one scatter-add of 8 corner gradients per sample and level, about 1–2×
#: the forward without contention; above 3× the atomic adds collide (many samples hitting the same
#: table entries of the coarse levels) or run in emulated half precision.
HASH_GRID_BWD_FWD_THRESHOLD = 3.0
#: communication: exposed (not overlapped) gradient communication as a share of the step, on the rank
#: that waits least (the slowest rank, whose wait is the transfer itself, not other ranks). Above
#: 15 % the step is visibly communication bound: more than compression or bucketing overheads cost.
COMM_EXPOSED_SHARE_THRESHOLD = 0.15
#: load_imbalance: max / mean per-rank compute time. Ranks meet in every collective, so the step
#: takes the slowest rank's time; at 1.15 the average rank idles 13 % of it ((max − mean) / max).
#: Below that, per-step noise (ranks draw equal rays but different sample counts) dominates.
IMBALANCE_THRESHOLD = 1.15
#: communication knob choice: achieved busbw below this fraction of the link's means the link is not
#: the limit (algorithm, channels, bucket sizes are); above it, fewer bytes must travel.
LINK_UNDERUSED_FRACTION = 0.5

#: wasted_samples: occupied fraction of the occupancy grid at the end of the run. The marcher
#: takes samples only in occupied cells, so samples per ray scale with this fraction. A trained
#: grid of an object scene keeps a small part of its cells (the demo scene ~0.1–0.2 after a few
#: seconds, NeRF-synthetic scenes below 0.1); a grid still above 0.3 has not carved out empty
#: space (updates too rare, decay too slow, threshold too low), and the samples it marches there
#: buy throughput but no quality.
OCCUPIED_FRACTION_THRESHOLD = 0.30
#: occupancy_update: share of the step spent updating the occupancy grid (worst rank). The
#: update evaluates the density of grid cells every ``training.occupancy_update_every`` steps;
#: above a quarter of the step it costs more than it saves in marching.
OCCUPANCY_UPDATE_SHARE_THRESHOLD = 0.25

SEVERITY_HIGH_EXCESS = 2.0
SEVERITY_MEDIUM_EXCESS = 1.5

#: kernels.csv ``category`` values of the hash-grid encoding's forward and backward kernels.
HASH_GRID_FWD_CATEGORY = "hash_grid_fwd"
HASH_GRID_BWD_CATEGORY = "hash_grid_bwd"

# Columns the checks read (subsets of ngptune.profiling.tables' GPU_TIMELINE_TABLE, KERNELS_TABLE, OVERLAP_TABLE).
GPU_TIMELINE_REQUIRED: tuple[str, ...] = ("t_s", "gpu", "util_pct")
KERNELS_REQUIRED: tuple[str, ...] = ("rank", "name", "total_ms", "category")
OVERLAP_REQUIRED: tuple[str, ...] = ("rank", "compute_ms", "exposed_comm_ms", "idle_ms")
OCCUPANCY_REQUIRED: tuple[str, ...] = ("step", "occupancy_fraction", "rays_per_step", "samples_per_step")
# eval.json keys the background_collapse check reads (trainer.train.evaluate.evaluate writes them).
EVALUATION_REQUIRED: tuple[str, ...] = ("step", "mean_psnr_db", "background_psnr_db", "occupancy_warmup_steps")

_ALL_PHASES: tuple[str, ...] = (*PHASES, "other")

@dataclasses.dataclass(frozen=True)
class Suggestion:
    """One setting a diagnosis suggests.

    Attributes:
        key: dotted trainer key (``parallel.mode``) or NCCL variable (``NCCL_ALGO``).
        value: the value to set, or None when ``how`` gives a direction (``higher``) instead.
        how: why or how, shown after the setting; may be empty.
    """

    key: str
    value: Any = None
    how: str = ""

    def text(self) -> str:
        setting = self.key if self.value is None else f"{self.key}={_value_text(self.value)}"
        return f"{setting} ({self.how})" if self.how else setting


def _value_text(value: Any) -> str:
    """A config value as a study file or ``--set`` writes it (``true``, ``none``, ``bf16``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _config_value(config: TrainConfig, key: str) -> tuple[bool, Any]:
    """``(found, value)`` of a dotted trainer key in ``config``; NCCL variables are not in it."""
    block, _, name = key.partition(".")
    section = getattr(config, block, None) if name else None
    if section is None or not hasattr(section, name):
        return False, None
    return True, getattr(section, name)


def knob_text(suggestions: tuple[Suggestion | str, ...], config: TrainConfig | None) -> str:
    """The ``knob`` text of a diagnosis: its suggestions joined by ``", or "``, without those whose
    value the run already uses (``config``; every suggestion when it is None). Free-text cures
    (``str``) are kept. When some are left out the text ends with what the run already has; when
    none is left it says that nothing is left to suggest.
    """
    kept: list[str] = []
    already: list[str] = []
    for s in suggestions:
        if isinstance(s, Suggestion) and s.value is not None and config is not None:
            found, current = _config_value(config, s.key)
            if found and _value_text(current).lower() == _value_text(s.value).lower():
                already.append(f"{s.key}={_value_text(s.value)}")
                continue
        kept.append(s if isinstance(s, str) else s.text())
    if not kept:
        return "nothing left to suggest: the run already uses " + ", ".join(already)
    return ", or ".join(kept) + (f" (the run already uses {', '.join(already)})" if already else "")


KNOBS: dict[str, tuple[Suggestion | str, ...]] = {
    "compute_underused": (
        Suggestion("training.target_samples_per_step", how="raise it, e.g. 2x, so each kernel launch does more work"),
    ),
    "data_loading": (
        Suggestion("data.placement", "device", "pixel table on the GPU"),
        Suggestion("data.decode_threads", how="more"),
    ),
    "hash_grid_contention": (
        Suggestion("encoding.backend", "triton", "fused kernels"),
        Suggestion("encoding.log2_hashmap_size", how="smaller"),
        Suggestion("training.precision", "fp32", "instead of fp16 gradients"),
        Suggestion("training.precision", "bf16", "instead of fp16 gradients"),
    ),
    "load_imbalance": (
        Suggestion("parallel.balance_every", how="e.g. 10: move ray shares toward equal finish times"),
        Suggestion("distributed.gpu_capabilities[].compute_power", how="static shares"),
    ),
    "wasted_samples": (
        Suggestion("training.occupancy_update_every", how="lower, so the grid tracks the density"),
        Suggestion("training.occupancy_decay", how="lower"),
        Suggestion("training.occupancy_threshold", how="higher"),
    ),
    "occupancy_update": (
        Suggestion("training.occupancy_update_every", how="higher: rarer updates"),
        Suggestion("training.occupancy_resolution", how="smaller"),
    ),
    "background_collapse": (COLLAPSE_CURES,),
}
_COMM_KNOB_LINK_UNDERUSED = (
    Suggestion("NCCL_ALGO", how="Tree or Ring; the link is not the limit"),
    Suggestion("parallel.bucket_mib", how="larger"),
    Suggestion("parallel.overlap_comm", True),
)
_COMM_KNOB_LINK_BUSY = (
    Suggestion("parallel.compression", "bf16", "half the bytes"),
    Suggestion("parallel.overlap_comm", True),
    Suggestion("parallel.mode", "subgrid", "exchanges per-ray colours instead of gradients"),
)
_COMM_KNOB_LINK_UNKNOWN = (
    Suggestion("parallel.overlap_comm", True),
    Suggestion("parallel.bucket_mib"),
    Suggestion("parallel.compression", "bf16"),
    Suggestion("NCCL_ALGO"),
    Suggestion("parallel.mode", "subgrid"),
)


class DiagnosisError(NgptuneError):
    """Diagnosis inputs break their contract (missing columns, duplicate or unknown ranks/phases,
    ranks without metrics)."""


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """A bottleneck that passed its threshold.

    Attributes:
        bottleneck: one of :data:`BOTTLENECKS`.
        severity: ``"high"``, ``"medium"`` or ``"low"`` (module docstring).
        value: the measured value, in the unit of the bottleneck's threshold (module docstring).
        threshold: the threshold it passed.
        evidence: one sentence with the numbers.
        knob: the tuner knob to try (dotted trainer key or NCCL variable) and how.
    """

    bottleneck: str
    severity: str
    value: float
    threshold: float
    evidence: str
    knob: str


@dataclasses.dataclass(frozen=True)
class Check:
    """The outcome of one bottleneck's check.

    Attributes:
        bottleneck: one of :data:`BOTTLENECKS`.
        status: ``"fired"`` (see ``diagnosis``), ``"clear"`` (evaluated: below its threshold, or
            explained by another bottleneck) or ``"not_evaluated"`` (its inputs are missing).
        value: the measured value (NaN when not evaluated).
        threshold: the bottleneck's threshold.
        detail: the evidence sentence, or why it was not evaluated.
        diagnosis: the diagnosis when fired, else None.
    """

    bottleneck: str
    status: str
    value: float
    threshold: float
    detail: str
    diagnosis: Diagnosis | None = None


def _require_columns(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DiagnosisError(f"{what}: missing columns {missing} (has {list(df.columns)})")


@dataclasses.dataclass(frozen=True)
class ProfileInputs:
    """What the diagnoses read. Optional sources are None (or empty) when they were not collected.

    Attributes:
        phases: ``ngptune.profiling.tables.PHASES_TABLE`` columns: ``rank`` (int), ``step`` (int), ``phase``
            (one of ``trainer.schema.PHASES`` or ``"other"``), ``time_ms`` (float, mean ms per step
            of the logged interval ending at ``step``); one row per (rank, step, phase); may be empty.
        summary: one row per rank, at least ``rank``; ``compute_ms`` (used when ``phases`` has no
            phase times) and ``comm_busbw_gb_per_s`` are read when present
            (``ngptune.profiling.runs.summary_table`` builds it).
        gpu_timeline: NVML samples, at least ``t_s``, ``gpu``, ``util_pct``; or None.
        kernels: kernel table of the trace window, at least ``rank``, ``name``, ``total_ms``,
            ``category`` (hash-grid kernels: :data:`HASH_GRID_FWD_CATEGORY`,
            :data:`HASH_GRID_BWD_CATEGORY`); or None.
        link_busbw_gb_per_s: bus bandwidth the link can carry (GB/s, 10^9 B/s), or None.
        overlap: per-rank trace overlap table, at least ``rank``, ``compute_ms``,
            ``exposed_comm_ms``, ``idle_ms`` (``window_ms`` when present); or None.
        occupancy: rank 0's records in step order, at least ``step``, ``occupancy_fraction``
            (occupied share of the grid's cells), ``rays_per_step`` and ``samples_per_step``; or None.
        evaluation: the run's ``eval.json`` (a mapping with at least :data:`EVALUATION_REQUIRED`
            for the background_collapse check; an older file without them leaves it not
            evaluated), or None when the run was not evaluated.
        config: the run's resolved trainer config (``config.json`` of the run directory), or
            None when unknown. The occupancy checks judge only steps after
            ``training.occupancy_warmup_steps`` with it; every suggested setting the run already
            has is left out of a diagnosis's ``knob`` (:func:`knob_text`).

    Raises:
        DiagnosisError: a frame lacks a required column, ``phases`` has an unknown phase or a
            duplicate (rank, step, phase), ``summary`` a duplicate rank, the two disagree on the
            ranks, or ``link_busbw_gb_per_s`` is not positive.
    """

    phases: pd.DataFrame
    summary: pd.DataFrame
    gpu_timeline: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    link_busbw_gb_per_s: float | None = None
    overlap: pd.DataFrame | None = None
    occupancy: pd.DataFrame | None = None
    evaluation: Mapping[str, Any] | None = None
    config: TrainConfig | None = None

    def __post_init__(self) -> None:
        _require_columns(self.phases, PHASES_TABLE, "phases")
        _require_columns(self.summary, ("rank",), "summary")
        unknown = sorted(set(self.phases["phase"]) - set(_ALL_PHASES))
        if unknown:
            raise DiagnosisError(f"phases: unknown phases {unknown}; known: {', '.join(_ALL_PHASES)}")
        duplicated = self.phases.duplicated(["rank", "step", "phase"])
        if duplicated.any():
            row = self.phases[duplicated].iloc[0]
            raise DiagnosisError(
                f"phases: duplicate row for rank {row['rank']}, step {row['step']}, phase {row['phase']!r}"
            )
        ranks = self.summary["rank"]
        if ranks.duplicated().any():
            raise DiagnosisError(f"summary: duplicate ranks {sorted(set(ranks[ranks.duplicated()]))}")
        if len(self.phases) and len(self.summary) and set(self.phases["rank"]) != set(ranks):
            raise DiagnosisError(
                f"phases has ranks {sorted(set(self.phases['rank']))} but summary has ranks {sorted(set(ranks))}"
            )
        for frame, columns, what in (
            (self.gpu_timeline, GPU_TIMELINE_REQUIRED, "gpu_timeline"),
            (self.kernels, KERNELS_REQUIRED, "kernels"),
            (self.overlap, OVERLAP_REQUIRED, "overlap"),
            (self.occupancy, OCCUPANCY_REQUIRED, "occupancy"),
        ):
            if frame is not None:
                _require_columns(frame, columns, what)
        if self.link_busbw_gb_per_s is not None and not self.link_busbw_gb_per_s > 0:
            raise DiagnosisError(f"link_busbw_gb_per_s: expected a positive number, got {self.link_busbw_gb_per_s!r}")

    @property
    def world_size(self) -> int:
        """Number of ranks in the phases (else in the summary)."""
        ranks = self.phases["rank"] if len(self.phases) else self.summary["rank"]
        return int(ranks.nunique())


# ------------------------------------------------------------------------------ phase tables
def rank_phase_means(phases: pd.DataFrame, *, steady: bool = True) -> pd.DataFrame:
    """Mean ms per step of every phase, per rank.

    Args:
        phases: rows (rank, step, phase, time_ms) as in :class:`ProfileInputs`.
        steady: leave out each rank's warm-up intervals (:func:`ngptune.profiling.runs.drop_warmup`).

    Returns:
        DataFrame indexed by ``rank`` with one float column per phase of ``PHASES + ("other",)``
        (ms per step, 0 where a phase never ran) and ``step_time_ms``, their sum.
    """
    data = drop_warmup(phases) if steady else phases
    table = data.pivot_table(index="rank", columns="phase", values="time_ms", aggfunc="mean", fill_value=0.0)
    table = table.reindex(columns=list(_ALL_PHASES), fill_value=0.0).astype(float)
    table["step_time_ms"] = table[list(_ALL_PHASES)].sum(axis=1)
    table.columns.name = None
    return table


def _timed(means: pd.DataFrame | None) -> bool:
    """Whether the phase timers recorded anything (with them off every named phase is 0)."""
    return means is not None and len(means) > 0 and float(means[list(PHASES)].to_numpy().sum()) > 0


def _share(means: pd.DataFrame, phase: str) -> pd.Series:
    """Per-rank share of the step spent in ``phase``."""
    return means[phase] / means["step_time_ms"]


def _rank_share(means: pd.DataFrame, phase: str, *, largest: bool) -> tuple[int, float]:
    """The rank with the largest (or smallest) share of its step in ``phase``, and that share."""
    share = _share(means, phase)
    rank = int(share.idxmax() if largest else share.idxmin())
    return rank, float(share[rank])


def _severity(value: float, threshold: float, ideal: float) -> str:
    excess = (value - ideal) / (threshold - ideal)
    if excess >= SEVERITY_HIGH_EXCESS:
        return "high"
    if excess >= SEVERITY_MEDIUM_EXCESS:
        return "medium"
    return "low"


def _verdict(
    bottleneck: str, value: float, threshold: float, ideal: float, evidence: str,
    suggestions: tuple[Suggestion | str, ...], config: TrainConfig | None, *, fires: bool
) -> Check:
    if not fires:
        return Check(bottleneck, "clear", value, threshold, evidence)
    diagnosis = Diagnosis(bottleneck, _severity(value, threshold, ideal), value, threshold, evidence,
                          knob_text(suggestions, config))
    return Check(bottleneck, "fired", value, threshold, evidence, diagnosis)


def _not_evaluated(bottleneck: str, threshold: float, why: str) -> Check:
    return Check(bottleneck, "not_evaluated", math.nan, threshold, why)


_NO_PHASES = "needs the trainer's phase timers (no phase times were recorded)"
_SINGLE_RANK = "needs more than one rank (this run has one)"


# ---------------------------------------------------------------------------------- checks
def _phase_share_check(means: pd.DataFrame | None, name: str, threshold: float, phase: str, doing: str,
                       config: TrainConfig | None) -> Check:
    """Fires when the rank with the largest share of its step in ``phase`` exceeds ``threshold``."""
    if not _timed(means):
        return _not_evaluated(name, threshold, _NO_PHASES)
    rank, value = _rank_share(means, phase, largest=True)
    evidence = (
        f"rank {rank} spends {means.at[rank, phase]:.3g} ms of its {means.at[rank, 'step_time_ms']:.3g} ms step "
        f"({value:.1%}) {doing}; threshold {threshold:.0%}"
    )
    return _verdict(name, value, threshold, 0.0, evidence, KNOBS[name], config, fires=value > threshold)


def _check_data(means: pd.DataFrame | None, config: TrainConfig | None) -> Check:
    return _phase_share_check(means, "data_loading", DATA_SHARE_THRESHOLD, "data", "drawing the next batch (data phase)",
                              config)


def _summary_column(summary: pd.DataFrame, column: str) -> pd.Series | None:
    if column not in summary.columns:
        return None
    values = pd.to_numeric(summary.set_index("rank")[column], errors="coerce").dropna()
    return values if len(values) else None


def _check_imbalance(means: pd.DataFrame | None, summary: pd.DataFrame, world_size: int,
                     config: TrainConfig | None) -> Check:
    name, threshold = "load_imbalance", IMBALANCE_THRESHOLD
    if world_size < 2:
        return _not_evaluated(name, threshold, _SINGLE_RANK if world_size == 1 else _NO_PHASES)
    waits = ""
    if _timed(means):
        compute = means[list(COMPUTE_PHASES)].sum(axis=1)
        wait = means[list(WAIT_PHASES)].sum(axis=1)
        waits = (
            f"; ranks wait {wait.min():.3g}–{wait.max():.3g} ms per step in collectives "
            f"(rank {int(wait.idxmax())} longest, waiting for the slowest)"
        )
        source = "phase timers"
    else:
        compute = _summary_column(summary, "compute_ms")
        if compute is None or len(compute) < 2:
            return _not_evaluated(name, threshold, "needs per-rank compute times (phase timers or summary compute_ms)")
        source = "summary"
    mean = float(compute.mean())
    if not mean > 0:
        return _not_evaluated(name, threshold, "the per-rank compute times are all zero")
    value = float(compute.max()) / mean
    per_rank = ", ".join(f"rank {int(r)} {t:.3g}" for r, t in compute.items())
    evidence = (
        f"compute ms per step ({source}): {per_rank}; max/mean = {value:.3g} (rank {int(compute.idxmax())} "
        f"slowest), threshold {threshold:.3g}{waits}"
    )
    return _verdict(name, value, threshold, 1.0, evidence, KNOBS[name], config, fires=value > threshold)


def _check_communication(
    means: pd.DataFrame | None, summary: pd.DataFrame, world_size: int, link_busbw_gb_per_s: float | None,
    config: TrainConfig | None,
) -> Check:
    name, threshold = "communication", COMM_EXPOSED_SHARE_THRESHOLD
    if world_size < 2:
        return _not_evaluated(name, threshold, _SINGLE_RANK if world_size == 1 else _NO_PHASES)
    if not _timed(means):
        return _not_evaluated(name, threshold, _NO_PHASES)
    rank, value = _rank_share(means, "comm", largest=False)
    evidence = (
        f"exposed gradient communication takes at least {value:.1%} of the step on every rank "
        f"(rank {rank}: {means.at[rank, 'comm']:.3g} of {means.at[rank, 'step_time_ms']:.3g} ms), "
        f"threshold {threshold:.0%}"
    )
    busbw = _summary_column(summary, "comm_busbw_gb_per_s")
    knob = _COMM_KNOB_LINK_UNKNOWN
    if busbw is not None:
        achieved = float(busbw.max())
        evidence += f"; achieved bus bandwidth {achieved:.3g} GB/s"
        if link_busbw_gb_per_s is not None:
            fraction = achieved / link_busbw_gb_per_s
            evidence += f" of the link's {link_busbw_gb_per_s:.3g} GB/s ({fraction:.0%})"
            knob = _COMM_KNOB_LINK_UNDERUSED if fraction < LINK_UNDERUSED_FRACTION else _COMM_KNOB_LINK_BUSY
        else:
            evidence += " (link bandwidth unknown)"
    return _verdict(name, value, threshold, 0.0, evidence, knob, config, fires=value > threshold)


def _active_util(gpu_timeline: pd.DataFrame) -> pd.Series:
    """Mean ``util_pct`` per GPU over its active window: from its first to its last sample with
    utilisation > 0 (leaves out process start-up, scene loading and the idle tail)."""
    out = {}
    for gpu, group in gpu_timeline.sort_values("t_s").groupby("gpu", sort=True):
        util = pd.to_numeric(group["util_pct"], errors="coerce").dropna().reset_index(drop=True)
        busy = util.index[util > 0]
        out[gpu] = float(util.iloc[busy[0] : busy[-1] + 1].mean()) if len(busy) else 0.0
    return pd.Series(out, dtype=float)


def _idle_share(overlap: pd.DataFrame) -> float | None:
    """Share of the traced window in which no kernel ran, over all ranks (None when unknown)."""
    if "window_ms" in overlap.columns:
        window = pd.to_numeric(overlap["window_ms"], errors="coerce")
    else:
        window = overlap["compute_ms"] + overlap["exposed_comm_ms"] + overlap["idle_ms"]
    total = float(window.sum())
    return float(pd.to_numeric(overlap["idle_ms"], errors="coerce").sum()) / total if total > 0 else None


def _check_compute(inputs: ProfileInputs, means: pd.DataFrame | None) -> Check:
    """Evaluated from NVML utilisation only: a trace's idle time is evidence of launch gaps on a
    GPU, but on a CPU-only trace it is host overhead, not an under-used device."""
    name, threshold = "compute_underused", COMPUTE_UTIL_THRESHOLD_PCT
    timeline = inputs.gpu_timeline
    if timeline is None or len(timeline) == 0 or not pd.to_numeric(timeline["util_pct"], errors="coerce").notna().any():
        return _not_evaluated(name, threshold, "needs GPU utilisation samples (NVML); none were collected (no GPU?)")
    if not _timed(means):
        return _not_evaluated(name, threshold, _NO_PHASES + "; they rule out waits on data and communication")
    util = _active_util(timeline)
    value = float(util.mean())
    per_gpu = ", ".join(f"GPU {g} {u:.0f}%" for g, u in util.items())
    evidence = f"mean GPU utilisation {value:.0f}% ({per_gpu}), threshold {threshold:.0f}%"
    if inputs.overlap is not None and len(inputs.overlap):
        idle = _idle_share(inputs.overlap)
        if idle is not None:
            evidence += f"; no kernel runs in {idle:.0%} of the traced window (launch gaps)"
    data_share = _rank_share(means, "data", largest=True)[1]
    comm_share = _rank_share(means, "comm", largest=False)[1] if inputs.world_size > 1 else 0.0
    evidence += f"; data {data_share:.1%} and exposed communication {comm_share:.1%} of the step"
    explained = data_share > DATA_SHARE_THRESHOLD or comm_share > COMM_EXPOSED_SHARE_THRESHOLD
    if value < threshold and explained:
        evidence += ", which explain the low utilisation (see those diagnoses)"
    fires = value < threshold and not explained
    return _verdict(name, value, threshold, 100.0, evidence, KNOBS[name], inputs.config, fires=fires)


def _check_contention(kernels: pd.DataFrame | None, config: TrainConfig | None) -> Check:
    name, threshold = "hash_grid_contention", HASH_GRID_BWD_FWD_THRESHOLD
    if kernels is None or len(kernels) == 0:
        return _not_evaluated(name, threshold, "needs the kernel table of a trace window (torch.profiler); none was collected")
    by_category = pd.to_numeric(kernels["total_ms"], errors="coerce").groupby(kernels["category"]).sum()
    fwd = float(by_category.get(HASH_GRID_FWD_CATEGORY, 0.0))
    bwd = float(by_category.get(HASH_GRID_BWD_CATEGORY, 0.0))
    if not (fwd > 0 and bwd > 0):
        return _not_evaluated(
            name,
            threshold,
            f"the kernel table lacks {HASH_GRID_FWD_CATEGORY} or {HASH_GRID_BWD_CATEGORY} time "
            f"(forward {fwd:.3g} ms, backward {bwd:.3g} ms)",
        )
    value = bwd / fwd
    evidence = (
        f"hash-grid backward kernels take {bwd:.3g} ms vs forward {fwd:.3g} ms in the trace window "
        f"({value:.3g}x), threshold {threshold:.3g}x"
    )
    return _verdict(name, value, threshold, 1.0, evidence, KNOBS[name], config, fires=value > threshold)


def _warmup_sentence(config: TrainConfig, last_step: int | None) -> str:
    """Why an occupancy check is not evaluated on a run that never left the occupancy warm-up,
    with the ``--steps`` that would leave it (:func:`steps_past_occupancy_warmup`)."""
    t = config.training
    ended = "" if last_step is None else f", the last record is at step {last_step}"
    return (f"the profile's steps are all inside the occupancy warm-up (training.occupancy_warmup_steps = "
            f"{t.occupancy_warmup_steps}{ended}), where every cell is updated every step; judging it needs "
            f"--steps {steps_past_occupancy_warmup(config)} or more")


def steps_past_occupancy_warmup(config: TrainConfig) -> int:
    """The fewest training steps whose records hold one whole logged interval after the occupancy
    warm-up and one occupancy-update period after it: with warm-up ``w``, ``log_every`` ``L``
    and ``occupancy_update_every`` ``U``, ``max(ceil(w / L)·L + L, ceil((w + U) / L)·L)``.

    >>> from trainer.config import apply_overrides, TrainConfig
    >>> steps_past_occupancy_warmup(apply_overrides(TrainConfig(), {"training.occupancy_warmup_steps": 64,
    ...     "training.log_every": 1, "training.occupancy_update_every": 16}))
    80
    """
    t = config.training
    w, log_every, every = t.occupancy_warmup_steps, t.log_every, t.occupancy_update_every
    first_whole = -(-w // log_every) * log_every + log_every
    return max(first_whole, -(-(w + every) // log_every) * log_every)


def past_warmup_phases(phases: pd.DataFrame, config: TrainConfig) -> pd.DataFrame:
    """The rows of ``phases`` whose logged interval lies wholly after the occupancy warm-up.

    The record at step ``s`` covers the steps ``((s - 1) // L)·L .. s - 1`` (0-based step indices,
    ``L`` = ``training.log_every``); the grid updates every cell at the step indices below
    ``training.occupancy_warmup_steps`` (:meth:`trainer.render.occupancy.OccupancyGrid.update`).
    """
    log_every = config.training.log_every
    first = (phases["step"].astype(int) - 1) // log_every * log_every
    return phases[first >= config.training.occupancy_warmup_steps]


def _check_wasted_samples(occupancy: pd.DataFrame | None, config: TrainConfig | None) -> Check:
    name, threshold = "wasted_samples", OCCUPIED_FRACTION_THRESHOLD
    if occupancy is None:
        return _not_evaluated(name, threshold, "needs the occupancy fraction of rank 0's metrics records, "
                                               "which were not read for this check")
    if occupancy.empty:
        return _not_evaluated(name, threshold, "needs the occupancy fraction of rank 0's metrics records; "
                                               "there are none")
    rows = occupancy.dropna(subset=["occupancy_fraction"])
    if rows.empty:
        return _not_evaluated(name, threshold, "rank 0's metrics records carry no occupancy_fraction (the "
                                               "occupancy grid is off, or the trainer did not log it)")
    if config is not None:
        warmup = config.training.occupancy_warmup_steps
        past = rows[[past_occupancy_warmup(int(s), warmup) for s in rows["step"]]]
        if past.empty:
            return _not_evaluated(name, threshold, "the occupancy fraction is judged after the warm-up, and "
                                  + _warmup_sentence(config, int(rows["step"].iloc[-1])))
        rows = past
    first, last = rows.iloc[0], rows.iloc[-1]
    value = float(last["occupancy_fraction"])
    rays, samples = float(last["rays_per_step"]), float(last["samples_per_step"])
    per_ray = f"{samples / rays:.0f} samples per ray" if rays > 0 else "no rays"
    evidence = (
        f"the occupancy grid is {value:.1%} occupied at step {int(last['step'])} "
        f"({float(first['occupancy_fraction']):.1%} at step {int(first['step'])}); {per_ray} in the last "
        f"interval; threshold {threshold:.0%}"
    )
    if value > threshold:
        evidence += ": samples marched in empty space raise samples/s, not quality"
    return _verdict(name, value, threshold, 0.0, evidence, KNOBS[name], config, fires=value > threshold)


def _check_occupancy_update(phases: pd.DataFrame, means: pd.DataFrame | None, config: TrainConfig | None) -> Check:
    """The share of the step in the occupancy update, on the intervals after the occupancy warm-up
    (:func:`past_warmup_phases`; all steady intervals when the config is unknown)."""
    name, threshold, doing = "occupancy_update", OCCUPANCY_UPDATE_SHARE_THRESHOLD, "updating the occupancy grid"
    if config is None or not _timed(means):
        return _phase_share_check(means, name, threshold, "occupancy_update", doing, config)
    past = past_warmup_phases(phases, config)
    if past.empty:
        last = int(phases["step"].max())
        return _not_evaluated(name, threshold, _warmup_sentence(config, last))
    doing += f" after the occupancy warm-up ({config.training.occupancy_warmup_steps} steps)"
    return _phase_share_check(rank_phase_means(past), name, threshold, "occupancy_update", doing, config)


def _check_background_collapse(evaluation: Mapping[str, Any] | None) -> Check:
    """Fires (severity high: the run trained nothing) when the test PSNR lies within
    :data:`trainer.train.collapse.COLLAPSE_MARGIN_DB` of the background-only prediction's, past the
    occupancy warm-up (:func:`trainer.train.collapse.collapse_message` is the trainer's warning)."""
    name, threshold = "background_collapse", COLLAPSE_MARGIN_DB
    if evaluation is None:
        return _not_evaluated(name, threshold, "needs the run's eval.json (the run was not evaluated)")
    missing = [k for k in EVALUATION_REQUIRED if evaluation.get(k) is None]
    if missing:
        return _not_evaluated(name, threshold, f"eval.json lacks {', '.join(missing)}")
    step, warmup = int(evaluation["step"]), int(evaluation["occupancy_warmup_steps"])
    mean_db, background_db = float(evaluation["mean_psnr_db"]), float(evaluation["background_psnr_db"])
    if not past_occupancy_warmup(step, warmup):
        return _not_evaluated(name, threshold, f"the evaluation at step {step} lies within the occupancy "
                                               f"warm-up ({warmup} steps), where a blank render is expected")
    value = collapse_gap_db(mean_db, background_db)
    if math.isnan(value):
        return _not_evaluated(name, threshold, f"eval.json's PSNRs are not finite ({mean_db}, {background_db} dB)")
    evidence = (f"test PSNR {mean_db:.2f} dB at step {step} vs {background_db:.2f} dB for painting every pixel "
                f"the background colour ({value:+.2f} dB); threshold ±{threshold:g} dB")
    if abs(value) >= threshold:
        return Check(name, "clear", value, threshold, evidence)
    evidence += (f": the model renders only the background (its density collapsed after the occupancy "
                 f"warm-up of {warmup} steps)")
    return Check(name, "fired", value, threshold, evidence,
                 Diagnosis(name, "high", value, threshold, evidence,
                           evaluation.get("collapse_cures") or knob_text(KNOBS[name], None)))  # the capture's own


def assess(inputs: ProfileInputs) -> list[Check]:
    """Run every bottleneck check.

    Returns:
        One :class:`Check` per bottleneck, in :data:`BOTTLENECKS` order.
    """
    means = rank_phase_means(inputs.phases) if len(inputs.phases) else None
    world_size, config = inputs.world_size, inputs.config
    checks = {
        "compute_underused": _check_compute(inputs, means),
        "data_loading": _check_data(means, config),
        "hash_grid_contention": _check_contention(inputs.kernels, config),
        "communication": _check_communication(means, inputs.summary, world_size, inputs.link_busbw_gb_per_s, config),
        "load_imbalance": _check_imbalance(means, inputs.summary, world_size, config),
        "wasted_samples": _check_wasted_samples(inputs.occupancy, config),
        "occupancy_update": _check_occupancy_update(inputs.phases, means, config),
        "background_collapse": _check_background_collapse(inputs.evaluation),
    }
    return [checks[b] for b in BOTTLENECKS]


def diagnose(inputs: ProfileInputs) -> list[Diagnosis]:
    """The bottlenecks that pass their thresholds, in :data:`BOTTLENECKS` order (module docstring)."""
    return [c.diagnosis for c in assess(inputs) if c.diagnosis is not None]


def diagnoses_table(checks: list[Check]) -> pd.DataFrame:
    """The rows of ``diagnoses.csv`` (``ngptune.profiling.tables.DIAGNOSES_TABLE`` columns), one per check.

    ``fired`` is a bool; ``severity`` and ``knob`` are empty unless fired; a check that was not
    evaluated has ``value`` NaN and ``evidence`` ``"not evaluated: <why>"``.
    """
    rows = []
    for c in checks:
        d = c.diagnosis
        rows.append(
            {
                "bottleneck": c.bottleneck,
                "fired": d is not None,
                "severity": d.severity if d else "",
                "value": c.value,
                "threshold": c.threshold,
                "evidence": f"not evaluated: {c.detail}" if c.status == "not_evaluated" else c.detail,
                "knob": d.knob if d else "",
            }
        )
    return pd.DataFrame(rows, columns=list(DIAGNOSES_TABLE))


# ------------------------------------------------------------------------- from a run directory
def inputs_from_run(run_dir: Path) -> ProfileInputs:
    """:class:`ProfileInputs` from a run directory's metrics files (all ranks), its ``config.json``
    (:func:`config_of_run`) and its ``eval.json`` when there is one (:func:`evaluation_of_run`). The GPU timeline, kernels,
    overlap and link bandwidth are absent: those parts are not evaluated.

    Raises:
        DiagnosisError: a rank of the run's world size wrote no metrics file.
        ConfigError: the run's config.json is invalid (naming it).
        ngptune.profiling.runs.ProfileError, trainer.schema.MetricsError: no or corrupt metrics
            (naming the file).
    """
    from ngptune.profiling.runs import metrics_frame, phases_table, summary_table
    from trainer.rundir import RunDir

    metrics = metrics_frame(run_dir)
    world_size = int(metrics["world_size"].max())
    missing = sorted(set(range(world_size)) - set(metrics["rank"]))
    if missing:
        paths = ", ".join(str(RunDir(run_dir).metrics_path(r)) for r in missing)
        raise DiagnosisError(f"{run_dir}: world size {world_size} but ranks {missing} wrote no metrics ({paths})")
    return ProfileInputs(phases=phases_table(metrics), summary=summary_table(metrics),
                         occupancy=occupancy_records(metrics), evaluation=evaluation_of_run(run_dir),
                         config=config_of_run(run_dir))


def evaluation_of_run(run_dir: Path) -> dict[str, Any] | None:
    """The run directory's ``eval.json`` as a dict, or None when the run was not evaluated.

    Raises:
        DiagnosisError: the file is not a JSON object (naming it).
    """
    from trainer.rundir import RunDir

    path = RunDir(run_dir).eval_path
    if not path.is_file():
        return None
    try:
        evaluation = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DiagnosisError(f"{path}: not readable as JSON ({exc})") from exc
    if not isinstance(evaluation, dict):
        raise DiagnosisError(f"{path}: expected a JSON object, got {type(evaluation).__name__}")
    return evaluation


def occupancy_records(metrics: pd.DataFrame) -> pd.DataFrame:
    """Rank 0's records of a run's metrics frame (:func:`ngptune.profiling.runs.metrics_frame`), in
    step order, with the :data:`OCCUPANCY_REQUIRED` columns (NaN where the trainer logged none)."""
    rank0 = metrics[metrics["rank"] == 0].sort_values("step")
    return rank0.reindex(columns=list(OCCUPANCY_REQUIRED)).reset_index(drop=True)


def config_of_run(run_dir: Path) -> TrainConfig | None:
    """The run directory's resolved ``config.json``, or None when it has none.

    Raises:
        ConfigError: the file is not a valid trainer config (naming it).
    """
    from trainer.rundir import RunDir

    path = RunDir(run_dir).config_path
    return load_config(path) if path.is_file() else None


def diagnose_run(run_dir: Path) -> list[Diagnosis]:
    """Diagnoses of a run from its metrics files alone (all ranks); used per sweep trial
    (:func:`assess_run` gives every check, fired or not).

    Raises:
        see :func:`inputs_from_run`.
    """
    return diagnose(inputs_from_run(run_dir))


def assess_run(run_dir: Path) -> list[Check]:
    """:func:`assess` of a run from its metrics files alone (all ranks).

    Raises:
        see :func:`inputs_from_run`.
    """
    return assess(inputs_from_run(run_dir))

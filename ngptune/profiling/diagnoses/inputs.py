"""What the checks read (:class:`ProfileInputs`) and the phase tables they share: per-rank phase
means, shares of the step, the intervals after the occupancy warm-up."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ngptune.profiling.diagnoses.checks import (
    NO_PHASES, Check, DiagnosisError, Suggestion, ms_text, not_evaluated, verdict,
)
from ngptune.profiling.runs import CAPTURED, drop_warmup
from ngptune.profiling.tables import PHASES_TABLE
from trainer.contract import PHASES, TrainConfig

__all__ = [
    "ALL_PHASES", "EVALUATION_REQUIRED", "ProfileInputs", "captured_step", "past_warmup_phases", "phase_share_check",
    "phases_timed", "rank_phase_means", "rank_share", "steps_past_occupancy_warmup", "summary_column",
    "WARMUP_PHRASE", "warmup_sentence",
]

# Columns the checks read (subsets of ngptune.profiling.tables' GPU_TIMELINE_TABLE, KERNELS_TABLE, OVERLAP_TABLE).
GPU_TIMELINE_REQUIRED: tuple[str, ...] = ("t_s", "gpu", "util_pct")
KERNELS_REQUIRED: tuple[str, ...] = ("rank", "name", "total_ms", "category")
OVERLAP_REQUIRED: tuple[str, ...] = ("rank", "compute_ms", "exposed_comm_ms", "idle_ms")
OCCUPANCY_REQUIRED: tuple[str, ...] = ("step", "occupancy_fraction", "rays_per_step", "samples_per_step")
STEADY_WINDOWS_REQUIRED: tuple[str, ...] = ("rank", "from_s", "to_s")
# eval.json keys the background_collapse check reads (trainer.train.evaluate.evaluate writes them).
EVALUATION_REQUIRED: tuple[str, ...] = ("step", "mean_psnr_db", "background_psnr_db", "occupancy_warmup_steps")
ALL_PHASES: tuple[str, ...] = (*PHASES, "other")


def require_columns(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DiagnosisError(f"{what}: missing columns {missing} (has {list(df.columns)})")


@dataclasses.dataclass(frozen=True)
class ProfileInputs:
    """What the diagnoses read. Optional sources are None (or empty) when they were not collected.

    Attributes:
        phases: ``ngptune.profiling.tables.PHASES_TABLE`` columns: ``rank`` (int), ``step`` (int), ``phase``
            (one of ``trainer.contract.metrics.PHASES`` or ``"other"``), ``time_ms`` (float, mean ms per step
            of the logged interval ending at ``step``); one row per (rank, step, phase); may be empty.
        summary: one row per rank, at least ``rank``; ``compute_ms`` (used when ``phases`` has no
            phase times) and ``comm_busbw_gb_per_s`` are read when present
            (``ngptune.profiling.runs.summary_table`` builds it).
        gpu_timeline: NVML samples, at least ``t_s`` (s since the training loop started),
            ``gpu``, ``util_pct``; or None.
        kernels: kernel table of the trace window, at least ``rank``, ``name``, ``total_ms``,
            ``category`` (hash-grid kernels: :data:`~ngptune.profiling.diagnoses.contention.HASH_GRID_FWD_CATEGORY`,
            :data:`~ngptune.profiling.diagnoses.contention.HASH_GRID_BWD_CATEGORY`); or None.
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
            has is left out of a diagnosis's ``knob`` (:func:`~ngptune.profiling.diagnoses.checks.knob_text`).
        steady_windows: when each rank trained in the steady state, on ``gpu_timeline``'s clock:
            ``rank``, ``from_s``, ``to_s`` (s), one row per steady interval record
            (:func:`ngptune.profiling.collect.steady_windows`); the GPU utilisation of
            compute_underused is averaged over them. None (or empty) when unknown: then over each
            GPU's active window.

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
    steady_windows: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        require_columns(self.phases, PHASES_TABLE, "phases")
        require_columns(self.summary, ("rank",), "summary")
        unknown = sorted(set(self.phases["phase"]) - set(ALL_PHASES))
        if unknown:
            raise DiagnosisError(f"phases: unknown phases {unknown}; known: {', '.join(ALL_PHASES)}")
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
            (self.steady_windows, STEADY_WINDOWS_REQUIRED, "steady_windows"),
        ):
            if frame is not None:
                require_columns(frame, columns, what)
        if self.link_busbw_gb_per_s is not None and not self.link_busbw_gb_per_s > 0:
            raise DiagnosisError(f"link_busbw_gb_per_s: expected a positive number, got {self.link_busbw_gb_per_s!r}")

    @property
    def world_size(self) -> int:
        """Number of ranks in the phases (else in the summary)."""
        ranks = self.phases["rank"] if len(self.phases) else self.summary["rank"]
        return int(ranks.nunique())


def captured_step(inputs: ProfileInputs) -> bool:
    """Whether the run's step is captured in a CUDA graph (the summary's ``step_kind``): its phase
    times are then those of each interval's sampled eager step, not of the replays it runs."""
    kinds = inputs.summary["step_kind"] if "step_kind" in inputs.summary.columns else pd.Series(dtype=object)
    return bool((kinds == CAPTURED).any())


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
    table = table.reindex(columns=list(ALL_PHASES), fill_value=0.0).astype(float)
    table["step_time_ms"] = table[list(ALL_PHASES)].sum(axis=1)
    table.columns.name = None
    return table


def phases_timed(means: pd.DataFrame | None) -> bool:
    """Whether the phase timers recorded anything (with them off every named phase is 0)."""
    return means is not None and len(means) > 0 and float(means[list(PHASES)].to_numpy().sum()) > 0


def step_share(means: pd.DataFrame, phase: str) -> pd.Series:
    """Per-rank share of the step spent in ``phase``."""
    return means[phase] / means["step_time_ms"]


def rank_share(means: pd.DataFrame, phase: str, *, largest: bool) -> tuple[int, float]:
    """The rank with the largest (or smallest) share of its step in ``phase``, and that share."""
    share = step_share(means, phase)
    rank = int(share.idxmax() if largest else share.idxmin())
    return rank, float(share[rank])


def phase_share_check(means: pd.DataFrame | None, name: str, threshold: float, phase: str, doing: str,
                      knob: tuple[Suggestion | str, ...], config: TrainConfig | None) -> Check:
    """Fires when the rank with the largest share of its step in ``phase`` exceeds ``threshold``
    (``knob``: the diagnosis's suggestions)."""
    if not phases_timed(means):
        return not_evaluated(name, threshold, NO_PHASES)
    rank, value = rank_share(means, phase, largest=True)
    evidence = (
        f"rank {rank} spends {ms_text(means.at[rank, phase])} ms of its {ms_text(means.at[rank, 'step_time_ms'])} ms step "
        f"({value:.1%}) {doing}; threshold {threshold:.0%}"
    )
    return verdict(name, value, threshold, 0.0, evidence, knob, config, fires=value > threshold)


def summary_column(summary: pd.DataFrame, column: str) -> pd.Series | None:
    if column not in summary.columns:
        return None
    values = pd.to_numeric(summary.set_index("rank")[column], errors="coerce").dropna()
    return values if len(values) else None


WARMUP_PHRASE = "the profile's steps are all inside the occupancy warm-up"
"""How :func:`warmup_sentence` begins (the console repeats that sentence once for its checks)."""


def warmup_sentence(config: TrainConfig, last_step: int | None) -> str:
    """Why an occupancy check is not evaluated on a run that never left the occupancy warm-up,
    with the ``--steps`` that would leave it (:func:`steps_past_occupancy_warmup`)."""
    t = config.training
    ended = "" if last_step is None else f", the last record is at step {last_step}"
    return (f"{WARMUP_PHRASE} (training.occupancy_warmup_steps = "
            f"{t.occupancy_warmup_steps}{ended}), where every cell is updated every step; judging it needs "
            f"--steps {steps_past_occupancy_warmup(config)} or more")


def steps_past_occupancy_warmup(config: TrainConfig) -> int:
    """The fewest training steps whose records hold one whole logged interval after the occupancy
    warm-up and one occupancy-update period after it: with warm-up ``w``, ``log_every`` ``L``
    and ``occupancy_update_every`` ``U``, ``max(ceil(w / L)·L + L, ceil((w + U) / L)·L)``.

    >>> from trainer.contract import apply_overrides, TrainConfig
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

"""Sweep objectives and how their values come out of a trial's run directory (DESIGN.md §5).

Objectives (names as in the study file, the trials' ``objectives`` attribute and ``trials.csv``):

* ``throughput_samples_per_s`` (maximise): the mean of rank 0's ``throughput_samples_per_s`` over
  the metrics records after the warm-up (the first interval holds start-up work: allocator warm-up,
  the occupancy warm-up; the rule the profile shares, :func:`ngptune.profiling.runs.steady_records`);
  the only record when there is one. In a distributed run rank 0's
  record holds the global throughput (samples of all ranks per second).
* ``samples_per_s`` (maximise): the same measurement as ``throughput_samples_per_s``.
* ``rays_per_s`` (maximise): the mean of rank 0's ``rays_per_s`` after the warm-up, as above.
* ``psnr_at_budget_db`` (maximise): the trainer's final evaluation (``eval_psnr_db`` in
  ``status.json``) after the study's budget: ``budget.seconds`` of training, or ``budget.steps``
  steps. A step budget measures quality per step, which the load of the machine and neighbours on
  a shared GPU cannot change; its speed is ``steps_per_s``, recorded beside it for every trial and
  combined with it only by a study that names both objectives.
* ``steps_per_s`` (maximise): the mean of rank 0's ``steps_per_s`` after the warm-up.
* ``time_to_psnr_s`` (minimise): training seconds (``wall_time_s``, evaluation excluded) at the
  first evaluation whose ``eval_psnr_db`` reaches the target, from the periodic evaluations in
  ``metrics.jsonl`` (every ``eval_every_steps`` steps) and then the final one. Resolution: one
  evaluation interval. A trial that never reaches the target has no value (it is pruned, with
  the best PSNR it reached in the reason).

Throughput objectives reward work, not useful work: a configuration whose occupancy grid keeps
empty space occupied marches more samples per ray and wins on samples per second while it
trains worse. A study whose objectives are all throughputs gets :func:`throughput_only_warning`
(printed by the sweep and shown in the report); every trial is scored on PSNR regardless
(:func:`trial_quality`).

Intermediate values (for the pruner, single-objective studies only) are reported at the
trainer's step of each metrics record: the running throughput for ``throughput_samples_per_s``,
for ``psnr_at_budget_db`` the PSNR of the periodic evaluations (``eval_psnr_db`` of the records at
the study's evaluation marks, ``pruner.eval_every_steps``: the same few held-out views each time)
or, in a study without marks, the training-batch PSNR (``train_psnr_db``); ``time_to_psnr_s``
reports none. The start-up before the first step (``startup_s``, reported by the trainer) is
recorded for every trial and counted by no objective.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ngptune.profiling.runs import steady_records
from trainer.contract import METRICS_COLUMNS, PHASES, phase_column

__all__ = [
    "OBJECTIVES",
    "ObjectiveDef",
    "TargetNotReached",
    "QUALITY_OBJECTIVES",
    "THROUGHPUT_OBJECTIVES",
    "intermediate_values",
    "mean_phase_ms",
    "startup_s",
    "STARTUP_KEY",
    "TRAINER_REPORTS_STARTUP",
    "objective_value",
    "throughput_samples_per_s",
    "time_to_psnr_s",
    "throughput_only_warning",
    "trial_quality",
]


#: ``status.json`` key and first-metrics-record key of the trainer's start-up time (s).
STARTUP_KEY = "startup_s"
#: Whether the trainer's metrics schema declares ``startup_s`` (its training clock then starts
#: after the start-up; :mod:`ngptune.tuning.warmup` is needed only without it).
TRAINER_REPORTS_STARTUP = any(column.name == STARTUP_KEY for column in METRICS_COLUMNS)


def throughput_only_warning(names: Sequence[str]) -> str | None:
    """The warning for a study whose objectives ``names`` are all throughputs, else None."""
    if not names or not all(n in THROUGHPUT_OBJECTIVES for n in names):
        return None
    return (f"objective {', '.join(names)} measures throughput only: it rewards marching empty space "
            "(a grid that keeps empty cells occupied wins on samples/s and trains worse); "
            f"use {' or '.join(QUALITY_OBJECTIVES)} — every trial's PSNR is still recorded (psnr_db)")


class TargetNotReached(Exception):
    """``time_to_psnr_s``: no evaluation reached the target; carries the best PSNR seen (dB or None)."""

    def __init__(self, target_db: float, best_db: float | None) -> None:
        best = "no evaluation" if best_db is None else f"best {best_db:.2f} dB"
        super().__init__(f"PSNR target {target_db:g} dB not reached within the budget ({best})")
        self.target_db = target_db
        self.best_db = best_db


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def steady_mean(records: Sequence[Mapping[str, Any]], column: str) -> float | None:
    """Mean of ``column`` over rank-0 ``records`` (in step order) after the warm-up
    (:func:`ngptune.profiling.runs.steady_records`), or None when no record has a finite value."""
    values = [r[column] for r in steady_records(records) if _finite(r.get(column))]
    return statistics.fmean(values) if values else None


def throughput_samples_per_s(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean ``throughput_samples_per_s`` (samples/s) of rank-0 ``records`` (in step order) after the
    warm-up (:func:`ngptune.profiling.runs.steady_records`), or None when no record has a finite value."""
    return steady_mean(records, "throughput_samples_per_s")


def trial_quality(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any]) -> dict[str, float | None]:
    """What every trial is scored on, whatever its objectives (None where the run has no value).

    Returns:
        ``psnr_db`` (dB, the final evaluation's mean over the held-out views, ``eval_psnr_db`` of
        ``status.json``), ``train_time_s`` (s, training only), ``steps``, ``steps_per_s``,
        ``rays_per_s`` (rays/s) and ``samples_per_s`` (samples/s) after the warm-up,
        ``samples_per_ray`` (total samples / total rays after the warm-up), ``occupancy_fraction``
        (of the last record) and ``startup_s`` (s before the first step, :func:`startup_s`).
    """
    steady = steady_records(records)
    rays = sum(r["rays_per_step"] for r in steady if _finite(r.get("rays_per_step")))
    samples = sum(r["samples_per_step"] for r in steady if _finite(r.get("samples_per_step")))
    occupancy = [r["occupancy_fraction"] for r in records if _finite(r.get("occupancy_fraction"))]
    steps = status.get("step", records[-1]["step"] if records else None)

    def number(value: Any) -> float | None:
        return float(value) if _finite(value) else None

    return {
        "psnr_db": number(status.get("eval_psnr_db")),
        "train_time_s": number(status.get("train_time_s")),
        "steps": int(steps) if _finite(steps) else None,
        "steps_per_s": steady_mean(records, "steps_per_s"),
        "startup_s": startup_s(records, status),
        "rays_per_s": steady_mean(records, "rays_per_s"),
        "samples_per_s": throughput_samples_per_s(records),
        "samples_per_ray": samples / rays if rays > 0 else None,
        "occupancy_fraction": occupancy[-1] if occupancy else None,
    }


def startup_s(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any]) -> float | None:
    """Seconds the trainer spent before its first training step (``startup_s`` of ``status.json``,
    else of the first metrics record), or None when the trainer does not report it."""
    for value in (status.get(STARTUP_KEY), records[0].get(STARTUP_KEY) if records else None):
        if _finite(value):
            return float(value)
    return None


def time_to_psnr_s(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any], target_db: float) -> float:
    """Training seconds (``wall_time_s``) of the first periodic evaluation in ``records`` whose
    ``eval_psnr_db`` reaches ``target_db``, else of the final one in ``status`` (``eval_psnr_db``
    at ``train_time_s``).

    Raises:
        TargetNotReached: no evaluation reached the target (carries the best PSNR seen).
    """
    points = [(r["wall_time_s"], r["eval_psnr_db"]) for r in records if _finite(r.get("eval_psnr_db"))]
    if _finite(status.get("eval_psnr_db")) and _finite(status.get("train_time_s")):
        points.append((status["train_time_s"], status["eval_psnr_db"]))
    for time_s, psnr_db in points:
        if psnr_db >= target_db:
            return float(time_s)
    raise TargetNotReached(target_db, max((p for _, p in points), default=None))


def mean_phase_ms(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean time per step of each phase and ``other`` (ms) over the records after the warm-up
    (:func:`ngptune.profiling.runs.steady_records`); phases no record reports are left out."""
    steady = steady_records(records)
    out: dict[str, float] = {}
    for phase in (*PHASES, "other"):
        column = phase_column(phase)
        values = [r[column] for r in steady if _finite(r.get(column))]
        if values:
            out[phase] = statistics.fmean(values)
    return out


def _steady(column: str) -> Callable[[Sequence[Mapping[str, Any]], Mapping[str, Any], Any], float | None]:
    def value(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any], target_db: Any) -> float | None:
        return steady_mean(records, column)
    return value


def _running(column: str) -> Callable[[Sequence[Mapping[str, Any]]], list[tuple[int, float]]]:
    def values(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
        out = []
        for i, record in enumerate(records):
            value = steady_mean(records[: i + 1], column)
            if value is not None:
                out.append((int(record["step"]), value))
        return out
    return values


def _final_psnr_db(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any], target_db: Any) -> float | None:
    value = status.get("eval_psnr_db")
    return float(value) if _finite(value) else None


def _train_psnr_db(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r["train_psnr_db"])) for r in records if _finite(r.get("train_psnr_db"))]


def _time_to_target_s(records: Sequence[Mapping[str, Any]], status: Mapping[str, Any], target_db: Any) -> float:
    assert target_db is not None, "time_to_psnr_s needs target_db"
    return time_to_psnr_s(records, status, target_db)


@dataclasses.dataclass(frozen=True)
class ObjectiveDef:
    """One objective of a study.

    Attributes:
        name: as in the study file, the trials' ``objectives`` attribute and ``trials.csv``.
        direction: ``"maximize"`` or ``"minimize"`` (Optuna's words).
        unit: the unit of its values (``"samples/s"``, ``"dB"``, ``"s"``).
        quality: it measures the quality reached (held-out PSNR), not work per second.
        needs_eval: its trials need the trainer's final evaluation.
        budget: the ``[budget]`` key it needs (``"seconds"``), or None when any budget does.
        timing_sensitive: its value depends on how fast a trial trains, so trials sharing a GPU
            distort it (``--trials-per-gpu`` > 1 needs ``--allow-shared-gpu``).
        keys: the further keys of its ``[[objectives]]`` table.
        value: ``(records, status, target_db) -> value`` of a finished trial (None: the run holds no
            such measurement); may raise :class:`TargetNotReached`.
        intermediate: ``records -> [(step, value)]`` reported to the pruner, or None for none.
    """

    name: str
    direction: str
    unit: str
    quality: bool
    needs_eval: bool
    budget: str | None
    timing_sensitive: bool
    value: Callable[[Sequence[Mapping[str, Any]], Mapping[str, Any], Any], float | None]
    intermediate: Callable[[Sequence[Mapping[str, Any]]], list[tuple[int, float]]] | None = None
    keys: tuple[str, ...] = ()

    @property
    def has_intermediate(self) -> bool:
        return self.intermediate is not None


OBJECTIVES: dict[str, ObjectiveDef] = {o.name: o for o in (
    ObjectiveDef("throughput_samples_per_s", "maximize", "samples/s", False, False, None, True,
                 _steady("throughput_samples_per_s"), _running("throughput_samples_per_s")),
    ObjectiveDef("samples_per_s", "maximize", "samples/s", False, False, None, True,
                 _steady("throughput_samples_per_s"), _running("throughput_samples_per_s")),
    ObjectiveDef("rays_per_s", "maximize", "rays/s", False, False, None, True, _steady("rays_per_s"), _running("rays_per_s")),
    ObjectiveDef("psnr_at_budget_db", "maximize", "dB", True, True, None, False, _final_psnr_db, _train_psnr_db),
    ObjectiveDef("time_to_psnr_s", "minimize", "s", True, True, None, True, _time_to_target_s,
                 keys=("target_db", "eval_every_steps")),
    ObjectiveDef("steps_per_s", "maximize", "steps/s", False, False, None, True, _steady("steps_per_s"),
                 _running("steps_per_s")),
)}
"""Every objective; the study files, the pruner, the shared-GPU guard, confirmation and the reports
read this table. Adding one: its measurement in this module, one line here, a test."""

THROUGHPUT_OBJECTIVES: tuple[str, ...] = tuple(n for n, o in OBJECTIVES.items() if not o.quality)
"""Objectives that measure work done per second, not the quality it buys."""
QUALITY_OBJECTIVES: tuple[str, ...] = tuple(n for n, o in OBJECTIVES.items() if o.quality)
"""Objectives that measure the quality reached (held-out PSNR), in the order confirmation prefers them."""


def objective_value(
    name: str,
    records: Sequence[Mapping[str, Any]],
    status: Mapping[str, Any],
    *,
    target_db: float | None = None,
) -> float | None:
    """The value of objective ``name`` for a finished trial (:attr:`ObjectiveDef.value`).

    Args:
        name: a key of :data:`OBJECTIVES`.
        records: rank 0's metrics records (``trainer.contract.read_metrics``), in step order.
        status: the run's ``status.json``.
        target_db: the PSNR target of ``time_to_psnr_s``.

    Returns:
        The value in the objective's unit, or None when the run holds no such measurement.

    Raises:
        TargetNotReached: ``time_to_psnr_s`` whose target no evaluation reached.
        KeyError: unknown objective name (a programming error: study files are validated).
    """
    return OBJECTIVES[name].value(records, status, target_db)


def intermediate_values(name: str, records: Sequence[Mapping[str, Any]], *, evaluations: bool = False,
                        per_second: bool = False, at_marks: bool = False) -> list[tuple[int, float]]:
    """``(resource, value)`` pairs to report to the pruner.

    Throughputs: at record i (resource: its step), the steady mean of records 0..i (records 1..i
    after the one warm-up record; record 0 alone at i = 0). ``psnr_at_budget_db``: with
    ``evaluations`` (the study evaluates at marks) the periodic evaluations' ``eval_psnr_db`` at
    their step, or with ``per_second`` (a seconds budget) at every whole second of training between
    the first and the last evaluation, linearly interpolated in ``wall_time_s`` between the
    evaluations around it (so every trial is judged at the same seconds), or with ``at_marks``
    too (marks at the pruner's rungs, ``training.eval_at_s``) each evaluation at the whole second
    its record reached (``floor(wall_time_s)``: the rung it was taken for); without
    ``evaluations`` the training-batch ``train_psnr_db`` at each record's step.
    ``time_to_psnr_s``: none.
    """
    if name == "psnr_at_budget_db" and evaluations and not per_second:
        return [(int(r["step"]), float(r["eval_psnr_db"])) for r in records if _finite(r.get("eval_psnr_db"))]
    if name == "psnr_at_budget_db" and evaluations and at_marks:
        return [(int(math.floor(float(r["wall_time_s"]))), float(r["eval_psnr_db"])) for r in records
                if _finite(r.get("eval_psnr_db")) and _finite(r.get("wall_time_s"))]
    if name == "psnr_at_budget_db" and evaluations:
        return _per_second([(float(r["wall_time_s"]), float(r["eval_psnr_db"])) for r in records
                            if _finite(r.get("eval_psnr_db")) and _finite(r.get("wall_time_s"))])
    measure = OBJECTIVES[name].intermediate
    return [] if measure is None else measure(records)


def _per_second(marks: Sequence[tuple[float, float]]) -> list[tuple[int, float]]:
    """``(second, value)`` at each whole second from the first mark's time to the last one's,
    linearly interpolated between the ``(time_s, value)`` marks around it (in time order)."""
    out: list[tuple[int, float]] = []
    for (t0, v0), (t1, v1) in zip(marks, marks[1:]):
        second = math.ceil(t0) if not out else out[-1][0] + 1
        while second <= t1:
            if t1 > t0:
                out.append((second, v0 + (v1 - v0) * (second - t0) / (t1 - t0)))
            second += 1
    if len(marks) == 1 and float(marks[0][0]).is_integer():
        out.append((int(marks[0][0]), marks[0][1]))
    return out

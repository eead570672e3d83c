"""The diagnoses: one :class:`DiagnosisDef` (name, threshold, knob, check) per bottleneck, in the
order the profile and the reports show them. Adding one: its module in this package (``NAME``,
``THRESHOLD`` with its reasoning, ``UNIT``, ``KNOB``, ``check(inputs, means) -> Check``), one line in
:data:`DIAGNOSES`, its row in the package docstring's table, a test on both sides of the threshold."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType

import pandas as pd

from ngptune.profiling.diagnoses import (
    collapse,
    communication,
    compute,
    contention,
    data,
    imbalance,
    occupancy_update,
    wasted_samples,
)
from ngptune.profiling.diagnoses.checks import Check, Suggestion, measure_text, plain_number
from ngptune.profiling.diagnoses.inputs import ProfileInputs

__all__ = ["BOTTLENECKS", "DIAGNOSES", "DiagnosisDef", "diagnosis_measure_text"]


@dataclasses.dataclass(frozen=True)
class DiagnosisDef:
    """One bottleneck diagnosis.

    Attributes:
        name: the bottleneck (``diagnoses.csv``'s ``bottleneck``).
        threshold: the value past which it fires, in the unit of its value.
        unit: the unit of the value and the threshold (one of :data:`~ngptune.profiling.diagnoses.checks.UNITS`).
        knob: the settings it suggests (its module may pick others from the evidence).
        check: ``(inputs, per-rank phase means or None) -> Check``.
    """

    name: str
    threshold: float
    unit: str
    knob: tuple[Suggestion | str, ...]
    check: Callable[[ProfileInputs, pd.DataFrame | None], Check]

    @classmethod
    def of(cls, module: ModuleType) -> DiagnosisDef:
        """The diagnosis of a module of this package (its ``NAME``, ``THRESHOLD``, ``UNIT``, ``KNOB``, ``check``)."""
        return cls(module.NAME, module.THRESHOLD, module.UNIT, module.KNOB, module.check)


DIAGNOSES: tuple[DiagnosisDef, ...] = tuple(DiagnosisDef.of(module) for module in (
    compute,
    data,
    contention,
    communication,
    imbalance,
    wasted_samples,
    occupancy_update,
    collapse,
))
"""Every diagnosis, in the order the profile and the reports show them."""

BOTTLENECKS: tuple[str, ...] = tuple(d.name for d in DIAGNOSES)


def diagnosis_measure_text(bottleneck: str, value: float) -> str:
    """A value or threshold of ``bottleneck`` (a row of ``diagnoses.csv``) as a person reads it,
    in the bottleneck's unit (:func:`~ngptune.profiling.diagnoses.checks.measure_text`: ``11.1 %``,
    ``5.00×``); 3 significant digits for a bottleneck this version does not know; ``""`` for NaN."""
    units = {d.name: d.unit for d in DIAGNOSES}
    if bottleneck in units:
        return measure_text(value, units[bottleneck])
    return "" if value != value else plain_number(value)

"""Every check on one run's inputs, and the rows of ``diagnoses.csv``."""

from __future__ import annotations

import pandas as pd

from ngptune.profiling.diagnoses.checks import Check, Diagnosis
from ngptune.profiling.diagnoses.inputs import ProfileInputs, rank_phase_means
from ngptune.profiling.diagnoses.registry import DIAGNOSES
from ngptune.profiling.tables import DIAGNOSES_TABLE

__all__ = ["assess", "diagnose", "diagnoses_table"]


def assess(inputs: ProfileInputs) -> list[Check]:
    """Run every bottleneck check.

    Returns:
        One :class:`Check` per diagnosis, in :data:`DIAGNOSES` order.
    """
    means = rank_phase_means(inputs.phases) if len(inputs.phases) else None
    return [diagnosis.check(inputs, means) for diagnosis in DIAGNOSES]


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

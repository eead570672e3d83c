"""What a diagnosis check returns, and the rules every check shares: the severity from how far the
value is past its threshold, the knob text from the suggested settings (without those the run
already has), the sentences of a check that could not be evaluated, and how a value and its
threshold read (:func:`measure_text`: a share as a percentage, a ratio with ×)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ngptune.errors import NgptuneError
from trainer.contract import TrainConfig

__all__ = [
    "NO_PHASES", "SEVERITIES", "SINGLE_RANK", "UNITS", "Check", "Diagnosis", "DiagnosisError", "Suggestion",
    "knob_text", "measure_text", "ms_text", "not_evaluated", "plain_number", "severity", "verdict",
]

SEVERITIES: tuple[str, ...] = ("high", "medium", "low")
SEVERITY_HIGH_EXCESS = 2.0
SEVERITY_MEDIUM_EXCESS = 1.5
NO_PHASES = "needs the trainer's phase timers (no phase times were recorded)"
SINGLE_RANK = "needs more than one rank (this run has one)"


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
        setting = self.key if self.value is None else f"{self.key}={value_text(self.value)}"
        return f"{setting} ({self.how})" if self.how else setting


UNITS: tuple[str, ...] = ("share", "%", "ratio", "dB")
"""The units of a diagnosis's value and threshold (its module's ``UNIT``): a share of 1
(``0.111``, shown ``11.1 %``), a percentage (``80.0``), a ratio (``1.15``, shown ``1.15×``), dB."""


def plain_number(value: float) -> str:
    """``value`` with 3 significant digits, never in exponent notation: ``0.428``, ``31``, ``1080``."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def ms_text(value: float) -> str:
    """A duration in milliseconds as the product writes them, without the unit: 1 decimal
    (``8.3``, ``49.7``, ``1080.0``)."""
    return f"{value:.1f}"


def measure_text(value: float, unit: str) -> str:
    """A diagnosis's value or threshold as a person reads it, in ``unit`` (:data:`UNITS`):
    ``11.1 %`` (a share of 0.111), ``80.0 %``, ``5.00×``, ``0.10 dB``; ``""`` for NaN.

    Raises:
        ValueError: ``unit`` is not one of :data:`UNITS`.
    """
    if unit not in UNITS:
        raise ValueError(f"measure_text: unit {unit!r} is not one of {', '.join(UNITS)}")
    if value != value:
        return ""
    if unit == "share":
        return f"{100 * value:.1f} %"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "ratio":
        return f"{value:.2f}×" if abs(value) < 100 else f"{plain_number(value)}×"
    return f"{value:.2f} dB"


def value_text(value: Any) -> str:
    """A config value as a study file or ``--set`` writes it (``true``, ``none``, ``bf16``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_value(config: TrainConfig, key: str) -> tuple[bool, Any]:
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
            found, current = config_value(config, s.key)
            if found and value_text(current).lower() == value_text(s.value).lower():
                already.append(f"{s.key}={value_text(s.value)}")
                continue
        kept.append(s if isinstance(s, str) else s.text())
    if not kept:
        return "nothing left to suggest: the run already uses " + ", ".join(already)
    return ", or ".join(kept) + (f" (the run already uses {', '.join(already)})" if already else "")


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


def severity(value: float, threshold: float, ideal: float) -> str:
    excess = (value - ideal) / (threshold - ideal)
    if excess >= SEVERITY_HIGH_EXCESS:
        return "high"
    if excess >= SEVERITY_MEDIUM_EXCESS:
        return "medium"
    return "low"


def verdict(
    bottleneck: str, value: float, threshold: float, ideal: float, evidence: str,
    suggestions: tuple[Suggestion | str, ...], config: TrainConfig | None, *, fires: bool
) -> Check:
    if not fires:
        return Check(bottleneck, "clear", value, threshold, evidence)
    diagnosis = Diagnosis(bottleneck, severity(value, threshold, ideal), value, threshold, evidence,
                          knob_text(suggestions, config))
    return Check(bottleneck, "fired", value, threshold, evidence, diagnosis)


def not_evaluated(bottleneck: str, threshold: float, why: str) -> Check:
    return Check(bottleneck, "not_evaluated", math.nan, threshold, why)

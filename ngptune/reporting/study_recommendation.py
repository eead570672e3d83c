"""What a study recommends (:class:`Recommendation`, from its confirmation record) and how its
numbers read against the default (units from the quantity's name, changes in its own terms)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ngptune.reporting.study_data import CONFIRMATION_ATTR, StudyView

__all__ = ["Recommendation", "best_heading", "change_text", "objective_unit", "recommendation"]


def objective_unit(name: str) -> str:
    """The unit a quantity's name ends with (``_db`` → ``dB``, ``_ms`` → ``ms``, ``_per_s`` → ``/s``,
    ``_s`` → ``s``); ``""`` when it names none. A trailing `` (max)`` or `` (dB)`` is read too."""
    base = name.split(" (")[0]
    if name.endswith("(dB)") or base.endswith("_db"):
        return "dB"
    if base.endswith("_per_s"):
        return "/s"
    if base.endswith("_ms"):
        return "ms"
    if base.endswith("_s"):
        return "s"
    return ""


def change_text(name: str, value: float, default: float) -> str:
    """A change against the default, in the quantity's own terms: a PSNR (dB) or a time (s, ms) as
    a difference (``+0.8 dB``, ``-1.2 s``), anything else (throughput, counts) in percent of the
    default; ``""`` when either value is missing."""
    if not (math.isfinite(value) and math.isfinite(default)):
        return ""
    unit = objective_unit(name)
    if unit in ("dB", "s", "ms"):
        return f"{value - default:+.3g} {unit}"
    if default == 0:
        return ""
    return f"{(value - default) / abs(default) * 100.0:+.1f} %"


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What the study recommends, from its confirmation record (study attribute ``confirmation``).

    Attributes:
        trial: the recommended trial's number, or None when no trial completed.
        is_default: whether the recommended trial is the default.
        confirmed: whether re-runs upheld the best against the default (or the best is the default).
        sentence: one sentence saying what is recommended and why.
    """

    trial: int | None
    is_default: bool
    confirmed: bool
    sentence: str


def why_not_confirmed(verdict: Mapping[str, Any], repeats: Any) -> str:
    objective = str(verdict.get("objective", "the objective"))
    gain, se = verdict.get("gain"), verdict.get("se")
    if isinstance(gain, (int, float)) and isinstance(se, (int, float)):
        unit = objective_unit(objective)
        unit = "" if unit == "/s" else f" {unit}"
        runs = f"in {repeats} re-runs each with new seeds" if repeats else "in its re-runs"
        return (f"{runs} the best's {objective} was {gain:+.3g}{unit} against the default's, not more than the "
                f"re-runs' noise (standard error {se:.2g}{unit})")
    return str(verdict.get("sentence") or "its re-runs did not uphold it").split(": the default is recommended")[0]


def recommendation(view: StudyView) -> Recommendation:
    """The study's :class:`Recommendation`: the verdict's ``recommend`` (``best`` or ``default``)
    when a confirmation finished; without one the best, unconfirmed (or the default when it is the best)."""
    if not view.best:
        return Recommendation(None, False, False, "No trial completed: nothing is recommended.")
    best = view.best[0]
    default_number = None if view.default is None else view.default.number
    record = view.study.user_attrs.get(CONFIRMATION_ATTR)
    verdict = record.get("verdict") if isinstance(record, dict) else None
    if not isinstance(verdict, dict):
        if best.number == default_number:
            return Recommendation(best.number, True, True, f"The default (trial #{best.number}) is recommended: "
                                  "no trial beat it.")
        return Recommendation(best.number, False, False, f"Best trial #{best.number} is recommended unconfirmed: no "
                              "re-runs of best and default are recorded (--no-confirm, or the default trial did "
                              "not complete).")
    best_number = verdict.get("best_trial", best.number)
    if verdict.get("recommend") == "default":
        number = verdict.get("default_trial", default_number)
        why = why_not_confirmed(verdict, record.get("repeats"))
        return Recommendation(number, True, False, f"The default (trial #{number}) is recommended, not best trial "
                              f"#{best_number}, which was not confirmed: {why}.")
    if verdict.get("status") == "best_is_default":
        return Recommendation(best_number, True, True, f"The default (trial #{best_number}) is recommended: "
                              "no trial beat it.")
    if verdict.get("confirmed"):
        return Recommendation(best_number, False, True, f"Best trial #{best_number} is recommended: "
                              f"{verdict.get('sentence', 'confirmed')}.")
    return Recommendation(best_number, False, False, f"Best trial #{best_number} is recommended unconfirmed: "
                          f"{verdict.get('sentence', 'no confirmation')}.")


def best_heading(view: StudyView, what: str) -> str:
    """A best-vs-default heading; it says so when the best was not confirmed."""
    default_number = None if view.default is None else view.default.number
    if not view.best or view.best[0].number == default_number or recommendation(view).confirmed:
        return what
    end = what.lower().index("best") + len("best")
    return what[:end] + " (not confirmed)" + what[end:]

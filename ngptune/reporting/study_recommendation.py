"""What a study recommends (:class:`Recommendation`, from its confirmation record) and how its
numbers read against the default (units from the quantity's name, changes in its own terms)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ngptune.reporting.study_data import CONFIRMATION_ATTR, StudyView
from trainer.contract import number_text

__all__ = ["RE_RUN_VERDICTS", "Recommendation", "best_heading", "change_text", "objective_unit", "recommendation",
           "verdict_of"]


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
    a difference at the precision it is read at (:func:`trainer.contract.number_text`: ``+0.80 dB``,
    ``-0.06 dB``, ``+0.00 dB``, ``-1.2 s``), anything else (throughput, counts) in percent of the
    default; ``""`` when either value is missing."""
    if not (math.isfinite(value) and math.isfinite(default)):
        return ""
    unit = objective_unit(name)
    if unit in ("dB", "s", "ms"):
        text = number_text(f"value_{unit.lower()}", value - default).removeprefix("-")
        sign = "-" if value < default and float(text) != 0 else "+"
        return f"{sign}{text} {unit}"
    if default == 0:
        return ""
    return f"{(value - default) / abs(default) * 100.0:+.1f} %"


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What the study recommends, from its confirmation record (study attribute ``confirmation``).

    Attributes:
        trial: the recommended trial's number, or None when no trial completed.
        is_default: whether the recommended trial is the default.
        confirmed: whether re-runs (recorded, of both configurations) uphold the recommendation.
        sentence: one sentence saying what is recommended and why.
        re_run: whether the recommendation is the verdict of the test on complete re-runs of both
            (:data:`RE_RUN_VERDICTS`: a confirmed gain, or the default kept because the best did
            not beat it significantly).
    """

    trial: int | None
    is_default: bool
    confirmed: bool
    sentence: str
    re_run: bool = False


def verdict_of(record: Any) -> dict[str, Any] | None:
    """The verdict of a confirmation record, or None."""
    verdict = record.get("verdict") if isinstance(record, Mapping) else None
    return verdict if isinstance(verdict, dict) else None


def recommendation(view: StudyView) -> Recommendation:
    """The study's :class:`Recommendation`: the verdict's ``recommend`` (the candidate re-run, or
    the default) when a confirmation finished; without one the best single run, unconfirmed.
    ``confirmed`` needs the verdict to say so and its re-runs to be recorded."""
    if not view.best:
        return Recommendation(None, False, False, "No trial completed: nothing is recommended.")
    best = view.best[0]
    default_number = None if view.default is None else view.default.number
    record = view.study.user_attrs.get(CONFIRMATION_ATTR)
    verdict = verdict_of(record)
    if verdict is None:
        if best.number == default_number:
            why = ("no other trial completed, so nothing was re-run against it"
                   if all(t.number == default_number for t in view.completed)
                   else "it won its single run and no re-runs are recorded")
            return Recommendation(best.number, True, False,
                                  f"The default (trial #{best.number}) is recommended unconfirmed: {why}.")
        return Recommendation(best.number, False, False, f"Best trial #{best.number} is recommended unconfirmed: no "
                              "re-runs of it and the default are recorded (--no-confirm, or the default trial did "
                              "not complete).")
    is_default = verdict.get("recommend") == "default" or verdict.get("status") == "best_is_default"
    number = verdict.get("default_trial", default_number) if is_default else verdict.get("best_trial", best.number)
    complete = _both_re_run(record)
    confirmed = bool(verdict.get("confirmed")) and complete
    tested = complete and verdict.get("status") in RE_RUN_VERDICTS
    lead = f"The default (trial #{number})" if is_default else f"Trial #{number}"
    sentence = str(verdict.get("sentence") or "no verdict sentence recorded").rstrip(".")
    sentence = sentence.replace("; the default is recommended;", ";").replace(" and is recommended;", ";")
    more = ""
    if tested and verdict.get("status") == "no_significant_difference":
        n = len(verdict.get("best_values") or [])
        more = (f" More re-runs tell a smaller difference from noise: run the sweep again with --confirm-runs "
                f"{max(2 * n, 6)} (the {n} recorded each are reused).")
    return Recommendation(number, is_default, confirmed,
                          f"{lead} is recommended{'' if tested else ' (not confirmed by re-runs)'}: {sentence}.{more}",
                          re_run=tested)


#: Verdicts taken by the test on complete re-runs (``ngptune.tuning.confirm``): their
#: recommendation follows the evidence, whichever configuration it keeps.
RE_RUN_VERDICTS = ("confirmed", "default_better", "no_significant_difference")


def _both_re_run(record: Mapping[str, Any]) -> bool:
    """Whether the record holds at least two completed re-runs of both its trials."""
    counts: dict[Any, int] = {}
    for run in record.get("runs", []) if isinstance(record, Mapping) else []:
        if isinstance(run, Mapping) and run.get("outcome") == "completed":
            trial = run.get("trial", record.get(f"{run.get('label')}_trial"))
            counts[trial] = counts.get(trial, 0) + 1
    return all(counts.get(record.get(key), 0) >= 2 for key in ("best_trial", "default_trial"))


def best_heading(view: StudyView, what: str) -> str:
    """A heading of single-run numbers: it says they are single runs."""
    return f"{what} (single runs)"

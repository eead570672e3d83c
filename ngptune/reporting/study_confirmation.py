"""The confirmation re-runs of a study as its headline shows them: for the candidate (the best
non-default trial) and the default, each quantity's mean, sample standard deviation and count over
the completed re-runs recorded in the study attribute ``confirmation``
(:mod:`ngptune.tuning.confirm`)."""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Mapping
from typing import Any

import optuna

from ngptune.reporting.study_data import CONFIRMATION_ATTR
from ngptune.reporting.study_recommendation import verdict_of
from trainer.contract import number_text, quantity_text, unit_of

__all__ = ["CONFIRMATION_QUANTITIES", "ConfirmationSummary", "Spread", "confirmation_summary", "spread_text"]


#: Quantities of the confirmation's headline, after the objective: keys of a run's quality, each
#: the label of its row (its cells give the unit the name ends with).
CONFIRMATION_QUANTITIES: tuple[str, ...] = ("psnr_db", "steps", "steps_per_s", "train_time_s")


@dataclasses.dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and count of a quantity over re-runs (NaN when n is 0)."""

    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, values: list[Any]) -> "Spread":
        finite = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v)]
        if not finite:
            return cls(math.nan, math.nan, 0)
        return cls(statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0, len(finite))


@dataclasses.dataclass(frozen=True)
class ConfirmationSummary:
    """The confirmation runs of a study, as the headline shows them.

    Attributes:
        objective: the objective judged.
        candidate, default: the trial numbers re-run (candidate: the best non-default trial).
        repeats: re-runs asked of each.
        rows: quantity name → (default's :class:`Spread`, candidate's :class:`Spread`); the
            objective first, then :data:`CONFIRMATION_QUANTITIES`.
        verdict: the recorded verdict, or None when the confirmation did not finish.
    """

    objective: str
    candidate: int
    default: int
    repeats: int
    rows: dict[str, tuple[Spread, Spread]]
    verdict: dict[str, Any] | None

    @property
    def complete(self) -> bool:
        """Whether both configurations have at least two re-runs with an objective value."""
        default, candidate = next(iter(self.rows.values()))
        return default.n >= 2 and candidate.n >= 2


def confirmation_summary(study: optuna.Study) -> ConfirmationSummary | None:
    """The :class:`ConfirmationSummary` of the study's confirmation record (completed re-runs of
    the candidate and the default, indices below ``repeats``); None without a record or runs."""
    record = study.user_attrs.get(CONFIRMATION_ATTR)
    if not isinstance(record, Mapping) or not record.get("runs"):
        return None
    try:
        candidate, default, repeats = int(record["best_trial"]), int(record["default_trial"]), int(record["repeats"])
    except (KeyError, TypeError, ValueError):
        return None
    by_trial: dict[int, list[dict[str, Any]]] = {candidate: [], default: []}
    for run in record["runs"]:
        trial = run.get("trial", record.get(f"{run.get('label')}_trial"))
        if trial in by_trial and run.get("outcome") == "completed" and int(run.get("index", repeats)) < repeats:
            by_trial[int(trial)].append(run)
    if not by_trial[candidate] and not by_trial[default]:
        return None
    objective = str(record.get("objective", "objective"))
    rows = {objective: (Spread.of([r.get("value") for r in by_trial[default]]),
                        Spread.of([r.get("value") for r in by_trial[candidate]]))}
    for key in CONFIRMATION_QUANTITIES:
        if key == "psnr_db" and objective == "psnr_at_budget_db":
            continue  # the objective's row
        rows[key] = (Spread.of([(r.get("quality") or {}).get(key) for r in by_trial[default]]),
                       Spread.of([(r.get("quality") or {}).get(key) for r in by_trial[candidate]]))
    return ConfirmationSummary(objective, candidate, default, repeats, rows, verdict_of(record))


_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?: ([kMGT]))?")
_PREFIX_SCALE = {None: 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def spread_text(spread: Spread, name: str) -> str:
    """``mean ± sd unit (n=K)`` of the quantity ``name``: the mean at the precision it is read at
    (:func:`trainer.contract.number_text`), the sd with the mean's decimals and SI prefix
    (``19.31 ± 0.17 dB (n=3)``, ``8.4 ± 1.6 s (n=3)``, ``29.4 ± 7.3 steps/s (n=3)``,
    ``6645 ± 7 (n=2)``), or ``no run`` when n is 0."""
    if spread.n == 0:
        return "no run"
    mean = number_text(name, spread.mean)
    form = _NUMBER.fullmatch(mean)
    if form is None or not math.isfinite(spread.sd):
        return f"{mean} ± {quantity_text(name, spread.sd)} (n={spread.n})"
    decimals, prefix = len(form.group(1) or ""), form.group(2)
    sd = f"{spread.sd / _PREFIX_SCALE[prefix]:.{decimals}f}" + (f" {prefix}" if prefix else "")
    unit = unit_of(name)
    return f"{mean} ± {sd}{' ' + unit if unit else ''} (n={spread.n})"

"""Confirmation: re-run a tuned configuration against the default before one is recommended.

A study's best trial is the maximum of noisy measurements: with a short budget per trial, the
winner is partly the luckiest run. Before ``best_config.json`` is offered, the *candidate* — the
best trial (:func:`ngptune.tuning.outputs.representative_trial`) or, when the default won its
single run, the best non-default trial (:func:`ngptune.tuning.outputs.candidate_trial`) — and the
default (the untuned trial 0) are each trained ``K`` more times (:data:`DEFAULT_REPEATS_GPU` on a
GPU, :data:`DEFAULT_REPEATS_CPU` on a CPU) with the trials' budget, on the same ranks, with seeds
no trial used, in alternating order (candidate, default, default, candidate, ...: a drift of the
machine over time, e.g. another job or clock throttling, falls on both alike). A default that won
by one lucky run is therefore re-run against the runner-up like any other best.

The verdict is taken on the study's quality objective (:func:`primary_objective`: the first of
``psnr_at_budget_db``, ``time_to_psnr_s`` among its objectives, else its first objective) with
Welch's t-test (unequal variances, two-sided, :func:`scipy.stats.ttest_ind` with
``equal_var=False``) on the two samples of K re-run values at :data:`ALPHA` = 0.05:

* ``confirmed``: p < ALPHA and the candidate's mean is better: the candidate is recommended;
* ``default_better``: p < ALPHA and the default's mean is better: the default is recommended;
* ``no_significant_difference``: p >= ALPHA: the default is recommended (a change needs evidence);
* ``not_confirmed``: a re-run of the candidate gave no value (crash, out of memory, target not
  reached): the default is recommended;
* ``unconfirmed``: no evidence: ``--no-confirm``, the default trial gave no value, fewer than
  :data:`MIN_REPEATS` of the default's re-runs gave one, or no other trial completed. ``confirmed`` is false and the verdict lists no runs.

``Verdict.confirmed`` is true only for ``confirmed`` and ``default_better``, which always carry
their re-runs: nothing is called confirmed without runs. Two samples without spread (every re-run
equal) have p = 0 when their means differ, else 1.

K is at least 2 (:data:`MIN_REPEATS`): one re-run each gives no estimate of the noise. A
default re-run without a value (a rank killed from outside) leaves the others as evidence: the
test is taken on those that gave one when at least :data:`MIN_REPEATS` did.

Every re-run is recorded in the study's user attribute ``confirmation`` as soon as it ends
(:data:`CONFIRMATION_ATTR`), under its trial number and index: re-run ``i`` of a trial is the
same training whichever trial it is compared with (seed ``base + 1000 + i``). A sweep started
again resumes the confirmation where it stopped, reuses the completed re-runs it already has when
K grows or a new candidate is compared with the same default, and runs only what is missing. A
re-run stopped by Ctrl-C or a kill is not recorded and runs again from the start; a failed one
counts against its configuration in the sweep it failed in, and runs again in the next. Failed
re-runs stay listed in the record (``failed_runs``, with their reasons) after a later sweep
re-runs them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ngptune.tuning.objectives import QUALITY_OBJECTIVES
from trainer.contract import number_text, unit_of

__all__ = [
    "ALPHA",
    "CONFIRMATION_ATTR",
    "DEFAULT_REPEATS_CPU",
    "DEFAULT_REPEATS_GPU",
    "MAX_REPEATS",
    "MIN_REPEATS",
    "TEST_NAME",
    "ConfirmRun",
    "Verdict",
    "confirm_study",
    "decide",
    "failed_runs",
    "no_candidate",
    "pending",
    "primary_objective",
    "recorded_extent",
    "recorded_repeats",
    "reused_runs",
    "run_order",
    "spread",
    "unconfirmed",
    "verdict_runs",
    "welch_p_value",
]

CONFIRMATION_ATTR = "confirmation"
DEFAULT_REPEATS_GPU = 3
DEFAULT_REPEATS_CPU = 3
MIN_REPEATS = 2
MAX_REPEATS = 100  # --confirm-runs: more is a typo, not a confirmation
#: Seeds of the confirmation runs: the base config's ``training.seed`` plus this plus the pair index.
SEED_OFFSET = 1000
#: Significance level of the verdict's test.
ALPHA = 0.05
TEST_NAME = "Welch's t-test (two-sided, unequal variances)"
#: Statuses whose recommendation the re-runs uphold (they always carry runs).
UPHELD = ("confirmed", "default_better")


@dataclasses.dataclass(frozen=True)
class ConfirmRun:
    """One re-run: which configuration (``"best"``, the candidate, or ``"default"``) and trial, its
    index in 0..K-1, its seed, the objective's value (None when the run gave none), what every trial
    is scored on (:func:`ngptune.tuning.objectives.trial_quality`), its outcome and the reason of a
    failure."""

    label: str
    trial: int
    index: int
    seed: int
    value: float | None
    quality: dict[str, Any]
    outcome: str
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of a confirmation.

    Attributes:
        status: ``confirmed``, ``default_better``, ``no_significant_difference``, ``not_confirmed``,
            ``unconfirmed`` (the module docstring) or ``pending`` (other workers' trials still run:
            the last worker to finish confirms and recommends).
        recommend: ``"best"`` (the candidate), ``"default"`` or ``""`` (pending: nothing yet).
        objective, direction: the objective judged and Optuna's direction word for it.
        best_values, default_values: the re-runs' values (None for a failed run); ``best`` is the
            candidate (the best non-default trial).
        best_trial, default_trial: trial numbers (None when absent).
        gain: mean difference in the good direction (objective's unit), or None.
        se: its standard error ``sqrt(s_b²/n_b + s_d²/n_d)``, or None.
        p_value: Welch's t-test p-value (two-sided), or None when no test ran.
        test: the test's name (:data:`TEST_NAME`) and level, or "" when no test ran.
        default_won_single_run: the default was the best single run, so the candidate is the runner-up.
        sentence: one line for the terminal and the report.
    """

    status: str
    recommend: str
    objective: str
    direction: str
    best_values: tuple[float | None, ...] = ()
    default_values: tuple[float | None, ...] = ()
    best_trial: int | None = None
    default_trial: int | None = None
    gain: float | None = None
    se: float | None = None
    p_value: float | None = None
    test: str = ""
    default_won_single_run: bool = False
    sentence: str = ""

    @property
    def confirmed(self) -> bool:
        """Whether re-runs uphold the recommendation (``confirmed`` or ``default_better``)."""
        return self.status in UPHELD and bool(self.best_values) and bool(self.default_values)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "confirmed": self.confirmed}


def primary_objective(names: Sequence[str]) -> str:
    """The objective a confirmation judges: the first quality objective of
    :data:`~ngptune.tuning.objectives.QUALITY_OBJECTIVES` (``psnr_at_budget_db``, else
    ``time_to_psnr_s``) the study has, else its first."""
    for name in QUALITY_OBJECTIVES:
        if name in names:
            return name
    return names[0]


def run_order(repeats: int) -> list[tuple[str, int]]:
    """``(label, index)`` of the re-runs in launch order: pairs alternate which goes first.

    >>> run_order(2)
    [('best', 0), ('default', 0), ('default', 1), ('best', 1)]
    """
    order: list[tuple[str, int]] = []
    for i in range(repeats):
        pair = [("best", i), ("default", i)]
        order.extend(pair if i % 2 == 0 else pair[::-1])
    return order


def spread(values: Sequence[float]) -> float:
    """Sample standard deviation (0 for fewer than two values)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _number(objective: str, value: float, unit: str) -> str:
    """``value`` of ``objective`` at the precision it is read at (:func:`trainer.contract.number_text`:
    dB with 2 decimals, seconds with 1, rates with 3 significant digits)."""
    return number_text(objective, value) if unit_of(objective) else f"{value:.4g}"


def _unit(objective: str, unit: str) -> str:
    return f" {unit_of(objective) or unit}".rstrip()


def _describe(values: Sequence[float], objective: str, unit: str) -> str:
    """``mean ± sd unit`` of re-run values (``19.31 ± 0.17 dB``)."""
    return (f"{_number(objective, statistics.fmean(values), unit)} ± {_number(objective, spread(values), unit)}"
            f"{_unit(objective, unit)}")


def _signed(objective: str, value: float, unit: str) -> str:
    """A difference with its sign and unit (``-0.06 dB``, ``+0.00 dB``)."""
    text = _number(objective, value, unit).removeprefix("-")
    return f"{'-' if value < 0 and float(text.split()[0]) != 0 else '+'}{text}{_unit(objective, unit)}"


def welch_p_value(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test that ``a`` and ``b`` have the same mean
    (:func:`scipy.stats.ttest_ind`, ``equal_var=False``; Welch 1947). Two samples without spread
    give 0 when their means differ, else 1.

    Raises:
        ValueError: a sample with fewer than two values.
    """
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's t-test needs two values per sample, got {len(a)} and {len(b)}")
    if spread(a) == 0.0 and spread(b) == 0.0:
        return 0.0 if statistics.fmean(a) != statistics.fmean(b) else 1.0
    from scipy import stats

    return float(stats.ttest_ind(list(a), list(b), equal_var=False).pvalue)


def decide(objective: str, direction: str, best_values: Sequence[float | None], default_values: Sequence[float | None],
           *, unit: str = "", best_trial: int | None = None, default_trial: int | None = None,
           default_won_single_run: bool = False) -> Verdict:
    """The verdict on re-run values (the rule of the module docstring).

    Args:
        objective: the objective's name; direction: ``"maximize"`` or ``"minimize"``.
        best_values, default_values: the re-runs' values of the candidate and the default, None
            for a run without one.
        unit: the objective's unit, for the sentence.
        best_trial, default_trial: the trials re-run.
        default_won_single_run: the default was the best single run (the candidate is the runner-up).
    """
    common = dict(objective=objective, direction=direction, best_values=tuple(best_values),
                  default_values=tuple(default_values), best_trial=best_trial, default_trial=default_trial,
                  default_won_single_run=default_won_single_run)
    good_b = [v for v in best_values if v is not None and math.isfinite(v)]
    good_d = [v for v in default_values if v is not None and math.isfinite(v)]
    who = (f"trial {best_trial} (the runner-up: the default won its single run)" if default_won_single_run
           else f"trial {best_trial}")
    if not best_values or len(good_b) < len(best_values):
        failed = len(best_values) - len(good_b)
        return Verdict("not_confirmed", "default", **common, sentence=(
            f"not confirmed: {who} gave no {objective} in {failed} of its {len(best_values)} re-runs: "
            "the default is recommended"))
    if len(good_d) < MIN_REPEATS or len(good_b) < MIN_REPEATS:
        return Verdict("unconfirmed", "default" if default_won_single_run else "best", **common, sentence=(
            f"unconfirmed: {len(default_values) - len(good_d)} of the default's {len(default_values)} re-runs gave "
            f"no {objective}, so there is no evidence either way; "
            + ("the default is recommended" if default_won_single_run else f"{who} is recommended")))
    sign = 1.0 if direction == "maximize" else -1.0
    gain = sign * (statistics.fmean(good_b) - statistics.fmean(good_d))
    se = math.sqrt(spread(good_b) ** 2 / len(good_b) + spread(good_d) ** 2 / len(good_d))
    p = welch_p_value(good_b, good_d)
    test = f"{TEST_NAME}, alpha {ALPHA:g}"
    shown = (f"{objective}: trial {best_trial} {_describe(good_b, objective, unit)} vs default "
             f"{_describe(good_d, objective, unit)}, "
             f"{_runs_counted(len(good_b), len(good_d), len(default_values))} (mean ± sd); Welch's t-test p = {p:.2g}")
    stats_ = dict(gain=gain, se=se, p_value=p, test=test)
    if p < ALPHA and gain > 0:
        return Verdict("confirmed", "best", **common, **stats_,
                       sentence=f"confirmed: {who} beats the default; {shown} < {ALPHA:g}")
    if p < ALPHA and gain < 0:
        return Verdict("default_better", "default", **common, **stats_, sentence=(
            f"the default is significantly better than {who} and is recommended; {shown} < {ALPHA:g}"))
    return Verdict("no_significant_difference", "default", **common, **stats_, sentence=(
        f"no significant difference between {who} and the default (gain {_signed(objective, gain, unit)}); "
        f"the default is recommended; {shown} >= {ALPHA:g}"))


def _runs_counted(n_best: int, n_default: int, default_runs: int) -> str:
    """``3 re-runs each``, or ``3 re-runs of the candidate and 2 of the default's 3 (1 gave no value)``."""
    if n_best == n_default == default_runs:
        return f"{n_best} re-runs each"
    return (f"{n_best} re-runs of the candidate and {n_default} of the default's {default_runs} "
            f"({default_runs - n_default} gave no value)")


def unconfirmed(objective: str, direction: str, why: str, *, best_trial: int | None,
                default_trial: int | None, recommend: str = "best") -> Verdict:
    """The verdict of a study whose candidate was not re-run (``--no-confirm``, no default trial):
    the best single run is recommended (``recommend`` ``"default"`` when that was the default)."""
    if recommend == "default":
        sentence = (f"unconfirmed: {why}; the default (trial {default_trial}) won its single run and is recommended "
                    "without re-runs")
    else:
        sentence = f"unconfirmed: {why}; the best (trial {best_trial}) was not re-run against the default"
    return Verdict("unconfirmed", recommend, objective, direction, best_trial=best_trial, default_trial=default_trial,
                   default_won_single_run=recommend == "default", sentence=sentence)


def no_candidate(objective: str, direction: str, default_trial: int) -> Verdict:
    """The verdict of a study in which only the default trial completed: nothing to re-run it against."""
    return Verdict("unconfirmed", "default", objective, direction, best_trial=None, default_trial=default_trial,
                   sentence=(f"unconfirmed: no trial other than the default (trial {default_trial}) completed, "
                             "so nothing was re-run against it; the default is recommended"))


def pending(objective: str, direction: str, running: Sequence[int]) -> Verdict:
    """No verdict yet: trials of other workers still run (their numbers in ``running``)."""
    shown = ", ".join(map(str, running))
    return Verdict("pending", "", objective, direction, sentence=(
        f"trial{'s' if len(running) != 1 else ''} {shown} of other workers still running: the last worker to "
        "finish confirms the best and writes best_config.json"))


#: ``launch(label, trial, index, seed) -> ConfirmRun``: trains one re-run of ``trial``'s configuration.
Launch = Callable[[str, Any, int, int], ConfirmRun]


def _recorded_runs(record: Mapping[str, Any] | None, objective: str) -> dict[tuple[int, int], dict[str, Any]]:
    """``(trial number, index) -> run`` of the completed re-runs recorded for ``objective`` (a
    record of another objective holds none; runs without a trial number name it by their label).
    A failed re-run is not reused: the next sweep runs it again (a rank killed from outside, e.g.
    by the kernel's OOM killer, is not evidence about the configuration)."""
    if not isinstance(record, Mapping) or record.get("objective") != objective:
        return {}
    runs = {}
    for r in record.get("runs", []):
        trial = r.get("trial", record.get(f"{r.get('label')}_trial"))
        if r.get("outcome") == "completed" and trial is not None:
            runs[(int(trial), int(r["index"]))] = {**r, "trial": int(trial)}
    return runs


def failed_runs(record: Mapping[str, Any] | None, objective: str) -> list[dict[str, Any]]:
    """The re-runs recorded for ``objective`` that gave no value (failed, or no value from their
    records), oldest first: those listed as failed and those still among the runs."""
    if not isinstance(record, Mapping) or record.get("objective") != objective:
        return []
    listed = [r for r in record.get("failed_runs", []) if isinstance(r, Mapping)]
    return listed + [r for r in record.get("runs", []) if isinstance(r, Mapping) and r.get("outcome") != "completed"]


def confirm_study(study, *, best, default, repeats: int, objective: str, direction: str, unit: str, base_seed: int,
                  launch: Launch, on_run: Callable[[ConfirmRun], None] | None = None,
                  default_won_single_run: bool = False) -> Verdict:
    """Re-run the candidate ``best`` and ``default`` (Optuna trials) ``repeats`` times each and
    decide (module docstring).

    Re-runs recorded in ``study.user_attrs["confirmation"]`` for the same objective (by trial
    number and index) are not run again; each new run is recorded as soon as it ends.

    Args:
        study: the Optuna study (its user attributes hold the record).
        best, default: the trials to re-run: the candidate (never the default) and the default.
        repeats: K >= :data:`MIN_REPEATS`.
        objective, direction, unit: the objective judged (:func:`primary_objective`), Optuna's
            direction word for it and its unit.
        base_seed: the base config's ``training.seed``; run ``i`` of both uses ``base_seed + 1000 + i``.
        launch: trains one re-run.
        on_run: called after each run (the sweep prints a line).
        default_won_single_run: the default was the best single run (``best`` is the runner-up).

    Raises:
        ValueError: ``best`` is the default trial (a default is re-run against the runner-up).
        KeyboardInterrupt: from ``launch``; the runs finished before it stay recorded.
    """
    if best.number == default.number:
        raise ValueError(f"trial {best.number} is the default: re-run the best non-default trial against it")
    record = study.user_attrs.get(CONFIRMATION_ATTR)
    runs = _recorded_runs(record, objective)
    failed = failed_runs(record, objective)
    trials = {"best": best, "default": default}

    def save(verdict: Verdict | None = None) -> None:
        state: dict[str, Any] = {"objective": objective, "best_trial": best.number, "default_trial": default.number,
                                 "repeats": repeats, "runs": list(runs.values()), "failed_runs": failed}
        study.set_user_attr(CONFIRMATION_ATTR, state if verdict is None else {**state, "verdict": verdict.to_dict()})

    for label, i in run_order(repeats):
        trial = trials[label]
        if (trial.number, i) in runs:
            continue
        run = launch(label, trial, i, (base_seed + SEED_OFFSET + i) % 2**32)
        runs[(trial.number, i)] = dataclasses.asdict(run)
        save()
        if on_run is not None:
            on_run(run)
    values = {label: [runs[(trials[label].number, i)]["value"] for i in range(repeats)] for label in trials}
    verdict = decide(objective, direction, values["best"], values["default"], unit=unit,
                     best_trial=best.number, default_trial=default.number,
                     default_won_single_run=default_won_single_run)
    save(verdict)
    return verdict


def recorded_repeats(record: Mapping[str, Any] | None, objective: str, best: int, default: int) -> int:
    """The largest K whose re-runs ``0..K-1`` of both ``best`` and ``default`` are recorded (0: none)."""
    runs = _recorded_runs(record, objective)
    k = 0
    while (best, k) in runs and (default, k) in runs:
        k += 1
    return k


def recorded_extent(record: Mapping[str, Any] | None, objective: str, best: int, default: int) -> int:
    """1 + the highest index whose re-run of both ``best`` and ``default`` is recorded (0: none): a
    confirmation of that many re-runs each uses every recorded pair, gaps left by failed re-runs
    included (:func:`recorded_repeats` stops at the first gap)."""
    runs = _recorded_runs(record, objective)
    return 1 + max((i for trial, i in runs if trial == best and (default, i) in runs), default=-1)


def reused_runs(record: Mapping[str, Any] | None, objective: str, best: int, default: int, repeats: int) -> int:
    """How many of the ``repeats`` re-runs each of ``best`` and ``default`` are recorded already
    (completed), so a confirmation reuses them instead of launching them."""
    runs = _recorded_runs(record, objective)
    return sum((trial, k) in runs for trial in {best, default} for k in range(repeats))


def verdict_runs(record: Mapping[str, Any] | None, verdict: Verdict) -> list[dict[str, Any]]:
    """The recorded re-runs a verdict was taken on (best's then default's, by index), each with the
    ``label`` it had in this comparison; none for a verdict without re-runs."""
    if verdict.best_trial is None or verdict.default_trial is None or not verdict.best_values:
        return []
    runs = _recorded_runs(record, verdict.objective)
    chosen = []
    for label, trial, n in (("best", verdict.best_trial, len(verdict.best_values)),
                            ("default", verdict.default_trial, len(verdict.default_values))):
        chosen += [{**runs[(trial, i)], "label": label} for i in range(n) if (trial, i) in runs]
    return chosen

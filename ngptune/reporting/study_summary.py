"""``trials.csv`` and the terminal summary of a study (rich tables)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.study import StudyDirection
from rich.console import Console

from ngptune.console import fitted_text, make_console, table_width
from ngptune.reporting.study_data import (
    DERIVED_NOTE,
    QUALITY_COLUMNS,
    StudyView,
    cell_text,
    objective_values,
    quality_values,
    trials_frame,
    write_text,
)
from ngptune.reporting.study_confirmation import confirmation_summary, spread_text
from ngptune.reporting.study_recommendation import best_heading, change_text, recommendation
from rich.table import Table
from rich.text import Text

from trainer.contract import LINE_WIDTH, counted, quantity_text

__all__ = ["print_summary", "summary_parts", "write_trials_csv"]


def write_trials_csv(study: optuna.Study, path: Path) -> Path:
    """Write :func:`trials_frame` to ``path`` (CSV, written atomically); returns ``path``.

    Raises:
        StudyReportError: bad trial attributes, or ``path`` cannot be written (names the path).
    """
    frame = trials_frame(study)
    if "steps" in frame:  # a count: 6650, not 6650.0 (a trial without a value leaves it empty)
        frame = frame.assign(steps=frame["steps"].round().astype("Int64"))
    return write_text(Path(path), frame.to_csv(index=False), "the trials CSV")


def _fmt(name: str, value: float) -> str:
    """``value`` of the quantity ``name`` with its unit and readable precision (``34.22 dB``)."""
    return "" if value is None or not math.isfinite(value) else quantity_text(name, value)


def _confirmation_table(view: StudyView) -> Table | None:
    """The headline: the confirmation re-runs of the candidate and the default (mean ± sd, n), or
    None when none are recorded."""
    summary = confirmation_summary(view.study)
    if summary is None:
        return None
    table = _table(f"Confirmation re-runs: trial #{summary.candidate} vs default #{summary.default} "
                   f"(mean ± sd of n runs, new seeds)")
    for col in ("quantity", f"default #{summary.default}", f"trial #{summary.candidate}", "difference of means"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for label, (default, candidate) in summary.rows.items():
        diff = change_text(label, candidate.mean, default.mean) if default.n and candidate.n else ""
        table.add_row(label, spread_text(default, label), spread_text(candidate, label), diff)
    return table


def _table(title: str) -> Table:
    """A table whose title stays on one line when it fits 80 columns (rich wraps a title at the
    table's width)."""
    return Table(title=title, min_width=min(len(title), LINE_WIDTH + 1))


def print_summary(study: optuna.Study, console: Console | None = None, show_recommendation: bool = True) -> None:
    """Print :func:`summary_parts`: sentences as lines under 80 columns, tables at
    :func:`ngptune.console.table_width` (80 columns at most, on a terminal and piped alike; a cell
    too wide wraps in it).

    Raises:
        StudyReportError: bad trial attributes.
    """
    console = console or make_console()
    for part in summary_parts(study, show_recommendation):
        if isinstance(part, Table):
            for column in part.columns:
                column.overflow = "fold"  # a name wider than its column wraps in it, never cut to "…"
            console.print(part, width=table_width(console), soft_wrap=False)
        else:
            console.print(part, soft_wrap=True, highlight=False)


def summary_parts(study: optuna.Study, show_recommendation: bool = True) -> list[Text | Table]:
    """The terminal summary: the recommendation, then the evidence, then the single runs, as rich
    ``Text`` (lines under 80 columns, :func:`ngptune.console.fitted_text`) and ``Table`` objects.

    The first lines are the recommendation
    (:func:`~ngptune.reporting.study_recommendation.recommendation`; left out with
    ``show_recommendation`` False, while other workers' trials still run) and the confirmation
    re-runs of the candidate and the default (mean ± sd, n; the verdict's test). Then trials by
    outcome, and the single runs — quality and time of default and best, each objective's best
    against the default (a change is :func:`~ngptune.reporting.study_recommendation.change_text`,
    never called better: one run is no evidence), the best settings (the default's column: what it
    ran with, :meth:`~ngptune.reporting.study_data.StudyView.default_text`, a value its run chose
    for a null setting marked ``(derived)``). For several objectives the
    "best" value of an objective is the best among the Pareto-front trials. Every value carries its
    unit (:func:`trainer.contract.quantity_text`).

    Raises:
        StudyReportError: bad trial attributes.
    """
    parts: list[Text | Table] = []
    view = StudyView.of(study)
    if show_recommendation:
        rec = recommendation(view)
        parts.append(fitted_text([rec.sentence], style="bold" if rec.confirmed else "bold yellow"))
    headline = _confirmation_table(view)
    if headline is not None:
        parts.append(headline)
    elif view.best:
        parts.append(fitted_text(["No confirmation re-runs are recorded: every number below is a single run."]))

    counts = view.frame["outcome"].value_counts()
    if len(counts) == 1:  # one outcome: a sentence, not a table of one row
        parts.append(fitted_text([f"Study {study.study_name}: {counted(len(view.trials), 'trial')},",
                                  f"{'all ' if len(view.trials) > 1 else ''}{counts.index[0]}."]))
    else:
        outcomes = _table(f"Study {study.study_name}: {len(view.trials)} trials by outcome")
        outcomes.add_column("outcome")
        outcomes.add_column("trials", justify="right")
        for outcome, count in counts.items():
            outcomes.add_row(str(outcome), str(count))
        parts.append(outcomes)

    if not view.best:
        parts.append(fitted_text(["No trial completed: no best trial, no best settings."]))
        return parts
    quality = _table(best_heading(view, "Quality and time: best vs default"))
    quality.add_column("quantity")
    compared = view.compared()
    for t in compared:
        quality.add_column(f"{view.label(t)}, single run", justify="right")
    rows = [quality_values(t) for t in compared]
    for column in QUALITY_COLUMNS:
        quality.add_row(column, *(_fmt(column, r[column]) for r in rows))
    parts.append(quality)
    default_values = objective_values(view.default, view.names) if view.default is not None else None
    bests = [(max if view.directions[i] == StudyDirection.MAXIMIZE else min)(view.best, key=lambda t: t.values[i])
             for i in range(len(view.names))]
    if view.default is not None and all(best.number == view.default.number for best in bests):
        parts.append(fitted_text([f"Best vs default: the default (trial #{view.default.number})",
                                  "has the best single-run value of every objective."]))
    else:
        versus = _table(best_heading(view, "Best vs default"))
        for col in ("objective", "default", "best", "trial", "change"):  # the title says they are single runs
            versus.add_column(col, justify="left" if col == "objective" else "right")
        for i, (name, best) in enumerate(zip(view.names, bests)):
            default = default_values[i] if default_values is not None else math.nan
            change = change_text(name, best.values[i], default)
            if change and view.default is not None and best.number != view.default.number \
                    and best.params == view.default_params():
                change = f"{change} (same settings as the default: run-to-run noise)"
            versus.add_row(f"{name} ({view.direction_word(i)})", _fmt(name, default),
                           _fmt(name, best.values[i]), f"#{best.number}", change)
        parts.append(versus)

    settings = _table("Best settings" + (" (Pareto front)" if view.multi_objective else ""))
    settings.add_column("parameter")
    # the default's column once, even when it is also (one of) the best
    shown = [t for t in view.best if view.default is None or t.number != view.default.number]
    if view.default is not None:
        best_too = len(shown) < len(view.best)
        settings.add_column(view.label(view.default) + (" (also the best)" if best_too else ""))
    for t in shown:
        settings.add_column(view.label(t))
    # where the default is among the best, its rows are what it ran with: sampled, or its config's (a derived value too)
    filled = view.default_params()
    names = list(dict.fromkeys(p for t in view.best for p in view.params_of(t)))
    for name in names:
        row = [name]
        if view.default is not None:  # blank, as in the other columns, for a conditional parameter it did not use
            row.append(view.default_text(name) if name in filled or not view.is_conditional(name) else "")
        row.extend(cell_text(t.params.get(name)) for t in shown)
        settings.add_row(*row)
    parts.append(settings)
    if any(view.is_derived(n) for n in names):
        parts.append(fitted_text((DERIVED_NOTE + ".").split(" ")))
    return parts

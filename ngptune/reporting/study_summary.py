"""``trials.csv`` and the terminal summary of a study (rich tables)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.study import StudyDirection
from rich.console import Console

from ngptune.console import make_console
from ngptune.reporting.study_data import (
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

from trainer.contract import quantity_text

__all__ = ["print_summary", "write_trials_csv"]


def write_trials_csv(study: optuna.Study, path: Path) -> Path:
    """Write :func:`trials_frame` to ``path`` (CSV, written atomically); returns ``path``.

    Raises:
        StudyReportError: bad trial attributes, or ``path`` cannot be written (names the path).
    """
    return write_text(Path(path), trials_frame(study).to_csv(index=False), "the trials CSV")


def _fmt(name: str, value: float) -> str:
    """``value`` of the quantity ``name`` with its unit and readable precision (``34.22 dB``)."""
    return "" if value is None or not math.isfinite(value) else quantity_text(name, value)


def _confirmation_table(view: StudyView) -> Table | None:
    """The headline: the confirmation re-runs of the candidate and the default (mean ± sd, n), or
    None when none are recorded."""
    summary = confirmation_summary(view.study)
    if summary is None:
        return None
    table = Table(title=f"Confirmation re-runs: trial #{summary.candidate} vs default #{summary.default} "
                        f"(mean ± sd over n re-runs, new seeds)")
    for col in ("quantity", f"default #{summary.default}", f"trial #{summary.candidate}", "difference of means"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for label, (default, candidate) in summary.rows.items():
        diff = change_text(label, candidate.mean, default.mean) if default.n and candidate.n else ""
        table.add_row(label, spread_text(default), spread_text(candidate), diff)
    return table


def print_summary(study: optuna.Study, console: Console | None = None, show_recommendation: bool = True) -> None:
    """Print the recommendation, then the evidence, then the single runs: rich tables.

    The first lines are the recommendation
    (:func:`~ngptune.reporting.study_recommendation.recommendation`; left out with
    ``show_recommendation`` False, while other workers' trials still run) and the confirmation
    re-runs of the candidate and the default (mean ± sd, n; the verdict's test). Then trials by
    outcome, and the single runs — quality and time of default and best, each objective's best
    against the default (a change is :func:`~ngptune.reporting.study_recommendation.change_text`,
    never called better: one run is no evidence), the best settings. For several objectives the
    "best" value of an objective is the best among the Pareto-front trials.

    Raises:
        StudyReportError: bad trial attributes.
    """
    console = console or make_console()
    view = StudyView.of(study)
    if show_recommendation:
        rec = recommendation(view)
        console.print(rec.sentence, style="bold" if rec.confirmed else "bold yellow")
    headline = _confirmation_table(view)
    if headline is not None:
        console.print(headline)
    elif view.best:
        console.print("No confirmation re-runs are recorded: every number below is a single run.")

    outcomes = Table(title=f"Study {study.study_name}: {len(view.trials)} trials by outcome")
    outcomes.add_column("outcome")
    outcomes.add_column("trials", justify="right")
    for outcome, count in view.frame["outcome"].value_counts().items():
        outcomes.add_row(str(outcome), str(count))
    console.print(outcomes)

    if not view.best:
        console.print("No trial completed: no best trial, no best settings.")
        return
    quality = Table(title=best_heading(view, "Quality and time: best vs default"))
    quality.add_column("quantity")
    compared = view.compared()
    for t in compared:
        quality.add_column(f"{view.label(t)}, single run", justify="right")
    rows = [quality_values(t) for t in compared]
    for column in QUALITY_COLUMNS:
        quality.add_row(column, *(_fmt(column, r[column]) for r in rows))
    console.print(quality)
    default_values = objective_values(view.default, view.names) if view.default is not None else None
    versus = Table(title=best_heading(view, "Best vs default"))
    for col in ("objective", "default, single run", "best, single run", "best trial", "change"):
        versus.add_column(col, justify="left" if col == "objective" else "right")
    for i, name in enumerate(view.names):
        pick = max if view.directions[i] == StudyDirection.MAXIMIZE else min
        best = pick(view.best, key=lambda t: t.values[i])
        default = default_values[i] if default_values is not None else math.nan
        change = change_text(name, best.values[i], default)
        if change and view.default is not None and best.number != view.default.number \
                and best.params == view.default.params:
            change = f"{change} (same settings as the default: run-to-run noise)"
        versus.add_row(f"{name} ({view.direction_word(i)})", _fmt(name, default),
                       _fmt(name, best.values[i]), f"#{best.number}", change)
    console.print(versus)

    settings = Table(title="Best settings" + (" (Pareto front)" if view.multi_objective else ""))
    settings.add_column("parameter")
    # the default's column once, even when it is also (one of) the best
    shown = [t for t in view.best if view.default is None or t.number != view.default.number]
    if view.default is not None:
        best_too = len(shown) < len(view.best)
        settings.add_column(view.label(view.default) + (" (also the best)" if best_too else ""))
    for t in shown:
        settings.add_column(view.label(t))
    for name in dict.fromkeys(p for t in view.best for p in t.params):
        row = [name]
        if view.default is not None:
            row.append(cell_text(view.default.params.get(name)))
        row.extend(cell_text(t.params.get(name)) for t in shown)
        settings.add_row(*row)
    console.print(settings)

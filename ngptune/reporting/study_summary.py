"""``trials.csv`` and the terminal summary of a study (rich tables)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.study import StudyDirection
from rich.console import Console

from ngptune.console import make_console
from ngptune.reporting.study_data import (
    FLOAT_FORMAT,
    QUALITY_COLUMNS,
    StudyView,
    cell_text,
    objective_values,
    quality_values,
    trials_frame,
    write_text,
)
from ngptune.reporting.study_recommendation import best_heading, change_text, recommendation
from rich.table import Table

__all__ = ["print_summary", "write_trials_csv"]


def write_trials_csv(study: optuna.Study, path: Path) -> Path:
    """Write :func:`trials_frame` to ``path`` (CSV, written atomically); returns ``path``.

    Raises:
        StudyReportError: bad trial attributes, or ``path`` cannot be written (names the path).
    """
    return write_text(Path(path), trials_frame(study).to_csv(index=False), "the trials CSV")


def _fmt(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else FLOAT_FORMAT.format(value)


def print_summary(study: optuna.Study, console: Console | None = None, show_recommendation: bool = True) -> None:
    """Print rich tables: trials by outcome, best vs default on PSNR, time and throughput, best vs
    default for each objective, the best settings.

    The recommendation (:func:`~ngptune.reporting.study_recommendation.recommendation`; left out with
    ``show_recommendation`` False, while other workers' trials still run) comes first, and the
    tables say "best (not confirmed)" when re-runs did not uphold the best. For several objectives
    the "best" value of an objective is the best among the Pareto-front trials. A change is
    :func:`~ngptune.reporting.study_recommendation.change_text`: a difference for PSNR and times, a percentage
    of the default otherwise.

    Raises:
        StudyReportError: bad trial attributes.
    """
    console = console or make_console()
    view = StudyView.of(study)
    if show_recommendation:
        rec = recommendation(view)
        console.print(rec.sentence, style="bold" if rec.confirmed else "bold yellow")

    def heading(what: str) -> str:
        return best_heading(view, what) if show_recommendation else what

    outcomes = Table(title=f"Study {study.study_name}: {len(view.trials)} trials by outcome")
    outcomes.add_column("outcome")
    outcomes.add_column("trials", justify="right")
    for outcome, count in view.frame["outcome"].value_counts().items():
        outcomes.add_row(str(outcome), str(count))
    console.print(outcomes)

    if not view.best:
        console.print("No trial completed: no best trial, no best settings.")
        return
    quality = Table(title=heading("Quality and time: best vs default (final evaluation PSNR, then throughput)"))
    quality.add_column("quantity")
    compared = view.compared()
    for t in compared:
        quality.add_column(view.label(t), justify="right")
    rows = [quality_values(t) for t in compared]
    for column in QUALITY_COLUMNS:
        quality.add_row(f"{column} (dB)" if column == "psnr_db" else column, *(_fmt(r[column]) for r in rows))
    console.print(quality)
    default_values = objective_values(view.default, view.names) if view.default is not None else None
    versus = Table(title=heading("Best vs default"))
    for col in ("objective", "default", "best", "best trial", "change"):
        versus.add_column(col, justify="left" if col == "objective" else "right")
    for i, name in enumerate(view.names):
        pick = max if view.directions[i] == StudyDirection.MAXIMIZE else min
        best = pick(view.best, key=lambda t: t.values[i])
        default = default_values[i] if default_values is not None else math.nan
        change = ""
        shown = change_text(name, best.values[i], default)
        if shown and best.values[i] != default:
            better = (best.values[i] > default) == (view.directions[i] == StudyDirection.MAXIMIZE)
            change = f"{shown} ({'better' if better else 'worse'})"
            if view.default is not None and best.number != view.default.number and best.params == view.default.params:
                change = f"{shown} (same settings as the default: run-to-run noise)"
        elif shown:
            change = shown
        versus.add_row(f"{name} ({view.direction_word(i)})", _fmt(default), _fmt(best.values[i]), f"#{best.number}", change)
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

"""The plots of a study report: Optuna's visualisations (with a sentence instead where one cannot be
drawn) and the plotly bars of the best trials against the default."""

from __future__ import annotations

import dataclasses
import html
import math
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial
from plotly.subplots import make_subplots

from ngptune.reporting.html import figure_html, text_html
from ngptune.reporting.study_data import (
    StudyView,
    objective_values,
    phase_order,
    read_run_metrics,
)
from ngptune.reporting.study_confirmation import ConfirmationSummary
from ngptune.reporting.study_recommendation import change_text
from trainer.contract import quantity_text

__all__ = ["ABSENT_TEXT", "Comparison", "absent", "absent_values_named", "confirmation_bars", "optuna_figure",
           "per_objective", "plotted_study", "readable_axis_labels"]

# PED-ANOVA warns that it ranks for *low* targets whenever a target is given; maximised objectives are
# negated before they reach it, so the warning is expected and not shown in the report.
_EXPECTED_WARNING = "computes the importances of params to achieve low `target` values"


def absent(why: str) -> str:
    return text_html(f"Plot absent: {why}", "missing")


def optuna_figure(make: Callable[[], go.Figure]) -> str:
    """Draw one Optuna plot; its warnings become notes, an error or an empty figure a sentence why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fig = make()
        except (ValueError, RuntimeError) as exc:
            return absent(f"Optuna could not draw it ({type(exc).__name__}: {exc}).")
    if not fig.data:
        return absent("Optuna drew no data for this study.")
    notes = dict.fromkeys(
        str(w.message)
        for w in caught
        if not issubclass(w.category, optuna.exceptions.ExperimentalWarning) and _EXPECTED_WARNING not in str(w.message)
    )
    return figure_html(fig) + "".join(text_html(f"Optuna warned: {m}") for m in notes)


def _widened(distribution: BaseDistribution, value: Any) -> BaseDistribution | None:
    """``distribution`` grown to hold ``value`` (a base-config value outside the sampled range), or
    None when it cannot (a value of another type, off an int step)."""
    if isinstance(distribution, CategoricalDistribution):
        return distribution if value in distribution.choices else CategoricalDistribution([*distribution.choices, value])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(distribution, IntDistribution):
        if value != int(value) or (int(value) - distribution.low) % distribution.step:
            return None
        return IntDistribution(min(distribution.low, int(value)), max(distribution.high, int(value)),
                               log=distribution.log and value >= 1, step=distribution.step)
    if isinstance(distribution, FloatDistribution) and distribution.step is None:
        return FloatDistribution(min(distribution.low, float(value)), max(distribution.high, float(value)),
                                 log=distribution.log and value > 0)
    return None


def plotted_study(view: StudyView) -> optuna.Study:
    """The study the plots draw: ``view.study`` itself, or, when the default trial lacks parameters
    that the base config sets (:meth:`StudyView.default_params`), an in-memory copy whose default
    trial holds them: each parameter's distribution widened to the base value, or, for a value it
    cannot hold (a value the run derived off an int step, or :data:`~ngptune.reporting.study_data.DERIVED_TEXT`
    where the run recorded none), made categorical in every trial of the copy, the trials' values
    and the default's as its choices; the default never reads as not having the parameter."""
    filled = view.default_params()
    if view.default is None or filled == view.default.params:
        return view.study
    distributions = {}
    for t in view.completed:
        for name, dist in t.distributions.items():
            distributions.setdefault(name, dist)
    placed: dict[str, BaseDistribution] = {}  # the default's distribution of each value it is given
    as_choices: dict[str, CategoricalDistribution] = {}  # parameters every trial of the copy draws as categories
    for name, value in filled.items():
        if name in view.default.params or name not in distributions:
            continue
        widened = _widened(distributions[name], value)
        if widened is None:
            seen = _ordered({t.params[name] for t in view.trials if name in t.params and t.params[name] != value})
            widened = as_choices[name] = CategoricalDistribution([*seen, value])
        placed[name] = widened
    copy = optuna.create_study(study_name=view.study.study_name, directions=view.directions)
    if view.study.metric_names is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            copy.set_metric_names(list(view.study.metric_names))
    for t in view.trials:
        is_default = t.number == view.default.number
        if is_default or any(name in t.params for name in as_choices):
            params, dists = dict(t.params), dict(t.distributions)
            dists.update((name, dist) for name, dist in as_choices.items() if name in params)
            if is_default:
                params.update((name, filled[name]) for name in placed)
                dists.update(placed)
            t = optuna.trial.create_trial(state=t.state, values=t.values, params=params, distributions=dists,
                                          user_attrs=t.user_attrs, intermediate_values=t.intermediate_values)
        copy.add_trial(t)
    return copy


def _ordered(values: set[Any]) -> list[Any]:
    """``values`` in ascending order, or by their text where they do not compare (numbers and strings)."""
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def _axis_name(tick: str, names: list[str]) -> str:
    """The name of ``names`` a parallel-coordinate axis label stands for: Optuna cuts a name of 20
    characters or more to 17 and ``...`` (``parallel.num_subg...``); a label matching none is itself."""
    cut = tick.endswith("...")
    return next((n for n in names if n == tick or (cut and n.startswith(tick[:-3]))), tick)


ABSENT_TEXT = "not used"
"""What the parallel-coordinate figure says for a parameter a trial does not have."""


def absent_values_named(fig: go.Figure, study: optuna.Study, names: list[str]) -> go.Figure:
    """Optuna's parallel-coordinate figure writes ``None`` for a parameter a trial does not have (a
    conditional one: ``parallel.compression`` in a subgrid trial), beside a choice ``"none"`` on the
    same axis; on each axis whose parameter cannot take None, that ``None`` (its axis label and its
    hover value) reads :data:`ABSENT_TEXT` instead."""
    ticks = list(fig.layout.xaxis.ticktext or [])
    distributions: dict[str, BaseDistribution] = {}
    for trial in study.trials:
        for name, distribution in trial.distributions.items():
            distributions.setdefault(name, distribution)
    absent_axes = set()
    for i, tick in enumerate(ticks):
        distribution = distributions.get(_axis_name(tick, names))
        if distribution is not None and not (isinstance(distribution, CategoricalDistribution)
                                             and None in distribution.choices):
            absent_axes.add(i)
    if not absent_axes:
        return fig
    for annotation in fig.layout.annotations:
        if annotation.text == "None" and annotation.x in absent_axes:
            annotation.text = ABSENT_TEXT
    for trace in fig.data:
        if getattr(trace, "customdata", None) is not None and len(trace.customdata) == len(ticks):
            trace.customdata = [[label, ABSENT_TEXT if i in absent_axes and value == "None" else value]
                                for i, (label, value) in enumerate(trace.customdata)]
    return fig


def readable_axis_labels(fig: go.Figure, names: list[str]) -> go.Figure:
    """Optuna's parallel-coordinate figure with its axis labels whole: Optuna cuts a name of 20
    characters or more to 17 and ``...`` (``parallel.num_subg...``); each label is replaced by the
    one of ``names`` (the objectives and parameters) it was cut from, broken after its dots
    (``parallel.<br>num_subgrids``), with room below the axes for the extra lines."""
    ticks = list(fig.layout.xaxis.ticktext or [])
    if not ticks:
        return fig
    whole = [_axis_name(tick, names).replace(".", ".<br>") for tick in ticks]
    lines = max(label.count("<br>") + 1 for label in whole)
    fig.update_xaxes(ticktext=whole)
    fig.update_layout(margin={"b": 40 + 18 * lines})
    return fig


def per_objective(view: StudyView, plot: Callable[..., go.Figure], *, lower_is_better: bool = False) -> str:
    """One Optuna plot for a single-objective study, or one per objective (``target=values[i]``).

    With ``lower_is_better`` maximised objectives are negated (PED-ANOVA ranks low targets as good).
    """
    study = plotted_study(view)
    if not view.multi_objective:  # no target: Optuna uses the study's direction
        return optuna_figure(lambda: plot(study, target_name=view.names[0]))
    parts = []
    for i, name in enumerate(view.names):
        sign = -1.0 if lower_is_better and view.directions[i] == StudyDirection.MAXIMIZE else 1.0
        title = f"{name} ({view.direction_word(i)})" + (", negated for ranking" if sign < 0 else "")
        parts.append(f"<h3>{html.escape(name)}</h3>")
        parts.append(
            optuna_figure(
                lambda i=i, sign=sign, title=title: plot(
                    study, target=lambda t: sign * t.values[i], target_name=title
                )
            )
        )
    return "".join(parts)


def confirmation_bars(summary: ConfirmationSummary) -> go.Figure:
    """The confirmation re-runs' means with ± one standard deviation, default (grey) and candidate
    (blue), one subplot per quantity."""
    labels = [f"default #{summary.default}", f"trial #{summary.candidate}"]
    fig = make_subplots(rows=1, cols=len(summary.rows), subplot_titles=list(summary.rows))
    for col, (name, spreads) in enumerate(summary.rows.items(), start=1):
        text = [f"{quantity_text(name, s.mean)} (n={s.n})" if s.n else "" for s in spreads]
        fig.add_trace(go.Bar(x=labels, y=[s.mean for s in spreads], marker_color=["#9e9e9e", "#1f77b4"],
                             error_y={"type": "data", "array": [s.sd for s in spreads]}, showlegend=False,
                             text=text, textposition="inside", insidetextanchor="middle"),  # clear of the error bars
                      row=1, col=col)
    fig.update_layout(title="Confirmation re-runs: mean ± sd", height=380)
    return fig


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Default and best trials side by side: each quantity's value per trial (NaN where not recorded)."""

    trials: list[FrozenTrial]  # the default first, then the best
    labels: list[str]
    colors: list[str]  # grey for the default, blue for the best
    objectives: dict[str, list[float]]  # "<objective> (max|min)" -> values
    run_metrics: dict[str, list[float]]  # metrics.jsonl column -> values
    phases_ms: dict[str, list[float]]  # phase -> mean ms per step
    notes: list[str]  # what is missing and why

    @classmethod
    def of(cls, view: StudyView) -> "Comparison":
        trials = view.compared()
        notes: list[str] = []
        objectives = {
            f"{n} ({view.direction_word(i)})": [objective_values(t, view.names)[i] for t in trials]
            for i, n in enumerate(view.names)
        }
        measured = []
        for t in trials:
            metrics, note = read_run_metrics(t)
            measured.append(metrics)
            if note:
                notes.append(f"Run metrics absent: {note}.")
        run_metrics = {
            m: [d.get(m, math.nan) for d in measured]
            for m in ("throughput_samples_per_s", "eval_psnr_db")
            if any(m in d for d in measured)
        }
        phase = [t.user_attrs.get("phase_ms", {}) for t in trials]
        phases_ms = {name: [d.get(name, math.nan) for d in phase] for name in phase_order(phase)}
        missing = [f"#{t.number}" for t, d in zip(trials, phase) if not d]
        if missing:
            notes.append(f"No phase_ms recorded for trial(s) {', '.join(missing)}.")
        is_default = [view.default is not None and t.number == view.default.number for t in trials]
        return cls(trials, [view.label(t) for t in trials], ["#9e9e9e" if d else "#1f77b4" for d in is_default],
                   objectives, run_metrics, phases_ms, notes)

    def bars(self, values: dict[str, list[float]], title: str) -> go.Figure:
        """One subplot per quantity, one bar per trial."""
        fig = make_subplots(rows=1, cols=len(values), subplot_titles=list(values))
        for col, (name, column) in enumerate(values.items(), start=1):
            text = [quantity_text(name, v) if math.isfinite(v) else "" for v in column]
            fig.add_trace(go.Bar(x=self.labels, y=column, marker_color=self.colors, showlegend=False,
                                 text=text, textposition="inside", insidetextanchor="middle"),  # mid-bar
                      row=1, col=col)
        fig.update_layout(title=title, height=380)
        return fig

    def stacked_phases(self) -> go.Figure:
        """Step-time breakdown: the phases stacked, one bar per trial."""
        fig = go.Figure([go.Bar(name=name, x=self.labels, y=ms) for name, ms in self.phases_ms.items()])
        fig.update_layout(barmode="stack", title="Step-time breakdown (mean ms per step, from phase_ms)",
                          yaxis_title="ms per step", height=420)
        return fig

    def table(self, with_change: bool) -> pd.DataFrame:
        """Quantities × trials; with ``with_change`` also each best's change against the default
        (:func:`~ngptune.reporting.study_recommendation.change_text`: dB and times as differences, the rest in percent)."""
        rows = {**self.objectives, **{f"run {m}": v for m, v in self.run_metrics.items()},
                **{f"{name}_ms": v for name, v in self.phases_ms.items()}}
        table = pd.DataFrame.from_dict(rows, orient="index", columns=self.labels)
        if with_change:
            base = table[self.labels[0]]
            for label in self.labels[1:]:
                table[f"{label} vs default"] = [change_text(q, v, d) for q, v, d in zip(table.index, table[label], base)]
        return table.rename_axis("quantity").reset_index()

"""Study report of an ``ngptune sweep``: ``report.html``, ``trials.csv`` and a terminal summary (DESIGN.md §6).

The report reads an Optuna study whose trials carry the user attributes the sweep writes
(docs: interfaces, "Sweep trials"): ``outcome``, ``reason``, ``log_path``, ``run_dir``, ``duration_s``,
``is_default``, ``settings``, ``nccl_env``, ``nccl_applied``, ``emulated_interconnect``, ``objectives``,
``phase_ms`` and ``diagnoses``. Nothing else is needed; the run directory of a trial is read only for the
best-vs-default run metrics (median ``throughput_samples_per_s`` and last ``eval_psnr_db`` of its rank-0
``metrics.jsonl``).

Terms:
    * *default*: the trial with user attribute ``is_default`` true (trial 0, enqueued by the sweep).
    * *best*: ``study.best_trial`` for one objective; the Pareto front (``study.best_trials``) for several.
    * *objective names*: ``study.metric_names`` when set, otherwise the keys of the trials' ``objectives``
      attribute (which must then list the objectives in the study's order), otherwise ``objective_<i>``.

Plots are Optuna's plotly visualisations (optimisation history, parameter importances, Pareto front,
parallel coordinates) and plotly bars for best vs default. A plot that cannot be drawn from the study
(no completed trial, fewer than two, no varying parameter, more than three objectives for a Pareto plot)
is replaced by a sentence that says why; the page always renders.
"""

from __future__ import annotations

import dataclasses
import html
import math
import statistics
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots
from rich.console import Console
from ngptune.console import make_console
from rich.table import Table

from ngptune.reporting.html import Section, figure_html, render_page, table_html, text_html
from trainer.errors import NgptuneError
from trainer.rundir import RunDir, atomic_write_text
from trainer.schema import PHASES, MetricsError, read_metrics

__all__ = [
    "StudyReportError",
    "best_trials",
    "default_trial",
    "objective_names",
    "print_summary",
    "trials_frame",
    "write_study_report",
    "write_trials_csv",
]

OUTCOMES: tuple[str, ...] = ("completed", "pruned", "failed")
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
# Outcome of a trial that has no ``outcome`` attribute (a trial Optuna itself marked, e.g. a stale
# RUNNING trial of a killed worker that the heartbeat failed): the Optuna state's meaning.
_STATE_OUTCOME: dict[TrialState, str] = {
    TrialState.COMPLETE: "completed",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "failed",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}
_DICT_ATTRS = ("settings", "nccl_env", "nccl_applied", "objectives", "phase_ms")
_FLOAT_FORMAT = "{:.6g}"
# PED-ANOVA warns that it ranks for *low* targets whenever a target is given; maximised objectives are
# negated before they reach it, so the warning is expected and not shown in the report.
_EXPECTED_WARNING = "computes the importances of params to achieve low `target` values"


class StudyReportError(NgptuneError):
    """A study's trials carry user attributes the report cannot read; names the study, trial and attribute."""


# ----------------------------------------------------------------------------------------------
# Reading the study
# ----------------------------------------------------------------------------------------------


def _check_attrs(study: optuna.Study, trial: FrozenTrial) -> None:
    where = f"study {study.study_name!r}, trial {trial.number}"
    attrs = trial.user_attrs
    for key in _DICT_ATTRS:
        if key in attrs and not isinstance(attrs[key], dict):
            raise StudyReportError(
                f"{where}: user attribute {key!r} must be a dict, got {type(attrs[key]).__name__}"
            )
    for key in ("objectives", "phase_ms"):
        for name, value in attrs.get(key, {}).items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise StudyReportError(f"{where}: user attribute {key!r}[{name!r}] must be a number, got {value!r}")
    outcome = attrs.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise StudyReportError(f"{where}: user attribute 'outcome' must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    if "is_default" in attrs and not isinstance(attrs["is_default"], bool):
        raise StudyReportError(f"{where}: user attribute 'is_default' must be true or false, got {attrs['is_default']!r}")
    diagnoses = attrs.get("diagnoses", [])
    if not isinstance(diagnoses, list) or not all(isinstance(d, dict) and "bottleneck" in d for d in diagnoses):
        raise StudyReportError(f"{where}: user attribute 'diagnoses' must be a list of dicts with a 'bottleneck' key")
    duration = attrs.get("duration_s")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float))):
        raise StudyReportError(f"{where}: user attribute 'duration_s' must be a number of seconds, got {duration!r}")


def _completed(trial: FrozenTrial) -> bool:
    """A COMPLETE trial whose objective values are all finite (the ones Optuna's plots use)."""
    return trial.state == TrialState.COMPLETE and trial.values is not None and all(map(math.isfinite, trial.values))


def objective_names(study: optuna.Study) -> list[str]:
    """Names of the study's objectives, in the order of ``trial.values``.

    ``study.metric_names`` when the sweep set them; otherwise the keys of the trials' ``objectives`` user
    attribute when they name as many objectives as the study has; otherwise ``objective_<i>``.

    Raises:
        StudyReportError: the ``objectives`` keys are used but a completed trial's ``objectives`` values
            are not its ``trial.values`` in that order (names would be attached to the wrong values).
    """
    n_objectives = len(study.directions)
    if study.metric_names is not None:
        return list(study.metric_names)
    trials = study.get_trials(deepcopy=False)
    keys = next(
        (list(t.user_attrs["objectives"]) for t in trials if len(t.user_attrs.get("objectives", {})) == n_objectives),
        None,
    )
    if keys is None:
        return [f"objective_{i}" for i in range(n_objectives)]
    for trial in filter(_completed, trials):
        recorded = trial.user_attrs.get("objectives")
        if not recorded:
            continue
        if list(recorded) != keys or not all(
            recorded[k] is not None and math.isclose(recorded[k], v, rel_tol=1e-9, abs_tol=1e-12)
            for k, v in zip(keys, trial.values)
        ):
            raise StudyReportError(
                f"study {study.study_name!r}, trial {trial.number}: user attribute 'objectives' "
                f"{recorded!r} does not list the trial's values {trial.values!r} in the study's order "
                f"{keys!r}; set study.set_metric_names(...) or record the objectives in that order"
            )
    return keys


def default_trial(study: optuna.Study) -> FrozenTrial | None:
    """The untuned default trial (user attribute ``is_default`` true; the lowest number if several), or None."""
    return next((t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("is_default") is True), None)


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """``[study.best_trial]`` for one objective, the Pareto-front trials (by number) for several; [] if none completed."""
    if not any(_completed(t) for t in study.get_trials(deepcopy=False)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: t.number)


def _outcome(trial: FrozenTrial) -> str:
    return trial.user_attrs.get("outcome") or _STATE_OUTCOME[trial.state]


def _duration_s(trial: FrozenTrial) -> float:
    """``duration_s`` as the sweep measured it, else Optuna's start→complete time, else NaN."""
    if "duration_s" in trial.user_attrs:
        return float(trial.user_attrs["duration_s"])
    return trial.duration.total_seconds() if trial.duration is not None else math.nan


def _objective_values(trial: FrozenTrial, names: list[str]) -> list[float]:
    """Objective values: ``trial.values`` for a completed trial; what the sweep recorded for the others."""
    if trial.state == TrialState.COMPLETE and trial.values is not None:
        return list(trial.values)
    recorded = trial.user_attrs.get("objectives", {})
    return [math.nan if recorded.get(n) is None else float(recorded[n]) for n in names]


def _param_column(values: list[Any]) -> pd.Series:
    """A parameter's values over the trials (None where a trial lacks it); integers stay integers
    (``Int64``, not ``4.0``) when some trials lack the parameter."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="Int64")
    return pd.Series(values, dtype=object)


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial, by number: the contents of ``trials.csv``.

    Columns: ``number``, ``state`` (Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING), ``outcome``
    (completed | pruned | failed; the state's meaning when the sweep recorded none), ``reason``
    ("" when none), ``duration_s`` (s), one column per objective (named by :func:`objective_names`;
    ``trial.values`` for completed trials, the ``objectives`` attribute otherwise, NaN if absent),
    ``param_<name>`` per sampled parameter (first appearance order; empty where a trial lacks it) and
    ``log_path``.

    Raises:
        StudyReportError: a trial's user attributes have the wrong types (names trial and attribute).
    """
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    for trial in trials:
        _check_attrs(study, trial)
    names = objective_names(study)
    param_names = list(dict.fromkeys(p for t in trials for p in t.params))
    rows = []
    for trial in trials:
        row: dict[str, Any] = {
            "number": trial.number,
            "state": trial.state.name,
            "outcome": _outcome(trial),
            "reason": trial.user_attrs.get("reason", ""),
            "duration_s": _duration_s(trial),
        }
        row.update(zip(names, _objective_values(trial, names)))
        rows.append(row)
    df = pd.DataFrame(rows, columns=["number", "state", "outcome", "reason", "duration_s", *names])
    for p in param_names:
        df[f"param_{p}"] = _param_column([t.params.get(p) for t in trials])
    df["log_path"] = [t.user_attrs.get("log_path", "") for t in trials]
    return df


def write_trials_csv(study: optuna.Study, path: Path) -> Path:
    """Write :func:`trials_frame` to ``path`` (CSV, written atomically); returns ``path``.

    Raises:
        StudyReportError: bad trial attributes, or ``path`` cannot be written (names the path).
    """
    return _write_text(Path(path), trials_frame(study).to_csv(index=False), "the trials CSV")


def _write_text(path: Path, text: str, what: str) -> Path:
    """Write ``text`` atomically, creating the folder; an OS error becomes a StudyReportError naming ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise StudyReportError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
    return path


# ----------------------------------------------------------------------------------------------
# The HTML report
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _StudyView:
    """What every section needs, computed once."""

    study: optuna.Study
    names: list[str]
    directions: list[StudyDirection]
    trials: list[FrozenTrial]
    completed: list[FrozenTrial]
    default: FrozenTrial | None
    best: list[FrozenTrial]
    frame: pd.DataFrame

    @classmethod
    def of(cls, study: optuna.Study) -> "_StudyView":
        frame = trials_frame(study)  # validates the attributes first
        trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
        return cls(
            study=study,
            names=objective_names(study),
            directions=list(study.directions),
            trials=trials,
            completed=[t for t in trials if _completed(t)],
            default=default_trial(study),
            best=best_trials(study),
            frame=frame,
        )

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1

    def direction_word(self, i: int) -> str:
        return "max" if self.directions[i] == StudyDirection.MAXIMIZE else "min"

    def label(self, trial: FrozenTrial) -> str:
        if self.default is not None and trial.number == self.default.number:
            return f"default #{trial.number}"
        return f"{'Pareto' if self.multi_objective else 'best'} #{trial.number}"

    def role(self, trial: FrozenTrial) -> str:
        roles = []
        if self.default is not None and trial.number == self.default.number:
            roles.append("default")
        if any(b.number == trial.number for b in self.best):
            roles.append("Pareto front" if self.multi_objective else "best")
        return ", ".join(roles)

    def compared(self) -> list[FrozenTrial]:
        """Default first, then the best trials (the default once, even when it is also best)."""
        head = [self.default] if self.default is not None else []
        return head + [b for b in self.best if not head or b.number != head[0].number]


def _absent(why: str) -> str:
    return text_html(f"Plot absent: {why}", "missing")


def _optuna_figure(make: Callable[[], go.Figure]) -> str:
    """Draw one Optuna plot; its warnings become notes, an error or an empty figure a sentence why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fig = make()
        except (ValueError, RuntimeError) as exc:
            return _absent(f"Optuna could not draw it ({type(exc).__name__}: {exc}).")
    if not fig.data:
        return _absent("Optuna drew no data for this study.")
    notes = dict.fromkeys(
        str(w.message)
        for w in caught
        if not issubclass(w.category, optuna.exceptions.ExperimentalWarning) and _EXPECTED_WARNING not in str(w.message)
    )
    return figure_html(fig) + "".join(text_html(f"Optuna warned: {m}") for m in notes)


def _per_objective(view: _StudyView, plot: Callable[..., go.Figure], *, lower_is_better: bool = False) -> str:
    """One Optuna plot for a single-objective study, or one per objective (``target=values[i]``).

    With ``lower_is_better`` maximised objectives are negated (PED-ANOVA ranks low targets as good).
    """
    if not view.multi_objective:  # no target: Optuna uses the study's direction
        return _optuna_figure(lambda: plot(view.study, target_name=view.names[0]))
    parts = []
    for i, name in enumerate(view.names):
        sign = -1.0 if lower_is_better and view.directions[i] == StudyDirection.MAXIMIZE else 1.0
        title = f"{name} ({view.direction_word(i)})" + (", negated for ranking" if sign < 0 else "")
        parts.append(f"<h3>{html.escape(name)}</h3>")
        parts.append(
            _optuna_figure(
                lambda i=i, sign=sign, title=title: plot(
                    view.study, target=lambda t: sign * t.values[i], target_name=title
                )
            )
        )
    return "".join(parts)


def _varying_params(trials: list[FrozenTrial]) -> list[str]:
    values: dict[str, set[str]] = {}
    for t in trials:
        for name, value in t.params.items():
            values.setdefault(name, set()).add(repr(value))
    return [name for name, seen in values.items() if len(seen) > 1]


def _history_section(view: _StudyView) -> Section:
    if not view.completed:
        body = _absent("no trial completed, so there is no objective value to plot.")
    else:
        body = _per_objective(view, optuna.visualization.plot_optimization_history)
    return Section("Optimisation history", body)


def _importance_section(view: _StudyView) -> Section:
    varying = _varying_params(view.completed)
    if len(view.completed) < 2:
        body = _absent(f"parameter importances need at least 2 completed trials; this study has {len(view.completed)}.")
    elif not varying:
        body = _absent("no parameter takes more than one value among the completed trials, so none can explain a difference.")
    else:
        body = text_html(
            "Optuna's default evaluator (PED-ANOVA) over the completed trials; parameters: " + ", ".join(varying) + "."
        ) + _per_objective(view, optuna.visualization.plot_param_importances, lower_is_better=True)
    return Section("Parameter importances", body)


def _pareto_section(view: _StudyView) -> Section:
    if not view.completed:
        body = _absent("no trial completed, so there is no Pareto front.")
    elif len(view.names) > 3:
        body = _absent(f"a Pareto plot shows 2 or 3 objectives; this study has {len(view.names)}.")
    else:
        target_names = [f"{n} ({view.direction_word(i)})" for i, n in enumerate(view.names)]
        body = _optuna_figure(lambda: optuna.visualization.plot_pareto_front(view.study, target_names=target_names))
    front = ", ".join(f"#{t.number}" for t in view.best) or "none"
    return Section("Pareto front", text_html(f"Trials on the Pareto front: {front}.") + body)


def _parallel_section(view: _StudyView) -> Section:
    if not view.completed:
        body = _absent("no trial completed.")
    elif not any(t.params for t in view.completed):
        body = _absent("the completed trials have no sampled parameters.")
    else:
        body = _per_objective(view, optuna.visualization.plot_parallel_coordinate)
    return Section("Parallel coordinates", body)


def _run_metrics(trial: FrozenTrial) -> tuple[dict[str, float], str | None]:
    """Median ``throughput_samples_per_s`` and last ``eval_psnr_db`` of the trial's rank-0 metrics, or a note why not."""
    run_dir = trial.user_attrs.get("run_dir")
    if not run_dir:
        return {}, f"trial #{trial.number} records no run_dir"
    path = RunDir(Path(run_dir)).metrics_path(0)
    try:
        records = read_metrics(path)
    except MetricsError as exc:
        return {}, f"trial #{trial.number}: {exc}"
    metrics: dict[str, float] = {}
    throughput = [r["throughput_samples_per_s"] for r in records if r.get("throughput_samples_per_s") is not None]
    if throughput:
        metrics["throughput_samples_per_s"] = statistics.median(throughput)
    psnr = [r["eval_psnr_db"] for r in records if r.get("eval_psnr_db") is not None]
    if psnr:
        metrics["eval_psnr_db"] = psnr[-1]
    return metrics, None


def _phase_order(phase_dicts: list[Mapping[str, float]]) -> list[str]:
    known = [*PHASES, "other"]
    seen = dict.fromkeys(p for d in phase_dicts for p in d)
    return [p for p in known if p in seen] + [p for p in seen if p not in known]


@dataclasses.dataclass(frozen=True)
class _Comparison:
    """Default and best trials side by side: each quantity's value per trial (NaN where not recorded)."""

    trials: list[FrozenTrial]  # the default first, then the best
    labels: list[str]
    colors: list[str]  # grey for the default, blue for the best
    objectives: dict[str, list[float]]  # "<objective> (max|min)" -> values
    run_metrics: dict[str, list[float]]  # metrics.jsonl column -> values
    phases_ms: dict[str, list[float]]  # phase -> mean ms per step
    notes: list[str]  # what is missing and why

    @classmethod
    def of(cls, view: _StudyView) -> "_Comparison":
        trials = view.compared()
        notes: list[str] = []
        objectives = {
            f"{n} ({view.direction_word(i)})": [_objective_values(t, view.names)[i] for t in trials]
            for i, n in enumerate(view.names)
        }
        measured = []
        for t in trials:
            metrics, note = _run_metrics(t)
            measured.append(metrics)
            if note:
                notes.append(f"Run metrics absent: {note}.")
        run_metrics = {
            m: [d.get(m, math.nan) for d in measured]
            for m in ("throughput_samples_per_s", "eval_psnr_db")
            if any(m in d for d in measured)
        }
        phase = [t.user_attrs.get("phase_ms", {}) for t in trials]
        phases_ms = {name: [d.get(name, math.nan) for d in phase] for name in _phase_order(phase)}
        missing = [f"#{t.number}" for t, d in zip(trials, phase) if not d]
        if missing:
            notes.append(f"No phase_ms recorded for trial(s) {', '.join(missing)}.")
        is_default = [view.default is not None and t.number == view.default.number for t in trials]
        return cls(trials, [view.label(t) for t in trials], ["#9e9e9e" if d else "#1f77b4" for d in is_default],
                   objectives, run_metrics, phases_ms, notes)

    def bars(self, values: dict[str, list[float]], title: str) -> go.Figure:
        """One subplot per quantity, one bar per trial."""
        fig = make_subplots(rows=1, cols=len(values), subplot_titles=list(values))
        for col, column in enumerate(values.values(), start=1):
            text = [_FLOAT_FORMAT.format(v) if math.isfinite(v) else "" for v in column]
            fig.add_trace(go.Bar(x=self.labels, y=column, marker_color=self.colors, showlegend=False,
                                 text=text, textposition="auto"), row=1, col=col)
        fig.update_layout(title=title, height=380)
        return fig

    def stacked_phases(self) -> go.Figure:
        """Step-time breakdown: the phases stacked, one bar per trial."""
        fig = go.Figure([go.Bar(name=name, x=self.labels, y=ms) for name, ms in self.phases_ms.items()])
        fig.update_layout(barmode="stack", title="Step-time breakdown (mean ms per step, from phase_ms)",
                          yaxis_title="ms per step", height=420)
        return fig

    def table(self, with_change: bool) -> pd.DataFrame:
        """Quantities × trials; with ``with_change`` also each best's change against the default in percent."""
        rows = {**self.objectives, **{f"run {m}": v for m, v in self.run_metrics.items()},
                **{f"{name}_ms": v for name, v in self.phases_ms.items()}}
        table = pd.DataFrame.from_dict(rows, orient="index", columns=self.labels)
        if with_change:
            base = table[self.labels[0]]
            for label in self.labels[1:]:
                table[f"{label} vs default (%)"] = (table[label] - base) / base.abs() * 100.0
        return table.rename_axis("quantity").reset_index()


def _best_vs_default_section(view: _StudyView) -> Section:
    parts: list[str] = []
    if view.default is None:
        parts.append(text_html("No default trial in the study (no trial has user attribute is_default).", "missing"))
    elif not _completed(view.default):
        reason = view.default.user_attrs.get("reason", "")
        parts.append(text_html(f"The default trial #{view.default.number} did not complete "
                               f"(outcome {_outcome(view.default)}" + (f": {reason}" if reason else "") + ").", "missing"))
    if not view.best:
        parts.append(text_html("No trial completed, so there is no best trial to compare.", "missing"))
        return Section("Best vs default", "".join(parts))
    if view.multi_objective:
        parts.append(text_html("Best = the Pareto-front trials: " + ", ".join(f"#{t.number}" for t in view.best) + "."))
    else:
        is_default = view.default is not None and view.best[0].number == view.default.number
        parts.append(text_html(f"Best = trial #{view.best[0].number} (study.best_trial)"
                               + (": the default itself; no trial beat it." if is_default else ".")))
    comparison = _Comparison.of(view)
    parts.append(figure_html(comparison.bars(comparison.objectives, "Objectives")))
    if comparison.run_metrics:
        parts.append(figure_html(comparison.bars(
            comparison.run_metrics, "Run metrics (rank 0 metrics.jsonl: median throughput, last evaluation PSNR)")))
    if comparison.phases_ms:
        parts.append(figure_html(comparison.stacked_phases()))
    parts.extend(text_html(note, "missing") for note in comparison.notes)
    parts.append(table_html(comparison.table(with_change=view.default is not None), float_format=_FLOAT_FORMAT))
    parts.append(_settings_diff_html(view, comparison.trials))
    return Section("Best vs default", "".join(parts))


def _settings_of(trial: FrozenTrial) -> dict[str, Any]:
    settings = dict(trial.user_attrs.get("settings", {}))
    settings.update({f"env {k}": v for k, v in trial.user_attrs.get("nccl_env", {}).items()})
    return settings


def _settings_diff_html(view: _StudyView, trials: list[FrozenTrial]) -> str:
    if view.default is None or len(trials) < 2:
        return ""
    settings = {t.number: _settings_of(t) for t in trials}
    base = settings[view.default.number]
    keys = list(dict.fromkeys(k for t in trials for k in settings[t.number]))
    differing = [k for k in keys if any(settings[t.number].get(k) != base.get(k) for t in trials[1:])]
    head = "<h3>Settings that differ from the default</h3>"
    if not differing:
        return head + text_html("None: the best trial ran the default settings.")
    table = pd.DataFrame(
        {view.label(t): [_cell(settings[t.number].get(k)) for k in differing] for t in trials},
        index=pd.Index(differing, name="setting"),
    )
    return head + table_html(table.reset_index())


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _main_diagnosis(trial: FrozenTrial) -> str:
    diagnoses = trial.user_attrs.get("diagnoses", [])
    if not diagnoses:
        return ""
    top = min(diagnoses, key=lambda d: SEVERITY_ORDER.get(d.get("severity", ""), len(SEVERITY_ORDER)))
    return f"{top['bottleneck']} ({top.get('severity', '?')})"


def _trials_section(view: _StudyView) -> Section:
    df = view.frame.copy()
    param_cols = [c for c in df.columns if c.startswith("param_")]
    by_number = {t.number: t for t in view.trials}
    df.insert(1, "role", [view.role(by_number[n]) for n in df["number"]])
    df.insert(df.columns.get_loc("log_path"), "params",
              ["; ".join(f"{c.removeprefix('param_')}={v}" for c, v in row.items() if not pd.isna(v))
               for _, row in df[param_cols].iterrows()])
    df.insert(df.columns.get_loc("log_path"), "main_diagnosis", [_main_diagnosis(by_number[n]) for n in df["number"]])
    interconnects = [by_number[n].user_attrs.get("emulated_interconnect", "") for n in df["number"]]
    if any(i not in ("", "none") for i in interconnects):
        df.insert(df.columns.get_loc("log_path"), "emulated_interconnect", interconnects)
    df = df.drop(columns=param_cols)
    counts = ", ".join(f"{o}: {n}" for o, n in df["outcome"].value_counts().items())
    table = f'<div style="overflow-x:auto">{table_html(df, float_format=_FLOAT_FORMAT)}</div>'  # wide: scrolls
    return Section("Trials", text_html(f"{len(df)} trials ({counts or 'none'}).") + table)


def _diagnoses_section(view: _StudyView) -> Section:
    rows = [
        {"number": t.number, "bottleneck": d["bottleneck"], "severity": d.get("severity", ""),
         "evidence": d.get("evidence", ""), "knob": d.get("knob", "")}
        for t in view.trials for d in t.user_attrs.get("diagnoses", [])
    ]
    if not rows:
        body = text_html("No trial recorded a diagnosis.")
    else:
        body = table_html(pd.DataFrame(rows))
    return Section("Bottlenecks per trial", body)


def _applied_check(set_value: Any, applied_value: Any) -> str:
    if applied_value is None:
        return "not reported"
    if set_value is None:
        return "applied, not set by the sweep"
    return "as set" if str(set_value) == str(applied_value) else "differs"


def _nccl_section(view: _StudyView, nccl_active: bool) -> Section:
    if not nccl_active:
        return Section("NCCL", text_html("NCCL parameters inactive (gloo backend): NCCL variables were not sampled."))
    rows = []
    for t in view.trials:
        env, applied = t.user_attrs.get("nccl_env", {}), t.user_attrs.get("nccl_applied", {})
        for var in dict.fromkeys([*env, *applied]):
            rows.append({"number": t.number, "variable": var, "set": _cell(env.get(var)),
                         "applied": _cell(applied.get(var)), "check": _applied_check(env.get(var), applied.get(var))})
    note = text_html("set = the value the sweep put in the trial's environment; applied = what NCCL reported "
                     "(NCCL_DEBUG=INFO, 'set by environment to'); empty = not reported.")
    if not rows:
        return Section("NCCL", text_html("No trial set or reported an NCCL variable."))
    return Section("NCCL", note + table_html(pd.DataFrame(rows)))


def _interconnect_label(view: _StudyView) -> str | None:
    names = sorted({t.user_attrs.get("emulated_interconnect", "") for t in view.trials} - {"", "none"})
    if not names:
        return None
    from trainer.parallel.dist_env import EMULATED_INTERCONNECT_ENV  # imports torch: only when needed

    described = [
        f"{n} ({' '.join(f'{k}={v}' for k, v in EMULATED_INTERCONNECT_ENV.get(n, {}).items()) or 'no NCCL variables'})"
        for n in names
    ]
    return ("Emulated interconnect: " + ", ".join(described)
            + " — bandwidths are those of one host with NCCL paths disabled, not of a real cluster.")


def _overview_section(view: _StudyView, nccl_active: bool) -> Section:
    objectives = ", ".join(f"{n} ({view.direction_word(i)})" for i, n in enumerate(view.names))
    parts = [text_html(f"Study {view.study.study_name!r}: {len(view.trials)} trials; objectives: {objectives}.")]
    counts = view.frame["outcome"].value_counts()
    parts.append(table_html(pd.DataFrame({"outcome": counts.index, "trials": counts.values})))
    if view.default is not None:
        parts.append(text_html(f"Default: trial #{view.default.number} ({_outcome(view.default)})."))
    if view.best:
        word = "Pareto front" if view.multi_objective else "Best"
        parts.append(text_html(f"{word}: " + ", ".join(f"trial #{t.number}" for t in view.best) + "."))
    parts.append(text_html("NCCL parameters active (nccl backend)." if nccl_active
                           else "NCCL parameters inactive (gloo backend)."))
    return Section("Study", "".join(parts))


def write_study_report(study: optuna.Study, out_dir: Path, *, title: str, nccl_active: bool) -> Path:
    """Write ``out_dir/report.html`` (self-contained, offline) for a sweep study; returns its path.

    Sections: study overview, optimisation history, parameter importances, Pareto front (several
    objectives), parallel coordinates, best vs default (objectives, run throughput/PSNR, step-time
    breakdown, differing settings), per-trial outcomes, bottlenecks per trial, NCCL set vs applied
    (or "NCCL parameters inactive (gloo backend)" when ``nccl_active`` is False).

    Raises:
        StudyReportError: bad trial attributes, or ``out_dir`` cannot be written (names the path).
    """
    view = _StudyView.of(study)
    interconnect = _interconnect_label(view)
    sections = [
        _overview_section(view, nccl_active),
        _history_section(view),
        _importance_section(view),
        *([_pareto_section(view)] if view.multi_objective else []),
        _parallel_section(view),
        _best_vs_default_section(view),
        _trials_section(view),
        _diagnoses_section(view),
        _nccl_section(view, nccl_active),
    ]
    page = render_page(title, sections, subtitle=interconnect)
    return _write_text(Path(out_dir) / "report.html", page, "the study report")


# ----------------------------------------------------------------------------------------------
# Terminal summary
# ----------------------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else _FLOAT_FORMAT.format(value)


def print_summary(study: optuna.Study, console: Console | None = None) -> None:
    """Print rich tables: trials by outcome, best vs default for each objective, the best settings.

    For several objectives the "best" value of an objective is the best among the Pareto-front trials.
    A change is ``(best - default) / |default| * 100`` percent.

    Raises:
        StudyReportError: bad trial attributes.
    """
    console = console or make_console()
    view = _StudyView.of(study)

    outcomes = Table(title=f"Study {study.study_name}: {len(view.trials)} trials by outcome")
    outcomes.add_column("outcome")
    outcomes.add_column("trials", justify="right")
    for outcome, count in view.frame["outcome"].value_counts().items():
        outcomes.add_row(str(outcome), str(count))
    console.print(outcomes)

    if not view.best:
        console.print("No trial completed: no best trial, no best settings.")
        return
    default_values = _objective_values(view.default, view.names) if view.default is not None else None
    versus = Table(title="Best vs default")
    for col in ("objective", "default", "best", "best trial", "change"):
        versus.add_column(col, justify="left" if col == "objective" else "right")
    for i, name in enumerate(view.names):
        pick = max if view.directions[i] == StudyDirection.MAXIMIZE else min
        best = pick(view.best, key=lambda t: t.values[i])
        default = default_values[i] if default_values is not None else math.nan
        change = ""
        if math.isfinite(default) and default != 0:
            pct = (best.values[i] - default) / abs(default) * 100.0
            better = (pct > 0) == (view.directions[i] == StudyDirection.MAXIMIZE)
            change = f"{pct:+.1f} % ({'better' if better else 'worse'})" if pct != 0 else "0.0 %"
            if view.default is not None and best.number != view.default.number and best.params == view.default.params:
                change = f"{pct:+.1f} % (same settings as the default: run-to-run noise)"
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
            row.append(_cell(view.default.params.get(name)))
        row.extend(_cell(t.params.get(name)) for t in shown)
        settings.add_row(*row)
    console.print(settings)

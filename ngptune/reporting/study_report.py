"""Study report of an ``ngptune sweep``: ``report.html``, ``trials.csv`` and a terminal summary (DESIGN.md §6).

The report reads an Optuna study whose trials carry the user attributes the sweep writes
(listed in :mod:`ngptune.tuning.sweep`'s docstring): ``outcome``, ``reason``, ``log_path``, ``run_dir``, ``duration_s``,
``is_default``, ``settings``, ``nccl_env``, ``nccl_applied``, ``emulated_interconnect``, ``objectives``,
``phase_ms``, ``quality``, ``diagnoses``, ``diagnoses_note`` and ``derived_settings`` (what the
run chose for the config's null settings: the default's column shows it, marked ``(derived)``, or
``derived`` where the run recorded none), and the study's user attributes
``confirmation`` (the re-runs of best and default, :mod:`ngptune.tuning.confirm`),
``objective_warning`` (a throughput-only study) and the sampler, pruner and worker records of
:mod:`ngptune.tuning.provenance` (stated in the overview with whether parallel workers make the
sampler non-reproducible). Nothing else is needed; the run directory of a trial is read only for the
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

Modules: :mod:`ngptune.reporting.study_data` reads the study (trials, objectives, default and best),
:mod:`ngptune.reporting.study_plots` draws the plots, this module lays out ``report.html`` and
:mod:`ngptune.reporting.study_summary` writes ``trials.csv`` and the terminal summary (re-exported
here).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial

from ngptune.reporting.nccl_text import nccl_inactive_reason
from ngptune.reporting.html import Section, figure_html, render_page, table_html, text_html
from ngptune.reporting.study_data import (
    DERIVED_NOTE,
    DERIVED_TEXT,
    QUALITY_COLUMNS,
    StudyReportError,
    quality_values,
    StudyView,
    best_trials,
    category_text,
    cell_text,
    default_trial,
    is_completed,
    objective_names,
    outcome_of,
    trials_frame,
    write_text,
)
from ngptune.reporting.study_recommendation import Recommendation, best_heading, change_text, recommendation
from ngptune.reporting.study_sampling import SETUP_ATTR, sampling_facts
from ngptune.reporting.study_confirmation import confirmation_summary, spread_text
from ngptune.reporting.study_plots import (
    Comparison, absent, absent_values_named, confirmation_bars, optuna_figure, per_objective, plotted_study,
    readable_axis_labels,
)
from ngptune.reporting.study_summary import print_summary, write_trials_csv

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

SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
#: Parameter importances (fANOVA) need this many completed trials; below it each parameter's
#: marginal plot is shown instead (an evaluator fitted to fewer trials ranks noise).
IMPORTANCE_MIN_TRIALS = 24


def _varying_params(trials: list[FrozenTrial]) -> list[str]:
    values: dict[str, set[str]] = {}
    for t in trials:
        for name, value in t.params.items():
            values.setdefault(name, set()).add(repr(value))
    return [name for name, seen in values.items() if len(seen) > 1]


def _history_section(view: StudyView) -> Section:
    if not view.completed:
        body = absent("no trial completed, so there is no objective value to plot.")
    else:
        body = per_objective(view, optuna.visualization.plot_optimization_history)
    return Section("Optimisation history", body)


def _importance_section(view: StudyView) -> Section:
    # the default trial with its base-config values (StudyView.default_params), as the plots draw it
    varying = _varying_params([t for t in plotted_study(view).get_trials(deepcopy=False) if is_completed(t)])
    if len(view.completed) < 2:
        body = absent(f"parameter importances need at least 2 completed trials; this study has {len(view.completed)}.")
    elif not varying:
        body = absent("no parameter takes more than one value among the completed trials, so none can explain a difference.")
    elif len(view.completed) < IMPORTANCE_MIN_TRIALS:
        body = text_html(
            f"Importances are not shown: {len(view.completed)} completed trials, fewer than the "
            f"{IMPORTANCE_MIN_TRIALS} below which an importance evaluator ranks noise. Instead, each parameter's "
            "marginal plot: the objective by the parameter's value, one point per completed trial "
            f"({len(varying)} varying parameters)."
        ) + per_objective(view, lambda study, **kw: optuna.visualization.plot_slice(study, params=varying, **kw))
    elif importlib.util.find_spec("sklearn") is None:
        body = absent("fANOVA importances need scikit-learn (a dependency of ngptune: pip install scikit-learn).")
    else:
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        body = text_html(
            f"fANOVA (Hutter et al. 2014; Optuna's FanovaImportanceEvaluator, a random forest of 64 trees, seed 0) "
            f"over the {len(view.completed)} completed trials: the share of the objective's variance each parameter "
            "explains on its own. Parameters: " + ", ".join(varying) + "."
        ) + per_objective(view, lambda study, **kw: optuna.visualization.plot_param_importances(
            study, evaluator=evaluator, **kw))
    return Section("Parameter importances", body)


def _pruning_section(view: StudyView) -> Section | None:
    """The intermediate values the pruner judged (one line per trial) and the trials it stopped;
    None when no trial reported any."""
    reported = [t for t in view.trials if t.intermediate_values]
    if not reported:
        return None
    pruned = [t for t in view.trials if outcome_of(t) == "pruned" and t.intermediate_values]
    rows = [{"trial": t.number, "stopped at": max(t.intermediate_values),
             "last intermediate value": t.intermediate_values[max(t.intermediate_values)],
             "reason": t.user_attrs.get("reason", "")} for t in pruned]
    parts = [text_html(f"{len(pruned)} of {len(reported)} trials that reported intermediate values were pruned "
                       "(stopped early by the study's pruner). Each line is one trial's intermediate values "
                       "(the PSNR of the evaluation marks, or the training PSNR without marks) by step, or by "
                       "second of training under a seconds budget."),
             optuna_figure(lambda: optuna.visualization.plot_intermediate_values(view.study))]
    if rows:
        parts.append(table_html(pd.DataFrame(rows)))
    return Section("Pruned trials and intermediate values", "".join(parts))


def _pareto_section(view: StudyView) -> Section:
    if not view.completed:
        body = absent("no trial completed, so there is no Pareto front.")
    elif len(view.names) > 3:
        body = absent(f"a Pareto plot shows 2 or 3 objectives; this study has {len(view.names)}.")
    else:
        target_names = [f"{n} ({view.direction_word(i)})" for i, n in enumerate(view.names)]
        body = optuna_figure(lambda: optuna.visualization.plot_pareto_front(view.study, target_names=target_names))
    front = ", ".join(f"#{t.number}" for t in view.best) or "none"
    return Section("Pareto front", text_html(f"Trials on the Pareto front: {front}.") + body)


def _parallel_section(view: StudyView) -> Section:
    if not view.completed:
        body = absent("no trial completed.")
    elif not any(t.params for t in view.completed):
        body = absent("the completed trials have no sampled parameters.")
    else:
        names = [*view.names, *dict.fromkeys(p for t in view.trials for p in t.params)]
        body = per_objective(view, lambda study, **kw: readable_axis_labels(absent_values_named(
            optuna.visualization.plot_parallel_coordinate(study, **kw), study, names), names))
    return Section("Parallel coordinates", body)


def _best_vs_default_section(view: StudyView) -> Section:
    parts: list[str] = []
    if view.default is None:
        parts.append(text_html("No default trial in the study (no trial has user attribute is_default).", "missing"))
    elif not is_completed(view.default):
        reason = view.default.user_attrs.get("reason", "")
        parts.append(text_html(f"The default trial #{view.default.number} did not complete "
                               f"(outcome {outcome_of(view.default)}" + (f": {reason}" if reason else "") + ").", "missing"))
    if not view.best:
        parts.append(text_html("No trial completed, so there is no best trial to compare.", "missing"))
        return Section("Best vs default", "".join(parts))
    if view.multi_objective:
        parts.append(text_html("Best = the Pareto-front trials: " + ", ".join(f"#{t.number}" for t in view.best) + "."))
    else:
        is_default = view.default is not None and view.best[0].number == view.default.number
        parts.append(text_html(f"Best = trial #{view.best[0].number} (study.best_trial)"
                               + (": the default itself; no trial beat it." if is_default else ".")))
    comparison = Comparison.of(view)
    if len(comparison.trials) > 1:  # bars side by side; the default alone has nothing to stand beside
        parts.append(figure_html(comparison.bars(comparison.objectives, "Objectives (single runs)")))
        if comparison.run_metrics:
            parts.append(figure_html(comparison.bars(
                comparison.run_metrics,
                "Run metrics, single runs (rank 0 metrics.jsonl: median throughput, last evaluation PSNR)")))
        if comparison.phases_ms:
            parts.append(figure_html(comparison.stacked_phases()))
    else:
        parts.append(text_html("The best is the default trial: no chart, its values are in the table below."))
    parts.extend(text_html(note, "missing") for note in comparison.notes)
    parts.append(table_html(comparison.table(with_change=view.default is not None), quantity_column="quantity"))
    if comparison.run_metrics:
        parts.append(text_html(RUN_METRICS_NOTE, "note"))
    parts.append(_settings_diff_html(view, comparison.trials))
    return Section(best_heading(view, "Objectives, run metrics and settings: best vs default"), "".join(parts))


RUN_METRICS_NOTE = ("The \"run\" rows come from rank 0's metrics records during training, not from the score: "
                    "run throughput_samples_per_s is the median over the records (the steady state; the quality "
                    "table's samples_per_s is the whole run's mean), run eval_psnr_db the last evaluation during "
                    "training (a pruner's mark on its few views; the score is the final evaluation).")


def _confirmation_runs_html(record: dict[str, Any]) -> str:
    """Every recorded re-run, one row each (the record's label ``best`` reads "candidate": the trial
    re-run against the default, which need not be the best single run)."""
    rows = [{"configuration": "candidate" if r["label"] == "best" else r["label"], "trial": r.get("trial", ""), "re-run": r["index"], "seed": r["seed"],
             "outcome": r["outcome"], record["objective"]: r["value"],
             **{c: (r.get("quality") or {}).get(c) for c in QUALITY_COLUMNS[:4]},
             "reason": r.get("reason", "")}
            for r in sorted(record["runs"], key=lambda r: (r["label"], r.get("trial", -1), r["index"]))]
    return "<h3>Every re-run</h3>" + table_html(pd.DataFrame(rows))


def _confirmation_section(view: StudyView) -> Section:
    """The first comparison: the confirmation re-runs of the candidate and the default (mean ±
    sd, n), the verdict and its test, a bar chart of the means with their standard deviations."""
    summary = confirmation_summary(view.study)
    record = view.study.user_attrs.get("confirmation")
    if summary is None:
        note = ("No confirmation re-runs are recorded (--no-confirm, the default trial did not complete, or only the "
                "default completed): every comparison below is of single runs, which are no evidence of a difference."
                if view.best else "No trial completed: nothing was re-run.")
        return Section("Confirmation re-runs", text_html(note, "missing"))
    verdict = summary.verdict or {}
    sentence = verdict.get("sentence") or "the confirmation did not finish (a re-run of the sweep resumes it)."
    test = verdict.get("test") or "no test ran"
    default_label, candidate_label = f"default #{summary.default}", f"trial #{summary.candidate}"
    rows = []
    for label, (default, candidate) in summary.rows.items():
        diff = change_text(label, candidate.mean, default.mean) if default.n and candidate.n else ""
        rows.append({"quantity": label, default_label: spread_text(default, label),
                     candidate_label: spread_text(candidate, label),
                     "difference of means": diff})
    parts = [
        text_html(f"Trial #{summary.candidate} (the best non-default trial) and the default trial #{summary.default} "
                  f"re-trained {summary.repeats} times each with new seeds, in alternating order; mean ± sample "
                  f"standard deviation over n re-runs. Test: {test}."),
        table_html(pd.DataFrame(rows)),
        text_html("Verdict: " + sentence, _verdict_class(recommendation(view))),
        figure_html(confirmation_bars(summary)),
        _confirmation_runs_html(record),
    ]
    return Section("Confirmation re-runs", "".join(parts))


def _quality_section(view: StudyView) -> Section:
    """Best vs default on what the user trains for: PSNR and time, then throughput; the confirmation."""
    parts: list[str] = []
    warning = view.study.user_attrs.get("objective_warning")
    if warning:
        parts.append(text_html(f"Warning: {warning}.", "missing"))
    trials = view.compared()
    if not trials:
        parts.append(text_html("No default and no completed trial: nothing to compare.", "missing"))
    else:
        table = pd.DataFrame({f"{view.label(t)}, single run": quality_values(t) for t in trials})
        table.index = list(QUALITY_COLUMNS)
        if view.default is not None:
            base = table[f"{view.label(view.default)}, single run"]
            for t in trials[1:]:
                label = view.label(t)
                table[f"{label} vs default"] = [change_text(q, v, d) for q, v, d in
                                                zip(table.index, table[f"{label}, single run"], base)]
        parts.append(text_html("Single runs: one trial each, no evidence of a difference on their own (the "
                               "confirmation re-runs above are). PSNR of the final evaluation (the same evenly "
                               "spaced held-out views for every trial) after each trial's budget, then speed; "
                               "changes against the default: PSNR in dB, times in seconds, the rest in percent."))
        parts.append(table_html(table.rename_axis("quantity").reset_index(), quantity_column="quantity"))
    return Section(best_heading(view, "Quality and time: best vs default"), "".join(parts))


def _without_log(reason: str) -> str:
    """A trial's reason without the ``; log: PATH`` the sweep's line ends it with (the trials
    table gives the log on a line of its own)."""
    head, sep, _ = str(reason).rpartition("; log: ")
    return head if sep else str(reason)


def _settings_of(trial: FrozenTrial) -> dict[str, Any]:
    settings = dict(trial.user_attrs.get("settings", {}))
    settings.update({f"env {k}": v for k, v in trial.user_attrs.get("nccl_env", {}).items()})
    return settings


def _differs(value: Any, default: Any) -> bool:
    """Whether a setting differs from the default's; spellings of one category (``None`` and
    ``"none"``) do not."""
    return value != default and category_text(value) != category_text(default)


def _settings_diff_html(view: StudyView, trials: list[FrozenTrial]) -> str:
    if view.default is None or len(trials) < 2:
        return ""
    settings = {t.number: _settings_of(t) for t in trials}
    keys = list(dict.fromkeys(k for t in trials for k in settings[t.number]))
    base = settings[view.default.number]
    for key in keys:  # what the default ran: its base config's value of a setting it did not sample
        found, value = view.default_setting(key)  # a null the run chose: its value, or "derived"
        if key not in base and found:
            base[key] = value
    # a null the default's run recorded no value for is unknown: no difference can be told
    unknown = [k for k in keys if base.get(k) == DERIVED_TEXT and view.is_derived(k)]
    differing = [k for k in keys if k not in unknown
                 and any(_differs(settings[t.number].get(k), base.get(k)) for t in trials[1:])]
    head = "<h3>Settings that differ from the default</h3>"
    not_compared = text_html(
        "Not compared with the default: " + "; ".join(
            f"{k} (" + ", ".join(f"{view.label(t)}: {cell_text(settings[t.number].get(k))}" for t in trials[1:]) + ")"
            for k in unknown)
        + ". The default's config leaves these settings null for the trainer to choose from the scene, and its "
          "run recorded no value (derived), so whether they differ is unknown.") if unknown else ""
    followed = _derived_differences(view, trials, keys)
    if not differing and not followed:
        if unknown:
            return head + text_html("None of the settings that can be compared.") + not_compared
        return head + text_html("None: the best trial ran the default settings.")
    rows = {k: [view.default_text(k) if view.is_default(t) else cell_text(settings[t.number].get(k)) for t in trials]
            for k in differing}
    rows.update(followed)
    table = pd.DataFrame(rows, index=[view.label(t) for t in trials]).T
    table.index.name = "setting"
    return head + table_html(table.reset_index()) + _derived_note(view, list(rows)) + not_compared


def _derived_differences(view: StudyView, trials: list[FrozenTrial], given: list[str]) -> dict[str, list[str]]:
    """Settings no compared trial was given whose value another trial's run chose differently from
    the default's run (each run's ``derived_settings``: a T that followed a sampled F, a cone angle
    that followed a box): setting → one cell per trial, ``value (derived)``, or ``derived`` where
    a run recorded none."""
    recorded = {t.number: t.user_attrs.get("derived_settings") or {} for t in trials}
    base = recorded[view.default.number] if view.default is not None else {}
    rows: dict[str, list[str]] = {}
    for key in dict.fromkeys(k for r in recorded.values() for k in r):
        if key in given or key not in base or not view.is_derived(key):
            continue
        if any(key in recorded[t.number] and _differs(recorded[t.number][key], base[key]) for t in trials):
            rows[key] = [f"{category_text(recorded[t.number][key])} ({DERIVED_TEXT})" if key in recorded[t.number]
                         else DERIVED_TEXT for t in trials]
    return rows


def _derived_note(view: StudyView, keys: list[str]) -> str:
    """A sentence under a table whose default column shows settings the run chose from the scene
    (``(derived)``, or ``derived`` alone where the run recorded no value); "" when it shows none."""
    return text_html(f"{DERIVED_NOTE}.") if any(view.is_derived(k) for k in keys) else ""


def _main_diagnosis(trial: FrozenTrial) -> str:
    diagnoses = trial.user_attrs.get("diagnoses", [])
    if not diagnoses:
        return ""
    top = min(diagnoses, key=lambda d: SEVERITY_ORDER.get(d.get("severity", ""), len(SEVERITY_ORDER)))
    return f"{top['bottleneck']} ({top.get('severity', '?')})"


TRIALS_TABLE_LEFT_OUT = ("state", "rays_per_s", "samples_per_s", "samples_per_ray", "occupancy_fraction", "startup_s",
                         "gpus")
"""trials.csv columns the page's trials table leaves out to fit the page (the CSV has them)."""


def _trials_section(view: StudyView) -> Section:
    df = view.frame.copy()
    param_cols = [c for c in df.columns if c.startswith("param_")]
    by_number = {t.number: t for t in view.trials}
    df.insert(1, "trial", [f"#{n} {view.role(by_number[n])}".rstrip() for n in df["number"]])
    # the outcome with its reason and, for a trial that did not complete, where its log is
    df["outcome"] = [o if not r and o == "completed"
                     else f"{o}: {_without_log(r)}" + (f"\nlog: {_short_path(log)}" if log else "")
                     for o, r, log in zip(df["outcome"], df["reason"], df["log_path"])]
    df.insert(df.columns.get_loc("log_path"), "params",  # from the trial: an int stays an int; one a line
              ["\n".join(f"{name}={_param_text(view, by_number[n], name)}" for name in view.params_of(by_number[n]))
               for n in df["number"]])
    df.insert(df.columns.get_loc("log_path"), "main_diagnosis", [_main_diagnosis(by_number[n]) for n in df["number"]])
    interconnects = [by_number[n].user_attrs.get("emulated_interconnect", "") for n in df["number"]]
    if any(i not in ("", "none") for i in interconnects):
        df.insert(df.columns.get_loc("log_path"), "emulated_interconnect", interconnects)
    left_out = [c for c in TRIALS_TABLE_LEFT_OUT  # an objective's column stays, whatever its name
                if c in df.columns and c not in view.names and (c != "gpus" or not df[c].astype(bool).any())]
    counts = ", ".join(f"{o}: {n}" for o, n in view.frame["outcome"].value_counts().items())
    df = df.drop(columns=param_cols + left_out + ["number", "reason", "log_path"])
    note = text_html(f"{len(df)} trials ({counts or 'none'}). trials.csv has every column, and each log's full path.")
    shown = list(view.default_params()) if view.default is not None else []  # the default's row
    return Section("Trials", note + f'<div class="wide">{table_html(df)}</div>' + _derived_note(view, shown))


def _param_text(view: StudyView, trial: FrozenTrial, name: str) -> str:
    if view.is_default(trial):
        return view.default_text(name)
    return category_text(trial.params[name])


def _short_path(path: Any) -> str:
    """A log path by its file and the two folders above it (the trial's), for the trials table."""
    parts = Path(str(path)).parts
    return str(Path(*parts[-3:])) if len(parts) > 3 else str(path)


def _diagnoses_section(view: StudyView) -> Section:
    rows = [
        {"number": t.number, "bottleneck": d["bottleneck"], "severity": d.get("severity", ""),
         "evidence": d.get("evidence", ""), "knob": d.get("knob", "")}
        for t in view.trials for d in t.user_attrs.get("diagnoses", [])
    ]
    notes = [{"number": t.number, "checks": t.user_attrs.get("diagnoses_note") or "no diagnosis recorded"}
             for t in view.trials]
    if not rows:
        body = text_html("No bottleneck passed its threshold in any trial; what each trial's check covered:")
    else:
        body = table_html(pd.DataFrame(rows)) + text_html("What each trial's check covered:")
    return Section("Bottlenecks per trial", body + table_html(pd.DataFrame(notes)))


def _applied_check(set_value: Any, applied_value: Any) -> str:
    if applied_value is None:
        return "not reported"
    if set_value is None:
        return "applied, not set by the sweep"
    return "as set" if str(set_value) == str(applied_value) else "differs"


def nccl_inactive_text(view: StudyView) -> str:
    """Why the study's NCCL parameters did nothing (:func:`nccl_inactive_reason`)."""
    return f"NCCL parameters inactive ({nccl_inactive_reason(view.study.user_attrs.get('nproc_per_node'))})"


def _nccl_section(view: StudyView, nccl_active: bool) -> Section:
    if not nccl_active:
        return Section("NCCL", text_html(f"{nccl_inactive_text(view)}: NCCL variables were not sampled."))
    rows = []
    for t in view.trials:
        env, applied = t.user_attrs.get("nccl_env", {}), t.user_attrs.get("nccl_applied", {})
        for var in dict.fromkeys([*env, *applied]):
            rows.append({"number": t.number, "variable": var, "set": cell_text(env.get(var)),
                         "applied": cell_text(applied.get(var)), "check": _applied_check(env.get(var), applied.get(var))})
    note = text_html("set = the value the sweep put in the trial's environment; applied = what NCCL reported "
                     "(NCCL_DEBUG=INFO, 'set by environment to'); empty = not reported.")
    if not rows:
        return Section("NCCL", text_html("No trial set or reported an NCCL variable."))
    return Section("NCCL", note + table_html(pd.DataFrame(rows)))


def _interconnect_label(view: StudyView) -> str | None:
    names = sorted({t.user_attrs.get("emulated_interconnect", "") for t in view.trials} - {"", "none"})
    if not names:
        return None
    from trainer.contract import EMULATED_INTERCONNECT_ENV

    described = [
        f"{n} ({' '.join(f'{k}={v}' for k, v in EMULATED_INTERCONNECT_ENV.get(n, {}).items()) or 'no NCCL variables'})"
        for n in names
    ]
    return ("Emulated interconnect: " + ", ".join(described)
            + " — bandwidths are those of one host with NCCL paths disabled, not of a real cluster.")


def _recommendation_section(rec: Recommendation) -> Section:
    """The page's first lines: what the study recommends and why, before any best-vs-default table."""
    return Section("Recommendation", text_html(rec.sentence, _verdict_class(rec)))


def _verdict_class(rec) -> str:
    """The style of a recommendation's sentence: plain when re-runs decided it (a confirmed gain, or
    the default kept on their evidence), the warning colour when nothing upholds it."""
    return "note" if rec.confirmed or rec.re_run else "missing"


def _setup_html(view: StudyView) -> str:
    """Scene, base config and fixed settings of the study (study attributes ``scene`` and ``setup``)."""
    attrs = view.study.user_attrs
    setup = attrs.get(SETUP_ATTR) if isinstance(attrs.get(SETUP_ATTR), dict) else {}
    rows = [{"": "study file", "value": attrs.get("study_file", "not recorded")},
            {"": "scene", "value": attrs.get("scene", setup.get("scene", "not recorded"))},
            {"": "base config", "value": setup.get("base_config") or ("the trainer's defaults" if setup else "not recorded")}]
    fixed = {**(setup.get("settings") or {}), **(setup.get("nccl_settings") or {})}
    for key, value in fixed.items():
        rows.append({"": f"fixed setting {key}", "value": cell_text(value)})
    note = ("Fixed settings were chosen for this scene and may not suit another; best_config.json lists them in its "
            "comments." if fixed else ("No fixed settings." if setup else "Fixed settings: not recorded."))
    return table_html(pd.DataFrame(rows)) + text_html(note)


def _watch_html(view: StudyView, out_dir: Path) -> str:
    """How to watch the study live: optuna-dashboard (``ngptune dashboard``) and every trial's
    training curves in TensorBoard (trials are runs in the study folder)."""
    storage = view.study.user_attrs.get("storage")
    command = f"ngptune dashboard {out_dir}"
    if isinstance(storage, str) and "://" in storage:
        command += f" --storage {storage}"
        command += " (with the password the sweep was given)" if "***" in storage else ""
    return text_html(f"Watch it: {command} opens this study in optuna-dashboard; tensorboard --logdir "
                     f"{Path(out_dir) / 'trials'} shows every trial's training curves.")


def _overview_section(view: StudyView, nccl_active: bool, out_dir: Path) -> Section:
    objectives = ", ".join(f"{n} ({view.direction_word(i)})" for i, n in enumerate(view.names))
    parts = [text_html(f"Study {view.study.study_name!r}: {len(view.trials)} trials; objectives: {objectives}."),
             _watch_html(view, out_dir), _setup_html(view)]
    counts = view.frame["outcome"].value_counts()
    parts.append(table_html(pd.DataFrame({"outcome": counts.index, "trials": counts.values})))
    if view.default is not None:
        parts.append(text_html(f"Default: trial #{view.default.number} ({outcome_of(view.default)})."))
    if view.best:
        word = "Pareto front (single runs)" if view.multi_objective else "Best single run"
        rec = recommendation(view)
        parts.append(text_html(f"{word}: " + ", ".join(f"trial #{t.number}" for t in view.best)
                               + f". Recommended: trial #{rec.trial}"
                               + (" (the default)" if rec.is_default else "")
                               + (", confirmed by re-runs." if rec.confirmed
                                  else ", as the re-runs decided." if rec.re_run else ", not confirmed by re-runs.")))
    parts.extend(text_html(line) for line in sampling_facts(view.study).sentences())
    parts.append(text_html("NCCL parameters active (nccl backend)." if nccl_active else f"{nccl_inactive_text(view)}."))
    shared = max((t.user_attrs.get("trials_per_gpu", 1) for t in view.trials), default=1)
    if shared > 1:
        parts.append(text_html(f"Up to {shared} trials shared one GPU: a step budget's PSNR does not depend on the "
                               "neighbours; steps/s, throughput, times and a seconds budget's steps do, and are not "
                               "comparable between trials."))
    return Section("Study", "".join(parts))


def write_study_report(study: optuna.Study, out_dir: Path, *, title: str, nccl_active: bool) -> Path:
    """Write ``out_dir/report.html`` (self-contained, offline) for a sweep study; returns its path.

    Sections: the recommendation (from the confirmation: the default when the best was not
    confirmed, and why), study overview (scene, base config, fixed settings), optimisation history, parameter importances, Pareto front (several
    objectives), parallel coordinates, best vs default (objectives, run throughput/PSNR, step-time
    breakdown, differing settings), per-trial outcomes, bottlenecks per trial, NCCL set vs applied
    (or :func:`nccl_inactive_text` when ``nccl_active`` is False).

    Raises:
        StudyReportError: bad trial attributes, or ``out_dir`` cannot be written (names the path).
    """
    view = StudyView.of(study)
    interconnect = _interconnect_label(view)
    sections = [
        _recommendation_section(recommendation(view)),
        _confirmation_section(view),
        _overview_section(view, nccl_active, Path(out_dir)),
        _quality_section(view),
        _history_section(view),
        _importance_section(view),
        *([section] if (section := _pruning_section(view)) is not None else []),
        *([_pareto_section(view)] if view.multi_objective else []),
        _parallel_section(view),
        _best_vs_default_section(view),
        _trials_section(view),
        _diagnoses_section(view),
        _nccl_section(view, nccl_active),
    ]
    page = render_page(title, sections, subtitle=interconnect)
    return write_text(Path(out_dir) / "report.html", page, "the study report")

"""The data of a study report (:mod:`ngptune.reporting.study_report`): an Optuna study's trials
read and checked, its objective names, default and best trials, one row per trial, and the
run metrics of a trial's run directory."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from ngptune.errors import NgptuneError, USER_ERRORS
from ngptune.reporting.study_sampling import DEFINITION_ATTR
from trainer.contract import (
    DERIVED_SETTINGS,
    PHASES,
    MetricsError,
    RunDir,
    atomic_write_text,
    config_to_dict,
    load_config,
    read_metrics,
)

__all__ = [
    "OUTCOMES",
    "CONFIRMATION_ATTR",
    "DERIVED_NOTE",
    "DERIVED_TEXT",
    "NCCL_UNSET_TEXT",
    "NOT_RECORDED_TEXT",
    "StudyReportError",
    "StudyView",
    "best_trials",
    "category_text",
    "cell_text",
    "default_trial",
    "is_completed",
    "objective_names",
    "objective_values",
    "outcome_of",
    "phase_order",
    "read_run_metrics",
    "trial_duration_s",
    "trials_frame",
    "write_text",
]

OUTCOMES: tuple[str, ...] = ("completed", "pruned", "failed")


# Outcome of a trial that has no ``outcome`` attribute (a trial Optuna itself marked, e.g. a stale
# RUNNING trial of a killed worker that the heartbeat failed): the Optuna state's meaning.
STATE_OUTCOME: dict[TrialState, str] = {
    TrialState.COMPLETE: "completed",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "failed",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}


DICT_ATTRS = ("settings", "nccl_env", "nccl_applied", "objectives", "phase_ms", "derived_settings")

DERIVED_TEXT = "derived"
"""What the default trial ran with for a setting its config leaves null for the run to choose from
the scene (:data:`trainer.contract.config.DERIVED_SETTINGS`) when the run recorded no value; a
recorded value is shown with it in brackets: ``0.00390625 (derived)``."""
DERIVED_NOTE = ("(derived): the default's config leaves the setting null and the trainer chose the value from the "
                "scene (its box, its views, the scene model), as the run recorded it; \"derived\" alone: the run "
                "recorded no value")
"""The sentence under a table whose default column shows a derived setting."""
NCCL_UNSET_TEXT = "not set"
"""What the default trial ran with for an NCCL variable it did not set: NCCL's own choice."""
NOT_RECORDED_TEXT = "not recorded"
"""What the default trial ran with for a setting when its config file cannot be read."""



# Study user attributes a sweep worker sets when it starts (ngptune.tuning.provenance writes them).
CONFIRMATION_ATTR = "confirmation"  #: the confirmation's re-runs and verdict (ngptune.tuning.confirm)


class StudyReportError(NgptuneError):
    """A study's trials carry user attributes the report cannot read; names the study, trial and attribute."""


def check_attrs(study: optuna.Study, trial: FrozenTrial) -> None:
    where = f"study {study.study_name!r}, trial {trial.number}"
    attrs = trial.user_attrs
    for key in DICT_ATTRS:
        if key in attrs and not isinstance(attrs[key], dict):
            raise StudyReportError(
                f"{where}: user attribute {key!r} must be a dict, got {type(attrs[key]).__name__}"
            )
    for key in ("objectives", "phase_ms", "derived_settings"):
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


def is_completed(trial: FrozenTrial) -> bool:
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
    for trial in filter(is_completed, trials):
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
    """The untuned default trial (user attribute ``is_default`` true): the first completed one, else
    the last attempt (a default that failed and was retried has several), or None."""
    defaults = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("is_default") is True]
    return next((t for t in defaults if t.state == TrialState.COMPLETE), defaults[-1] if defaults else None)


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """``[study.best_trial]`` for one objective, the Pareto-front trials (by number) for several; [] if none completed."""
    if not any(is_completed(t) for t in study.get_trials(deepcopy=False)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: t.number)


def outcome_of(trial: FrozenTrial) -> str:
    """A trial's outcome: ``running`` or ``waiting`` while Optuna says so (a trial of another worker
    still under way; its preset ``failed`` stands for a sweep killed under it, which the next sweep
    recovers), else its recorded ``outcome``, else its state's."""
    if trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return STATE_OUTCOME[trial.state]
    return trial.user_attrs.get("outcome") or STATE_OUTCOME[trial.state]


def trial_duration_s(trial: FrozenTrial) -> float:
    """``duration_s`` as the sweep measured it, else Optuna's start→complete time, else NaN."""
    if "duration_s" in trial.user_attrs:
        return float(trial.user_attrs["duration_s"])
    return trial.duration.total_seconds() if trial.duration is not None else math.nan


def objective_values(trial: FrozenTrial, names: list[str]) -> list[float]:
    """Objective values: ``trial.values`` for a completed trial; what the sweep recorded for the others."""
    if trial.state == TrialState.COMPLETE and trial.values is not None:
        return list(trial.values)
    recorded = trial.user_attrs.get("objectives", {})
    return [math.nan if recorded.get(n) is None else float(recorded[n]) for n in names]


def param_column(values: list[Any]) -> pd.Series:
    """A parameter's values over the trials (None where a trial lacks it); integers stay integers
    (``Int64``, not ``4.0``) when some trials lack the parameter."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pd.Series(values, dtype="Int64")
    return pd.Series(values, dtype=object)


#: Columns every trial is scored on (the sweep's ``quality`` attribute,
#: :func:`ngptune.tuning.objectives.trial_quality`), in ``trials.csv`` order.
QUALITY_COLUMNS: tuple[str, ...] = ("psnr_db", "train_time_s", "steps", "steps_per_s", "rays_per_s", "samples_per_s",
                                    "samples_per_ray", "occupancy_fraction", "startup_s")


def quality_values(trial: FrozenTrial) -> dict[str, float]:
    """The trial's :data:`QUALITY_COLUMNS` (NaN where not recorded)."""
    quality = trial.user_attrs.get("quality") or {}
    return {c: math.nan if quality.get(c) is None else float(quality[c]) for c in QUALITY_COLUMNS}


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial, by number: the contents of ``trials.csv``.

    Columns: ``number``, ``state`` (Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING), ``outcome``
    (completed | pruned | failed; the state's meaning when the sweep recorded none), ``reason``
    ("" when none), ``duration_s`` (s), one column per objective (named by :func:`objective_names`;
    ``trial.values`` for completed trials, the ``objectives`` attribute otherwise, NaN if absent),
    :data:`QUALITY_COLUMNS` but those an objective already names (``steps_per_s`` as an objective
    is one column; NaN where not recorded; ``psnr_db`` the final evaluation's PSNR),
    ``param_<name>`` per sampled parameter (first appearance order; empty where a trial lacks it;
    the default trial's row holds what it ran with for a parameter it did not sample,
    :meth:`StudyView.default_params`: the base config's value, the value the run chose for a
    null one, empty where the run recorded none: a column holds numbers only), ``gpus`` (the trial's GPUs,
    ``"0,1"``; empty on a host without GPUs) and ``log_path``.

    Raises:
        StudyReportError: a trial's user attributes have the wrong types (names trial and attribute).
    """
    return StudyView.of(study).frame


def frame_of(trials: list[FrozenTrial], names: list[str], default_number: int | None,
             default_params: Mapping[str, Any]) -> pd.DataFrame:
    """The rows of :func:`trials_frame` for ``trials`` (sorted by number, attributes checked):
    objective columns ``names``, then the quality columns no objective names; the trial numbered
    ``default_number`` takes ``default_params``."""
    quality_columns = [c for c in QUALITY_COLUMNS if c not in names]  # one column per name
    param_names = list(dict.fromkeys(p for t in trials for p in t.params))
    rows = []
    for trial in trials:
        row: dict[str, Any] = {
            "number": trial.number,
            "state": trial.state.name,
            "outcome": outcome_of(trial),
            "reason": trial.user_attrs.get("reason", ""),
            "duration_s": trial_duration_s(trial),
        }
        row.update(zip(names, objective_values(trial, names)))
        quality = quality_values(trial)
        row.update((c, quality[c]) for c in quality_columns)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["number", "state", "outcome", "reason", "duration_s", *names, *quality_columns])
    params = [default_params if t.number == default_number else t.params for t in trials]
    for p in param_names:
        df[f"param_{p}"] = param_column([ran.get(p) for ran in params])
    df["gpus"] = [",".join(map(str, t.user_attrs.get("gpus", []))) for t in trials]
    df["log_path"] = [t.user_attrs.get("log_path", "") for t in trials]
    return df


def write_text(path: Path, text: str, what: str) -> Path:
    """Write ``text`` atomically, creating the folder; an OS error becomes a StudyReportError naming ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise StudyReportError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
    return path


@dataclasses.dataclass(frozen=True)
class StudyView:
    """What every section needs, computed once."""

    study: optuna.Study
    names: list[str]
    directions: list[StudyDirection]
    trials: list[FrozenTrial]
    completed: list[FrozenTrial]
    default: FrozenTrial | None
    best: list[FrozenTrial]
    frame: pd.DataFrame
    default_config: dict[str, dict[str, Any]] | None = None  #: the default trial's config file, by block

    @classmethod
    def of(cls, study: optuna.Study) -> "StudyView":
        """The view of ``study``.

        Raises:
            StudyReportError: a trial's user attributes have the wrong types (names trial and attribute).
        """
        trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
        for trial in trials:  # the attributes are checked first
            check_attrs(study, trial)
        default = default_trial(study)
        names = objective_names(study)
        view = cls(
            study=study,
            names=names,
            directions=list(study.directions),
            trials=trials,
            completed=[t for t in trials if is_completed(t)],
            default=default,
            best=best_trials(study),
            frame=pd.DataFrame(),
            default_config=None if default is None else trial_config_dict(default),
        )
        # a value the run did not record is an empty cell, never DERIVED_TEXT in a column of numbers
        ran = {k: v for k, v in view.default_params().items() if not (v == DERIVED_TEXT and view.is_derived(k))}
        frame = frame_of(trials, names, None if default is None else default.number, ran)
        return dataclasses.replace(view, frame=frame)

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1

    def direction_word(self, i: int) -> str:
        return "max" if self.directions[i] == StudyDirection.MAXIMIZE else "min"

    def is_default(self, trial: FrozenTrial) -> bool:
        """Whether ``trial`` is the study's default trial."""
        return self.default is not None and trial.number == self.default.number

    def params_of(self, trial: FrozenTrial) -> dict[str, Any]:
        """What ``trial`` ran with for the study's parameters: its own, or for the default trial
        :meth:`default_params` (those it was not given too)."""
        return self.default_params() if self.is_default(trial) else dict(trial.params)

    def label(self, trial: FrozenTrial) -> str:
        if self.is_default(trial):
            return f"default #{trial.number}"
        if not any(b.number == trial.number for b in self.best):
            return f"runner-up #{trial.number}"
        return f"{'Pareto' if self.multi_objective else 'best'} #{trial.number}"

    def role(self, trial: FrozenTrial) -> str:
        """The trial's part in the study, as the trials table names it: ``default``, ``best`` (or
        ``Pareto front``), both, ``default, earlier attempt`` for an attempt at the default before
        the default trial (one that failed and was retried: the default trial is the first completed), or ""."""
        roles = []
        if self.is_default(trial):
            roles.append("default")
        elif trial.user_attrs.get("is_default") is True:
            roles.append("default, earlier attempt")
        if any(b.number == trial.number for b in self.best):
            roles.append("Pareto front" if self.multi_objective else "best")
        return ", ".join(roles)

    def config_setting(self, key: str) -> tuple[bool, Any]:
        """``(found, value)`` of a dotted trainer key in the default trial's config file (the base
        config with the study's fixed settings), null as None; ``(False, None)`` for an NCCL variable
        or an unknown config."""
        block, _, name = key.partition(".")
        section = (self.default_config or {}).get(block) if name else None
        if not isinstance(section, dict) or name not in section:
            return False, None
        return True, section[name]

    def derived_value(self, key: str) -> Any:
        """The value the default trial's run chose for ``key``, a setting of
        :data:`~trainer.contract.config.DERIVED_SETTINGS` its config leaves null (user attribute
        ``derived_settings``, from its ``status.json``), or None where it recorded none."""
        recorded = self.default.user_attrs.get("derived_settings") if self.default is not None else None
        return (recorded or {}).get(key)

    def default_setting(self, key: str) -> tuple[bool, Any]:
        """``(found, value)`` of a dotted trainer key for the default trial: its config's value
        (:meth:`config_setting`); for a null that the run chooses from the scene
        (:data:`~trainer.contract.config.DERIVED_SETTINGS`) the value it chose
        (:meth:`derived_value`), else :data:`DERIVED_TEXT`; ``(False, None)`` for an NCCL variable
        or an unknown config."""
        found, value = self.config_setting(key)
        if found and value is None and key in DERIVED_SETTINGS:
            chosen = self.derived_value(key)
            value = DERIVED_TEXT if chosen is None else chosen
        return found, value

    def is_derived(self, name: str) -> bool:
        """Whether the default trial ran ``name`` at a value its run chose: a setting of
        :data:`~trainer.contract.config.DERIVED_SETTINGS` that it was not given and its config
        leaves null."""
        if self.default is None or name in self.default.params or name in self.default.user_attrs.get("settings", {}):
            return False
        found, value = self.config_setting(name)
        return found and value is None and name in DERIVED_SETTINGS

    def is_conditional(self, name: str) -> bool:
        """Whether a completed trial other than the default lacks the parameter ``name`` (a
        conditional one, which the default too may not have used)."""
        others = [t for t in self.completed if self.default is None or t.number != self.default.number]
        return not all(name in t.params for t in others)

    def conditions(self, name: str) -> list[tuple[str, list[Any]]] | None:
        """The ``when`` conditions ``(parameter, allowed values)`` of the parameter ``name`` as the
        study's definition records them (user attribute ``definition``; [] for an unconditional
        one), or None where the study records no definition or no such parameter."""
        definition = self.study.user_attrs.get(DEFINITION_ATTR)
        params = definition.get("params") if isinstance(definition, Mapping) else None
        spec = next((p for p in params or [] if isinstance(p, Mapping) and p.get("name") == name), None)
        if spec is None or not isinstance(spec.get("when", []), list):
            return None
        return [(key, list(allowed)) for key, allowed in spec.get("when", [])]

    def default_uses(self, name: str) -> bool:
        """Whether the default trial used the parameter ``name``: each of its ``when`` conditions
        (:meth:`conditions`) holds for what the default ran with (the value it was given, else its
        config's); False where the conditions are not recorded or a named value is unknown."""
        conditions = self.conditions(name)
        if self.default is None or conditions is None:
            return False
        given = {**self.default.user_attrs.get("settings", {}), **self.default.params}
        for key, allowed in conditions:
            found, value = (True, given[key]) if key in given else self.config_setting(key)
            if not found or not any(type(value) is type(a) and value == a for a in allowed):
                return False
        return True

    def default_text(self, name: str) -> str:
        """What the default trial ran with for a parameter or setting, as the report's tables and
        the summary show it; never empty while there is a default trial ("" without one).

        ``name`` is a dotted trainer key, an NCCL variable, or ``env NCCL_...`` (the settings
        table's name of one). The text: the value the trial was given (sampled or a fixed
        setting); else its config's (:meth:`default_setting`; ``none`` for a null that means off,
        :func:`category_text`); for a null the run chooses from the scene, the value it chose with
        ``(derived)`` after it (``0.00390625 (derived)``), or :data:`DERIVED_TEXT` where the run
        recorded none; for an NCCL variable it did not set :data:`NCCL_UNSET_TEXT`;
        :data:`NOT_RECORDED_TEXT` when its config cannot be read.
        """
        if self.default is None:
            return ""
        key = name.removeprefix("env ")
        given = {**self.default.user_attrs.get("settings", {}), **self.default.params}
        if key in given:
            return category_text(given[key])
        if "." not in key:  # an NCCL variable
            env = self.default.user_attrs.get("nccl_env", {})
            return category_text(env[key]) if key in env else NCCL_UNSET_TEXT
        found, value = self.default_setting(key)
        if not found:
            return NOT_RECORDED_TEXT
        if self.is_derived(key) and value != DERIVED_TEXT:
            return f"{category_text(value)} ({DERIVED_TEXT})"
        return category_text(value)

    def default_params(self) -> dict[str, Any]:
        """The default trial's parameters, with its config's value (:meth:`default_setting`: for a
        null the run chooses, the value it chose or :data:`DERIVED_TEXT`) for each parameter it was
        not given (the base value lies outside the parameter's range, or is null) that every other
        completed trial has, or that its own ``when`` conditions made it use
        (:meth:`default_uses`; a conditional parameter it did not use stays absent)."""
        if self.default is None:
            return {}
        params = dict(self.default.params)
        others = [t for t in self.completed if t.number != self.default.number]
        for name in dict.fromkeys(p for t in others for p in t.params):
            found, value = self.default_setting(name)
            if name not in params and found and (not self.is_conditional(name) or self.default_uses(name)):
                params[name] = value
        return params

    def compared(self) -> list[FrozenTrial]:
        """Default first, then the best trials (the default once, even when it is also best), then
        the trial the confirmation re-ran against the default when it is none of them (the
        runner-up of a default that won its single run)."""
        head = [self.default] if self.default is not None else []
        trials = head + [b for b in self.best if not head or b.number != head[0].number]
        record = self.study.user_attrs.get(CONFIRMATION_ATTR)
        candidate = record.get("best_trial") if isinstance(record, Mapping) else None
        if candidate not in {t.number for t in trials}:
            trials += [t for t in self.trials if t.number == candidate]
        return trials


def read_run_metrics(trial: FrozenTrial) -> tuple[dict[str, float], str | None]:
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


def phase_order(phase_dicts: list[Mapping[str, float]]) -> list[str]:
    known = [*PHASES, "other"]
    seen = dict.fromkeys(p for d in phase_dicts for p in d)
    return [p for p in known if p in seen] + [p for p in seen if p not in known]


def cell_text(value: Any) -> str:
    """A table cell: empty for a missing value, else :func:`category_text`."""
    return "" if value is None else category_text(value)


def category_text(value: Any) -> str:
    """One spelling of a parameter value wherever a report shows it, as study files and configs
    write it: ``none`` (Python's ``None``, a config's ``null``, the string ``"None"``), ``true`` /
    ``false``; numbers and other strings as ``str`` gives them."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def trial_config_dict(trial: FrozenTrial) -> dict[str, dict[str, Any]] | None:
    """The trainer config the trial ran (user attribute ``config_path``) as plain data by block, or
    None when the trial records none or the file is missing or invalid (the report then shows only
    the sampled values)."""
    path = trial.user_attrs.get("config_path")
    if not path or not Path(path).is_file():
        return None
    try:
        return config_to_dict(load_config(Path(path)))
    except USER_ERRORS:
        return None



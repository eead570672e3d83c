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

from trainer.config import config_to_dict, load_config
from trainer.errors import NgptuneError
from trainer.rundir import RunDir, atomic_write_text
from trainer.schema import PHASES, MetricsError, read_metrics

__all__ = [
    "FLOAT_FORMAT",
    "OUTCOMES",
    "CONFIRMATION_ATTR",
    "best_heading",
    "PRUNER_ATTR",
    "SETUP_ATTR",
    "SAMPLER_ATTR",
    "SamplingFacts",
    "WORKER_ATTR_PREFIX",
    "StudyReportError",
    "StudyView",
    "best_trials",
    "Recommendation",
    "category_text",
    "change_text",
    "cell_text",
    "default_trial",
    "is_completed",
    "objective_names",
    "objective_unit",
    "objective_values",
    "outcome_of",
    "phase_order",
    "read_run_metrics",
    "recommendation",
    "sampling_facts",
    "trial_duration_s",
    "trials_frame",
    "worker_records",
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


DICT_ATTRS = ("settings", "nccl_env", "nccl_applied", "objectives", "phase_ms")


FLOAT_FORMAT = "{:.6g}"

# Study user attributes a sweep worker sets when it starts (ngptune.tuning.provenance writes them).
SAMPLER_ATTR = "sampler"  #: {"type", "seed", ...} of the study file's sampler
PRUNER_ATTR = "pruner"  #: {"type", ...} of the study file's pruner
WORKER_ATTR_PREFIX = "worker:"  #: + worker id: {"host", "pid", "concurrent_trials", "sampler_seed", ...}
SETUP_ATTR = "setup"  #: {"base_config" (path or None), "settings", "nccl_settings"} of the study file
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
QUALITY_COLUMNS: tuple[str, ...] = ("psnr_db", "train_time_s", "steps", "rays_per_s", "samples_per_s",
                                    "samples_per_ray", "occupancy_fraction")


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
    :data:`QUALITY_COLUMNS` (NaN where not recorded; ``psnr_db`` the final evaluation's PSNR),
    ``param_<name>`` per sampled parameter (first appearance order; empty where a trial lacks it),
    ``gpus`` (the trial's GPUs, ``"0,1"``; empty on a host without GPUs) and ``log_path``.

    Raises:
        StudyReportError: a trial's user attributes have the wrong types (names trial and attribute).
    """
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    for trial in trials:
        check_attrs(study, trial)
    names = objective_names(study)
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
        row.update(quality_values(trial))
        rows.append(row)
    df = pd.DataFrame(rows, columns=["number", "state", "outcome", "reason", "duration_s", *names, *QUALITY_COLUMNS])
    for p in param_names:
        df[f"param_{p}"] = param_column([t.params.get(p) for t in trials])
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
        frame = trials_frame(study)  # validates the attributes first
        trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
        default = default_trial(study)
        return cls(
            study=study,
            names=objective_names(study),
            directions=list(study.directions),
            trials=trials,
            completed=[t for t in trials if is_completed(t)],
            default=default,
            best=best_trials(study),
            frame=frame,
            default_config=None if default is None else trial_config_dict(default),
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

    def default_setting(self, key: str) -> tuple[bool, Any]:
        """``(found, value)`` of a dotted trainer key in the default trial's config (the base config
        with the study's fixed settings); ``(False, None)`` for an NCCL variable or an unknown config."""
        block, _, name = key.partition(".")
        section = (self.default_config or {}).get(block) if name else None
        if not isinstance(section, dict) or name not in section:
            return False, None
        return True, section[name]

    def default_params(self) -> dict[str, Any]:
        """The default trial's parameters, with the base config's value (:meth:`default_setting`)
        for each parameter it was not given (the base value lies outside the parameter's range)
        that every other completed trial has (a conditional parameter stays absent)."""
        if self.default is None:
            return {}
        params = dict(self.default.params)
        others = [t for t in self.completed if t.number != self.default.number]
        for name in dict.fromkeys(p for t in others for p in t.params):
            found, value = self.default_setting(name)
            if name not in params and found and all(name in t.params for t in others):
                params[name] = value
        return params

    def compared(self) -> list[FrozenTrial]:
        """Default first, then the best trials (the default once, even when it is also best)."""
        head = [self.default] if self.default is not None else []
        return head + [b for b in self.best if not head or b.number != head[0].number]


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


def worker_records(user_attrs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The worker records of a study's user attributes, by worker id (``host:pid:start``)."""
    return {key[len(WORKER_ATTR_PREFIX):]: value for key, value in user_attrs.items()
            if key.startswith(WORKER_ATTR_PREFIX) and isinstance(value, dict)}


def _spec_text(record: Any) -> str:
    if not isinstance(record, dict) or "type" not in record:
        return "not recorded"
    if record["type"] == "none":  # no pruner: its options mean nothing
        return "none"
    extra = ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("type", "seed") and v is not None)
    return f"{record['type']}" + (f" ({extra})" if extra else "")


@dataclasses.dataclass(frozen=True)
class SamplingFacts:
    """What decides which settings a study's trials drew.

    Attributes:
        sampler: the sampler's type and options ("not recorded" for a study without the attribute).
        seed: the study file's sampler seed, or None when not recorded.
        pruner: the pruner's type and options, or "not recorded".
        workers: per worker that ran trials (or, when no trial names its worker, per recorded
            worker): ``(worker id, concurrent trials or None when not recorded, sampler seed or None)``.
        reproducible: False when several workers ran trials or one ran several at once (Optuna
            seeds each process's sampler on its own and the trials interleave in the order they
            finish), so the same seed need not draw the same settings again.
    """

    sampler: str
    seed: int | None
    pruner: str
    workers: list[tuple[str, int | None, int | None]]
    reproducible: bool

    def sentences(self) -> list[str]:
        """The report's lines: sampler and seed, pruner, workers, and the caveat when not reproducible."""
        seed = "not recorded" if self.seed is None else str(self.seed)
        lines = [f"Sampler: {self.sampler}, seed {seed}. Pruner: {self.pruner}."]
        described = []
        for worker, concurrent, worker_seed in self.workers:
            at_once = "concurrent trials not recorded" if concurrent is None else f"{concurrent} trial{'s' if concurrent != 1 else ''} at once"
            seeded = "" if worker_seed is None else f", sampler seed {worker_seed}"
            described.append(f"{worker} ({at_once}{seeded})")
        if described:
            lines.append(f"Workers: {len(self.workers)} sweep process{'es' if len(self.workers) != 1 else ''}: "
                         + "; ".join(described) + ".")
        else:
            lines.append("Workers: not recorded.")
        if not self.reproducible:
            lines.append("Not reproducible: several workers or concurrent trials interleave the trials. Optuna seeds "
                         "each process's sampler on its own and each draw depends on the trials finished when it is "
                         "made, so re-running this study with the same seed need not draw the same settings.")
        return lines


def sampling_facts(study: optuna.Study) -> SamplingFacts:
    """The :class:`SamplingFacts` of a study from its user attributes (:data:`SAMPLER_ATTR`,
    :data:`PRUNER_ATTR`, the worker records) and its trials' ``worker`` attribute."""
    attrs = study.user_attrs
    records = worker_records(attrs)
    ran = []
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        worker = trial.user_attrs.get("worker")
        if isinstance(worker, str) and worker not in ran:
            ran.append(worker)
    workers = []
    for worker in ran or list(records):
        record = records.get(worker, {})
        concurrent, seed = record.get("concurrent_trials"), record.get("sampler_seed")
        workers.append((worker, None if concurrent is None else int(concurrent), None if seed is None else int(seed)))
    sampler = attrs.get(SAMPLER_ATTR)
    seed = sampler.get("seed") if isinstance(sampler, dict) else None
    parallel = len(workers) > 1 or any((c or 1) > 1 for _, c, _ in workers)
    return SamplingFacts(sampler=_spec_text(sampler), seed=None if seed is None else int(seed),
                         pruner=_spec_text(attrs.get(PRUNER_ATTR)), workers=workers, reproducible=not parallel)


def trial_config_dict(trial: FrozenTrial) -> dict[str, dict[str, Any]] | None:
    """The trainer config the trial ran (user attribute ``config_path``) as plain data by block, or
    None when the trial records none or the file is missing or invalid (the report then shows only
    the sampled values)."""
    path = trial.user_attrs.get("config_path")
    if not path or not Path(path).is_file():
        return None
    try:
        return config_to_dict(load_config(Path(path)))
    except NgptuneError:
        return None


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
    a difference (``+0.8 dB``, ``-1.2 s``), anything else (throughput, counts) in percent of the
    default; ``""`` when either value is missing."""
    if not (math.isfinite(value) and math.isfinite(default)):
        return ""
    unit = objective_unit(name)
    if unit in ("dB", "s", "ms"):
        return f"{value - default:+.3g} {unit}"
    if default == 0:
        return ""
    return f"{(value - default) / abs(default) * 100.0:+.1f} %"


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What the study recommends, from its confirmation record (study attribute ``confirmation``).

    Attributes:
        trial: the recommended trial's number, or None when no trial completed.
        is_default: whether the recommended trial is the default.
        confirmed: whether re-runs upheld the best against the default (or the best is the default).
        sentence: one sentence saying what is recommended and why.
    """

    trial: int | None
    is_default: bool
    confirmed: bool
    sentence: str


def _why_not_confirmed(verdict: Mapping[str, Any], repeats: Any) -> str:
    objective = str(verdict.get("objective", "the objective"))
    gain, se = verdict.get("gain"), verdict.get("se")
    if isinstance(gain, (int, float)) and isinstance(se, (int, float)):
        unit = objective_unit(objective)
        unit = "" if unit == "/s" else f" {unit}"
        runs = f"in {repeats} re-runs each with new seeds" if repeats else "in its re-runs"
        return (f"{runs} the best's {objective} was {gain:+.3g}{unit} against the default's, not more than the "
                f"re-runs' noise (standard error {se:.2g}{unit})")
    return str(verdict.get("sentence") or "its re-runs did not uphold it").split(": the default is recommended")[0]


def recommendation(view: StudyView) -> Recommendation:
    """The study's :class:`Recommendation`: the verdict's ``recommend`` (``best`` or ``default``)
    when a confirmation finished; without one the best, unconfirmed (or the default when it is the best)."""
    if not view.best:
        return Recommendation(None, False, False, "No trial completed: nothing is recommended.")
    best = view.best[0]
    default_number = None if view.default is None else view.default.number
    record = view.study.user_attrs.get(CONFIRMATION_ATTR)
    verdict = record.get("verdict") if isinstance(record, dict) else None
    if not isinstance(verdict, dict):
        if best.number == default_number:
            return Recommendation(best.number, True, True, f"The default (trial #{best.number}) is recommended: "
                                  "no trial beat it.")
        return Recommendation(best.number, False, False, f"Best trial #{best.number} is recommended unconfirmed: no "
                              "re-runs of best and default are recorded (--no-confirm, or the default trial did "
                              "not complete).")
    best_number = verdict.get("best_trial", best.number)
    if verdict.get("recommend") == "default":
        number = verdict.get("default_trial", default_number)
        why = _why_not_confirmed(verdict, record.get("repeats"))
        return Recommendation(number, True, False, f"The default (trial #{number}) is recommended, not best trial "
                              f"#{best_number}, which was not confirmed: {why}.")
    if verdict.get("status") == "best_is_default":
        return Recommendation(best_number, True, True, f"The default (trial #{best_number}) is recommended: "
                              "no trial beat it.")
    if verdict.get("confirmed"):
        return Recommendation(best_number, False, True, f"Best trial #{best_number} is recommended: "
                              f"{verdict.get('sentence', 'confirmed')}.")
    return Recommendation(best_number, False, False, f"Best trial #{best_number} is recommended unconfirmed: "
                          f"{verdict.get('sentence', 'no confirmation')}.")


def best_heading(view: StudyView, what: str) -> str:
    """A best-vs-default heading; it says so when the best was not confirmed."""
    default_number = None if view.default is None else view.default.number
    if not view.best or view.best[0].number == default_number or recommendation(view).confirmed:
        return what
    end = what.lower().index("best") + len("best")
    return what[:end] + " (not confirmed)" + what[end:]

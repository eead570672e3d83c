"""``best_config.json`` and ``best_env.sh``: the best trial, ready to use (DESIGN.md §6).

Which trial is "best":

* one objective: Optuna's ``study.best_trial``;
* several objectives: the best trials are the Pareto front (``study.best_trials``; the report
  shows all of them). One representative is written out: each objective's values over the front
  are scaled to [0, 1] (0 = the front's best value of that objective, 1 = its worst), and the
  trial closest (Euclidean) to the ideal point (0, ..., 0) is chosen — the balanced "knee" of the
  front rather than an extreme; ties go to the lower trial number.

``best_config.json`` is the trainer config of the *recommended* trial — the best when the
confirmation (:mod:`ngptune.tuning.confirm`) upheld it or was skipped, else the default — except
for what does not travel: the trial budget (``training.n_steps``, ``training.time_budget_s``) and
``data.scene`` go back to the study's base config, so ``ngptune train --config best_config.json
--scene S`` trains as long as a normal run on any scene. The file opens with comment lines
(JSON5) naming the study, the scene it was tuned on, its confirmation status and the study's
fixed settings, which were chosen for that scene (e.g. the demo's 6 levels and 32³ occupancy
grid) and may not suit another; ``best_config.confirmation.json`` beside it holds the evidence;
``best_env.sh`` holds ``export`` lines for the NCCL variables the trial set (the tuned ones and
``NCCL_NVLS_ENABLE=0``), never site variables.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

from ngptune.reporting.nccl_text import nccl_inactive_reason
from ngptune.tuning import nccl
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.study import DEMO_SCENE
from trainer.contract import (
    RUN_CONTROL_KEYS,
    TrainConfig,
    apply_overrides,
    atomic_write_text,
    config_to_dict,
    dump_config,
    load_config,
)

__all__ = ["best_config", "candidate_trial", "comment_safe", "comment_text", "run_control_settings", "representative_trial", "write_best_config", "write_best_env",
           "write_confirmation"]

_SHELL_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _completed(study) -> list:
    from optuna.trial import TrialState

    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None and all(math.isfinite(v) for v in t.values)]


def representative_trial(study):
    """The trial whose settings become ``best_config.json`` (see the module docstring), or None
    when no trial completed."""
    from optuna.study import StudyDirection

    if not _completed(study):
        return None
    if len(study.directions) == 1:
        return study.best_trial
    front = sorted(study.best_trials, key=lambda t: t.number)
    distances = []
    for trial in front:
        squared = 0.0
        for i, direction in enumerate(study.directions):
            values = [t.values[i] for t in front]
            lo, hi = min(values), max(values)
            best, worst = (hi, lo) if direction == StudyDirection.MAXIMIZE else (lo, hi)
            span = abs(worst - best)
            squared += (abs(trial.values[i] - best) / span) ** 2 if span > 0 else 0.0
        distances.append(math.sqrt(squared))
    return front[min(range(len(front)), key=lambda k: (distances[k], front[k].number))]


def candidate_trial(study, default, objective_index: int = 0):
    """The trial a confirmation re-runs against ``default``: :func:`representative_trial` when it
    is not the default, else the best other completed trial on objective ``objective_index`` (the
    runner-up; ties go to the lower number); None when no other trial completed."""
    from optuna.study import StudyDirection

    best = representative_trial(study)
    if best is None or default is None or best.number != default.number:
        return best
    others = [t for t in _completed(study) if t.number != default.number]
    if not others:
        return None
    sign = 1.0 if study.directions[objective_index] == StudyDirection.MAXIMIZE else -1.0
    return max(others, key=lambda t: (sign * t.values[objective_index], -t.number))


def best_config(trial, spec) -> TrainConfig:
    """The trial's launch config with the budget keys of ``spec.budget`` (a
    :class:`~ngptune.tuning.study.StudySpec`), the evaluation marks of ``spec.pruner``, ``data.scene``
    and the study's fixed settings that only steer a run
    (:data:`trainer.contract.config.RUN_CONTROL_KEYS`: logging, evaluation views, device)
    set back to the study's base config.

    Raises:
        ConfigError: the trial's config file or the base config is missing or invalid (names it).
    """
    cfg = load_config(Path(trial.user_attrs["config_path"]))
    base = config_to_dict(load_config(spec.base_config_path))
    restore = {"data.scene": base["data"]["scene"]}
    for key in [*spec.budget.trainer_overrides(), *spec.pruner.trainer_overrides(), *run_control_settings(spec)]:
        block, name = key.split(".", 1)
        restore[key] = base[block][name]
    return apply_overrides(cfg, restore)


def run_control_settings(spec) -> list[str]:
    """The study's fixed settings that only steer a run (:data:`trainer.contract.config.RUN_CONTROL_KEYS`:
    logging, evaluation views, device): they stay behind in ``best_config.json``."""
    return [k for k in spec.settings if k in RUN_CONTROL_KEYS or k.split(".", 1)[0] in RUN_CONTROL_KEYS]


def _header(trial, spec, verdict) -> list[str]:
    """The comment lines of ``best_config.json``."""
    status = "unconfirmed (no confirmation ran)" if verdict is None else verdict.sentence
    lines = [f"Recommended by study {spec.name} ({spec.path}): trial {trial.number}"
             + (" (the untuned default)" if trial.user_attrs.get("is_default") else "") + ".",
             (f"Tuned on scene {spec.scene} and for it alone: train it with --scene {spec.scene} (data.scene is "
              "left as in the base config)" if spec.scene != DEMO_SCENE else
              "Tuned on the built-in demo scene and for it alone: train it without --scene (the trainer's scene "
              "when none is given)") + "; on another scene run a study there, as these settings may not suit it.",
             f"Confirmation: {status}."]
    left_behind = set(run_control_settings(spec))
    scene_specific = {k: v for k, v in spec.settings.items() if k not in left_behind}
    if scene_specific:
        lines.append("Fixed by the study for its scene (may not suit another): "
                     + ", ".join(f"{k}={v}" for k, v in scene_specific.items()) + ".")
    return ["// " + comment_safe(line) for line in lines]


def comment_safe(text: str) -> str:
    """``text`` for one ``//`` comment line of a JSON5 file: line breaks (also U+2028/U+2029, line
    terminators in JSON5), other control characters, quotes and backslashes escaped as in a JSON
    string, so nothing it holds can end the comment."""
    escaped = json.dumps(str(text), ensure_ascii=False)[1:-1]
    return escaped.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def write_best_config(trial, spec, study_dir: StudyDir, *, verdict=None) -> Path:
    """Write :func:`best_config` of ``trial`` to ``best_config.json``, with comment lines naming
    the study, its scene, the confirmation ``verdict`` (a :class:`~ngptune.tuning.confirm.Verdict`,
    or None: unconfirmed) and the study's scene-specific fixed settings.

    Raises:
        ConfigError: the trial's config file is missing or invalid (names the file).
    """
    cfg = best_config(trial, spec)
    path = study_dir.best_config_path
    atomic_write_text(path, "\n".join([*_header(trial, spec, verdict), dump_config(cfg)]) + "\n")
    return path


def write_confirmation(verdict, trial, study_dir: StudyDir, runs: list | None = None,
                       failed: list | None = None) -> Path:
    """Write ``best_config.confirmation.json``: the recommended trial, the verdict
    (:meth:`~ngptune.tuning.confirm.Verdict.to_dict`; ``confirmed`` false and ``status``
    ``unconfirmed`` when ``verdict`` is None), the re-runs ``runs`` behind it and the re-runs that
    gave no value (``failed_runs``: ``failed``, with their reasons; none: left out).

    Raises:
        ValueError: a confirmed verdict without the re-runs of both configurations (nothing is
            called confirmed without runs).
    """
    import json

    labels = {r.get("label") for r in runs or []}
    if verdict is not None and verdict.confirmed and not {"best", "default"} <= labels:
        raise ValueError(f"{study_dir.confirmation_path}: verdict {verdict.status!r} without the re-runs of "
                         "both configurations behind it")
    record = {"recommended_trial": trial.number,
              "verdict": verdict.to_dict() if verdict is not None else {"status": "unconfirmed", "confirmed": False},
              "runs": list(runs or [])}
    if failed:
        record["failed_runs"] = list(failed)
    path = study_dir.confirmation_path
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


def comment_text(text: object) -> str:
    """``text`` for a shell comment: a JSON string literal (newlines, control and non-ASCII
    characters escaped), so that nothing it holds can end the comment and run."""
    return json.dumps(str(text))


def write_best_env(trial, study_name: str, study_dir: StudyDir, nproc_per_node: int | None = None) -> Path:
    """Write ``best_env.sh``: ``export`` lines of the trial's NCCL variables, every value through
    :func:`shlex.quote`; comments hold no raw user text (:func:`comment_text`). When NCCL was
    inactive, a comment says why (:func:`~ngptune.reporting.nccl_text.nccl_inactive_reason` of the
    trials' ``nproc_per_node``; None: not recorded).

    Raises:
        ValueError: a variable name that is not a shell identifier (``[A-Za-z_][A-Za-z0-9_]*``).
    """
    env = {k: v for k, v in trial.user_attrs.get("nccl_env", {}).items() if k not in nccl.SITE_VARIABLES}
    for name in env:
        if not _SHELL_NAME_RE.fullmatch(name):
            raise ValueError(f"best_env.sh: trial {trial.number}: {name!r} is not a shell variable name")
    active = trial.user_attrs.get("nccl_active", False)
    lines = [
        f"# NCCL variables of trial {int(trial.number)} of study {comment_text(study_name)} "
        "(source before ngptune train).",
        "# Site variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are not included: keep your own; "
        "NCCL_NVLS_ENABLE=0 is set in every trial (NVLink SHARP multicast stays off).",
    ]
    if not active:
        lines.append(f"# NCCL was inactive in this sweep ({nccl_inactive_reason(nproc_per_node)}): no NCCL "
                     "variable was tuned.")
    lines += [f"export {name}={shlex.quote(str(value))}" for name, value in sorted(env.items())]
    path = study_dir.best_env_path
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path

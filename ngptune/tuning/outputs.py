"""``best_config.json`` and ``best_env.sh``: the best trial, ready to use (DESIGN.md §6).

Which trial is "best":

* one objective: Optuna's ``study.best_trial``;
* several objectives: the best trials are the Pareto front (``study.best_trials``; the report
  shows all of them). One representative is written out: each objective's values over the front
  are scaled to [0, 1] (0 = the front's best value of that objective, 1 = its worst), and the
  trial closest (Euclidean) to the ideal point (0, ..., 0) is chosen — the balanced "knee" of the
  front rather than an extreme; ties go to the lower trial number.

``best_config.json`` is the trainer config the chosen trial was launched with, except for the
trial budget: ``training.n_steps`` and ``training.time_budget_s`` go back to the study's base
config, so ``ngptune train --config best_config.json`` trains as long as a normal run with the
tuned settings (a trial's few seconds would otherwise stop it early);
``best_env.sh`` holds ``export`` lines for the NCCL variables the trial set (the tuned ones and
``NCCL_NVLS_ENABLE=0``), never site variables.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

from ngptune.tuning import nccl
from ngptune.tuning.layout import StudyDir
from trainer.config import TrainConfig, apply_overrides, config_to_dict, dump_config, load_config
from trainer.rundir import atomic_write_text

__all__ = ["best_config", "comment_text", "representative_trial", "write_best_config", "write_best_env"]

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


def best_config(trial, spec) -> TrainConfig:
    """The trial's launch config with the budget keys of ``spec.budget`` (a
    :class:`~ngptune.tuning.study.StudySpec`) set back to the study's base config.

    Raises:
        ConfigError: the trial's config file or the base config is missing or invalid (names it).
    """
    cfg = load_config(Path(trial.user_attrs["config_path"]))
    base = config_to_dict(load_config(spec.base_config_path))
    restore = {}
    for key in spec.budget.trainer_overrides():
        block, name = key.split(".", 1)
        restore[key] = base[block][name]
    return apply_overrides(cfg, restore)


def write_best_config(trial, spec, study_dir: StudyDir) -> Path:
    """Write :func:`best_config` of ``trial`` to ``best_config.json``.

    Raises:
        ConfigError: the trial's config file is missing or invalid (names the file).
    """
    cfg = best_config(trial, spec)
    path = study_dir.best_config_path
    atomic_write_text(path, dump_config(cfg) + "\n")
    return path


def comment_text(text: object) -> str:
    """``text`` for a shell comment: a JSON string literal (newlines, control and non-ASCII
    characters escaped), so that nothing it holds can end the comment and run."""
    return json.dumps(str(text))


def write_best_env(trial, study_name: str, study_dir: StudyDir) -> Path:
    """Write ``best_env.sh``: ``export`` lines of the trial's NCCL variables, every value through
    :func:`shlex.quote`; comments hold no raw user text (:func:`comment_text`).

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
        "# Site variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) are not included: keep your own.",
    ]
    if not active:
        lines.append("# NCCL was inactive in this sweep (gloo backend): no NCCL variable was tuned.")
    lines += [f"export {name}={shlex.quote(str(value))}" for name, value in sorted(env.items())]
    path = study_dir.best_env_path
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path

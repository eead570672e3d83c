"""What makes a study's trials repeatable, recorded as study user attributes when a sweep worker
starts: the sampler and its seed, the pruner, and every worker (sweep process) that ran trials
with how many trials it ran at once. The study report states them
(:func:`ngptune.reporting.study_sampling.sampling_facts`).

Study user attributes::

    sampler           {"type", "seed", "n_startup_trials", "population_size"} of the study file
    pruner            {"type", "n_startup_trials", ...} of the study file
    setup             {"scene", "base_config" (path, or None for the trainer's defaults), "settings",
                      "nccl_settings"}: what the study file fixes for every trial (the report's
                      "Study" section)
    worker:<id>       one per worker (<id>: host:pid:start, :func:`ngptune.tuning.storage.worker_id`):
                      {"host", "pid", "concurrent_trials" (Optuna's n_jobs), "sampler_seed" (the
                      seed this worker's sampler was built with: the study's seed for the worker
                      that created the study, offset by the trials so far for a later one,
                      :func:`ngptune.tuning.storage.session_seed`), "started_unix_s", "sampler" and
                      "pruner" (this worker's, as the study-wide attributes)}

A worker whose study file names another sampler or pruner than the study recorded replaces the
study-wide attributes and keeps its own in its record, so the report can say which trials ran with
which (:func:`sampling_changes` words the change for the sweep's note).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from typing import Any

from ngptune.reporting.study_sampling import PRUNER_ATTR, SAMPLER_ATTR, SETUP_ATTR, WORKER_ATTR_PREFIX
from ngptune.tuning.specs import StudySpec


def record_worker(study, spec: StudySpec, worker: str, *, concurrent_trials: int, sampler_seed: int) -> dict[str, Any]:
    """Set the sampler, pruner, the study file's setup and this worker's record on ``study`` (an
    ``optuna.Study``); returns the worker record. A worker that starts again under the same id overwrites its record."""
    sampler, pruner = _stored(dataclasses.asdict(spec.sampler)), _stored(dataclasses.asdict(spec.pruner))
    _backfill_worker_sampling(study)
    record = {"host": socket.gethostname(), "pid": os.getpid(), "concurrent_trials": int(concurrent_trials),
              "sampler_seed": int(sampler_seed), "started_unix_s": time.time(), "sampler": sampler, "pruner": pruner}
    study.set_user_attr(SAMPLER_ATTR, sampler)
    study.set_user_attr(PRUNER_ATTR, pruner)
    base = spec.base_config_path
    study.set_user_attr(SETUP_ATTR, {"scene": str(spec.scene), "base_config": None if base is None else str(base),
                                     "settings": dict(spec.settings), "nccl_settings": dict(spec.nccl_settings)})
    study.set_user_attr(WORKER_ATTR_PREFIX + worker, record)
    return record



def _backfill_worker_sampling(study) -> None:
    """Give each worker record without its own sampler and pruner the study-wide ones as they stand
    before a new worker replaces them (what it ran with, unless the study file changed unnoticed
    before workers recorded their own)."""
    sampler, pruner = study.user_attrs.get(SAMPLER_ATTR), study.user_attrs.get(PRUNER_ATTR)
    for key, record in list(study.user_attrs.items()):
        if key.startswith(WORKER_ATTR_PREFIX) and isinstance(record, dict) and "sampler" not in record:
            study.set_user_attr(key, {**record, "sampler": sampler, "pruner": pruner})


def sampling_changes(study, spec: StudySpec) -> list[str]:
    """What a sweep of ``spec`` changes in the sampler or pruner that ``study`` (an ``optuna.Study``)
    recorded, one phrase each: a type (``"pruner median → hyperband"``), the options of the same
    type that differ (``"pruner median: n_startup_trials 3 → 5"``; none for the ``none`` pruner), the
    sampler's seed (``"sampler seed 3 → 5"``). Empty for a new study, an unchanged one, or one that
    recorded neither. Call it before :func:`record_worker`."""
    changes = []
    for what, key, now in (("sampler", SAMPLER_ATTR, spec.sampler), ("pruner", PRUNER_ATTR, spec.pruner)):
        before, after = study.user_attrs.get(key), _stored(dataclasses.asdict(now))
        if not isinstance(before, dict):
            continue
        if before.get("type") != after.get("type"):
            changes.append(f"{what} {before.get('type')} → {after.get('type')}")
        elif after.get("type") != "none":
            options = [f"{name} {_option(before.get(name))} → {_option(after.get(name))}"
                       for name in sorted((set(before) | set(after)) - {"type", "seed"})
                       if before.get(name) != after.get(name)]
            if options:
                changes.append(f"{what} {after.get('type')}: " + ", ".join(options))
        if what == "sampler" and before.get("seed") != after.get("seed"):
            changes.append(f"sampler seed {before.get('seed')} → {after.get('seed')}")
    return changes


def _option(value: Any) -> str:
    return "unset" if value is None else str(value)


def _stored(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a study attribute reads back (JSON: tuples become lists), so records compare equal."""
    return json.loads(json.dumps(record))

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
                      :func:`ngptune.tuning.storage.session_seed`), "started_unix_s"}
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any

from ngptune.reporting.study_sampling import PRUNER_ATTR, SAMPLER_ATTR, SETUP_ATTR, WORKER_ATTR_PREFIX
from ngptune.tuning.specs import StudySpec


def record_worker(study, spec: StudySpec, worker: str, *, concurrent_trials: int, sampler_seed: int) -> dict[str, Any]:
    """Set the sampler, pruner, the study file's setup and this worker's record on ``study`` (an
    ``optuna.Study``); returns the worker record. A worker that starts again under the same id overwrites its record."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "concurrent_trials": int(concurrent_trials),
              "sampler_seed": int(sampler_seed), "started_unix_s": time.time()}
    study.set_user_attr(SAMPLER_ATTR, dataclasses.asdict(spec.sampler))
    study.set_user_attr(PRUNER_ATTR, dataclasses.asdict(spec.pruner))
    base = spec.base_config_path
    study.set_user_attr(SETUP_ATTR, {"scene": str(spec.scene), "base_config": None if base is None else str(base),
                                     "settings": dict(spec.settings), "nccl_settings": dict(spec.nccl_settings)})
    study.set_user_attr(WORKER_ATTR_PREFIX + worker, record)
    return record


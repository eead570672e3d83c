"""The sweep's Optuna storage and study set-up (steps 1-3 of :mod:`ngptune.tuning.sweep`): the
journal file or an RDB with heartbeats, creating or loading the study (one definition per study),
and failing and retrying the trials of workers that are gone."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import time
import warnings
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ngptune.errors import NgptuneError
from ngptune.reporting.study_sampling import DEFINITION_ATTR
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.samplers import build_pruner, build_sampler
from ngptune.tuning.space import default_params
from ngptune.tuning.specs import StudySpec, definition_fingerprint
from ngptune.tuning.trial import proc_stat
from trainer.contract import FORMER_FIXED_DEFAULTS, TrainConfig, config_to_dict

__all__ = [
    "DEFINITION_ATTR",
    "DRIVER_PACKAGES",
    "OpenedStudy",
    "SweepError",
    "UNTUNED_ATTR",
    "masked_url",
    "missing_driver",
    "open_storage",
    "definition_differences",
    "changed_leaves",
    "definition_leaves",
    "former_defaults_kept",
    "open_study",
    "recover_trials",
    "settings_added_since",
    "setup_lock",
    "study_lock",
    "study_progress",
    "worker_id",
]


class SweepError(NgptuneError):
    """The sweep cannot run: storage unreachable, a study of another definition, a dirty folder."""


HEARTBEAT_INTERVAL_S = 10  # RDB storage: a worker's running trial is refreshed this often
HEARTBEAT_GRACE_S = 60  # ... and counts as stale (worker dead) after this long without a beat
MAX_RETRIES = 2  # a trial whose worker died is retried at most this many times
SCHEMA_ATTEMPTS = 8  # RDB storage: tries to open it while another worker creates its tables
READY_WAIT_S = 60.0  # a worker that loads a study waits this long for its creator to finish setting it up
_READY_ATTR = "fingerprint"  # study user attribute written last by the creating worker
# definition keys that a study file's [budget] and [pruner] set: a refusal names the study-file keys too
STUDY_FILE_KEYS = {
    "config.training.time_budget_s": "budget.seconds",
    "config.training.n_steps": "budget.steps",
    "config.training.eval_at_s": ("the pruner's marks (pruner.type, eval_at, and the rungs: min_resource, "
                                  "reduction_factor, min_early_stopping_rate, max_resource; budget.seconds)"),
    "config.training.eval_every": "pruner.type, eval_every_steps, or an objective's eval_every_steps",
    "config.training.eval_every_max_images": "pruner.eval_images",
}
# Trial user attribute of the enqueued untuned default (and of its retries, which copy it);
# ``is_default`` is true only on the one of them that ran to its end, so the report finds one.
UNTUNED_ATTR = "untuned"


def masked_url(url: str) -> str:
    """A storage URL without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: the error below says so
        return url


def open_storage(url: str | None, study_dir: StudyDir):
    """The Optuna storage: the journal file of ``study_dir`` (``url`` None) or an RDB with heartbeats.

    Raises:
        SweepError: the URL is malformed, its driver missing or its server unreachable.
    """
    import optuna

    if url is None:
        from optuna.storages.journal import JournalFileBackend

        try:
            study_dir.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SweepError(f"--out {study_dir.root}: cannot create the folder ({exc.strerror or exc})") from None
        return optuna.storages.JournalStorage(JournalFileBackend(str(study_dir.journal_path)))
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(SCHEMA_ATTEMPTS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return optuna.storages.RDBStorage(
                    url,
                    heartbeat_interval=HEARTBEAT_INTERVAL_S,
                    grace_period=HEARTBEAT_GRACE_S,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES),
                )
            except (IntegrityError, ProgrammingError) as exc:
                # Workers that start together on an empty database race to create Optuna's tables
                # ("duplicate key ... pg_type", "relation ... already exists"): the loser retries
                # and finds them made.
                if attempt + 1 < SCHEMA_ATTEMPTS:
                    time.sleep(0.5 + 0.5 * attempt)
                    continue
                error = exc
            except Exception as exc:  # SQLAlchemy / driver errors have no common base worth naming
                error = exc
        detail = " ".join(str(error).split())[:300]
        driver = missing_driver(url, error)
        if driver is not None:
            raise SweepError(f"--storage {masked_url(url)}: cannot open the study storage: its database driver is not "
                             f"installed (pip install {driver})")
        raise SweepError(f"--storage {masked_url(url)}: cannot open the study storage ({type(error).__name__}: {detail})")


@contextlib.contextmanager
def setup_lock(study_dir: StudyDir, enabled: bool) -> Iterator[None]:
    """Serialise study set-up between workers sharing a study folder (journal storage)."""
    if not enabled:
        yield
        return
    with study_lock(study_dir.setup_lock_path):
        yield


@contextlib.contextmanager
def study_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder): one worker of a study
    folder at a time; released when the holder exits, also when it is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _process_start_ticks(pid: int) -> str | None:
    """Start time of process ``pid`` in clock ticks since boot, or None when it is gone."""
    fields = proc_stat(pid)
    return None if fields is None else fields[19]


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start_ticks(os.getpid())}"


def _worker_dead(worker: object) -> bool:
    """Whether the worker that recorded ``worker`` (``host:pid:start``) is known to be gone
    (same host, and no process with that pid and start time)."""
    if not isinstance(worker, str) or worker.count(":") < 2:
        return False
    host, pid_text, start = worker.rsplit(":", 2)
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    return _process_start_ticks(int(pid_text)) != start


def _retry_history(trial) -> list[int]:
    return list(trial.system_attrs.get("retry_history", []))


def _retry(study, trial) -> None:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)(study, trial)


def recover_trials(study, *, check_workers: bool, retry_interrupted: bool) -> list[int]:
    """Fail and retry the trials of workers that are gone (see the module docstring, step 3).

    Args:
        study: the study.
        check_workers: look for RUNNING trials of dead workers on this host (storages without
            heartbeats).
        retry_interrupted: also retry trials failed by an interrupted sweep (once each).

    Returns:
        The numbers of the trials retried.
    """
    import optuna
    from optuna.trial import TrialState

    retried: list[int] = []
    if check_workers:
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if not _worker_dead(trial.user_attrs.get("worker")):
                continue
            try:
                study.tell(trial.number, state=TrialState.FAIL)
            except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
                continue  # another worker got there first
            _retry(study, _frozen(study, trial.number))
            retried.append(trial.number)
    if retry_interrupted:
        trials = study.get_trials(deepcopy=False)
        superseded = {n for t in trials for n in _retry_history(t)}
        for trial in trials:
            if trial.state == TrialState.FAIL and trial.user_attrs.get("interrupted") and trial.number not in superseded:
                _retry(study, trial)
                retried.append(trial.number)
    return retried


def _frozen(study, number: int):
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def study_progress(study) -> tuple[int, int]:
    """(waiting trials, trials that count towards the target: all but waiting and retried ones)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    superseded = {n for t in trials for n in _retry_history(t)}
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    counted = sum(t.state != TrialState.WAITING and t.number not in superseded for t in trials)
    return waiting, counted


def session_seed(study_seed: int, trials_before: int) -> int:
    """The seed of the sampler of a worker that loads an existing study holding ``trials_before``
    trials (the creating worker uses ``study_seed`` itself)."""
    return (study_seed + trials_before) % 2**32


def definition_leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """A study definition's leaves by dotted key (``{"config.training.seed": 1337, ...}``); a value
    that is not a dict is one leaf under ``prefix``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(definition_leaves(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def changed_leaves(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The dotted keys (sorted) whose leaf differs between two :func:`definition_leaves`, a key
    present in only one of them included."""
    missing = object()
    return [key for key in sorted(set(old) | set(new)) if old.get(key, missing) != new.get(key, missing)]


def settings_added_since(stored: Any, current: dict[str, Any]) -> list[str] | None:
    """The trainer settings that ``current`` (this trainer's definition of the study) holds and
    the ``stored`` definition lacks, as ``"key = value"`` (e.g. ``"loss.alpha_weight = 0.0"``), when
    they are the only differences and each is at the trainer's default: the study was made by a
    trainer without those settings, which keep its behaviour at their defaults. None when anything
    else differs (or nothing does, or no definition was stored)."""
    if not isinstance(stored, dict):
        return None
    old, new = definition_leaves(stored), definition_leaves(current)
    defaults = definition_leaves(config_to_dict(TrainConfig()), "config")
    changed = changed_leaves(old, new)
    if not changed or any(key in old or not key.startswith("config.") or key not in defaults
                          or new[key] != defaults[key] for key in changed):
        return None
    return [f"{key.removeprefix('config.')} = {json.dumps(new[key])}" for key in changed]


def former_defaults_kept(stored: Any, current: dict[str, Any]) -> dict[str, Any]:
    """The settings of :data:`~trainer.contract.FORMER_FIXED_DEFAULTS` that the ``stored`` study
    definition holds at that former default where ``current`` (this trainer's) holds null: dotted
    trainer key → the former value. The study began when the default was that value for every
    scene; its remaining trials keep it (:func:`open_study`). A setting the study searches is not
    kept (its trials draw it; the difference is refused, naming it)."""
    if not isinstance(stored, dict):
        return {}
    old, new = definition_leaves(stored), definition_leaves(current)
    searched = {p.get("name") for p in current.get("params", []) if isinstance(p, dict)}
    return {key: value for key, value in FORMER_FIXED_DEFAULTS.items()
            if key not in searched and old.get(f"config.{key}") == value and f"config.{key}" in new
            and new[f"config.{key}"] is None}


def with_config_values(definition: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of a study ``definition`` whose config holds ``values`` (dotted trainer key → value)."""
    out = json.loads(json.dumps(definition))
    for key, value in values.items():
        block, _, name = key.partition(".")
        out["config"][block][name] = value
    return out


def definition_differences(stored: Any, current: dict[str, Any], limit: int = 4,
                           settings: Collection[str] = ()) -> list[str]:
    """``"key: stored → current"`` for the leaves in which two study definitions differ (dotted
    keys, e.g. ``config.training.time_budget_s: 2.0 → 3.0``), at most ``limit`` of them. A key the
    study file sets in ``[settings]`` (``settings``: its dotted trainer keys) is named as
    ``settings."key"``, one that its budget or pruner sets by those keys (:data:`STUDY_FILE_KEYS`)."""
    old = definition_leaves(stored if isinstance(stored, dict) else {})
    new = definition_leaves(current)

    def named(key: str) -> str:
        if key.removeprefix("config.") in settings:
            return f'settings."{key.removeprefix("config.")}" ({key})'
        return f"{STUDY_FILE_KEYS[key]} ({key})" if key in STUDY_FILE_KEYS else key

    lines = [f"{named(key)}: {json.dumps(old.get(key))} → {json.dumps(new.get(key))}" for key in changed_leaves(old, new)]
    return lines[:limit] + ([f"and {len(lines) - limit} more"] if len(lines) > limit else [])


class OpenedStudy(NamedTuple):
    """What :func:`open_study` opened: the Optuna study, whether this call created it, the
    trainer settings added since the study was made (:func:`settings_added_since`; empty when its
    definition is this trainer's), and the former defaults its trials keep
    (:func:`former_defaults_kept`: dotted trainer key → value, to be set in every trial)."""

    study: Any
    created: bool
    added_settings: list[str]
    kept_defaults: dict[str, Any]


def open_study(storage, name: str, spec: StudySpec, fingerprint: str, attrs: dict[str, Any], study_dir: StudyDir,
               base_cfg: TrainConfig, is_rdb: bool, definition: dict[str, Any] | None = None) -> OpenedStudy:
    """Create the study (enqueue the default trial) or load it and check it is the same study
    (the same ``fingerprint``; a refusal names what differs from the stored ``definition``). A
    study whose definition differs only by trainer settings added since, at their defaults, is the
    same study (a trainer upgraded while a study is under way): they are returned to be said. So is
    one whose settings of :data:`~trainer.contract.FORMER_FIXED_DEFAULTS` hold their former default
    where this trainer's are null: they are returned to be kept in its trials.

    Raises:
        SweepError: the study was set up incompletely or from another definition, or this folder
            holds trials of another study.
    """
    import optuna

    sampler, pruner = build_sampler(spec.sampler), build_pruner(spec.pruner)
    try:
        if name in optuna.get_all_study_names(storage=storage):  # a journal keeps even a refused create
            raise optuna.exceptions.DuplicatedStudyError(name)
        if study_dir.trials_dir.is_dir() and any(study_dir.trials_dir.iterdir()):
            raise SweepError(
                f"{study_dir.trials_dir}: holds trials of another study (not {name!r} of {attrs['storage']}); "
                "use another --out or remove that folder"
            )
        study = optuna.create_study(storage=storage, study_name=name, directions=spec.directions,
                                    sampler=sampler, pruner=pruner)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        deadline = time.monotonic() + (READY_WAIT_S if is_rdb else 0.0)
        while _READY_ATTR not in study.user_attrs and time.monotonic() < deadline:
            time.sleep(0.5)  # the creating worker is still setting the study up
        found = study.user_attrs.get(_READY_ATTR)
        kept = (former_defaults_kept(study.user_attrs.get(DEFINITION_ATTR), definition)
                if found is not None and found != fingerprint and definition is not None else {})
        if kept:  # the study began when these were fixed defaults: compare with them kept
            definition = with_config_values(definition, kept)
            fingerprint = definition_fingerprint(definition)
        added: list[str] = []
        if found is not None and found != fingerprint and definition is not None:
            added = settings_added_since(study.user_attrs.get(DEFINITION_ATTR), definition) or []
        if found != fingerprint and not added:
            changed = definition_differences(study.user_attrs.get(DEFINITION_ATTR), definition or {},
                                             settings=set(spec.settings))
            if found is None:
                why = "was not set up completely"
            elif changed and DEFINITION_ATTR in study.user_attrs:
                why = "was made from another definition: " + "; ".join(changed)
            else:
                why = ("was made from another definition (base config, settings, budget, scene, search space, "
                       "objectives or --nproc-per-node differ)")
            raise SweepError(f"study {name!r} in {attrs['storage']} {why}; use another --study-name or --out") from None
        # A sampler seeded as when the study began would draw the same start-up parameters again;
        # offset by the trials so far: reproducible, and new points for this session (or worker).
        reseeded = dataclasses.replace(spec.sampler, seed=session_seed(spec.sampler.seed, len(study.trials)))
        study = optuna.load_study(study_name=name, storage=storage, sampler=build_sampler(reseeded), pruner=pruner)
        return OpenedStudy(study, False, added, kept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(spec.objective_names)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.enqueue_trial(default_params(spec, base_cfg), user_attrs={UNTUNED_ATTR: True})
    if definition is not None:
        study.set_user_attr(DEFINITION_ATTR, definition)
    study.set_user_attr(_READY_ATTR, fingerprint)  # last: the study is ready for other workers
    return OpenedStudy(study, True, [], {})


#: The package that provides each SQLAlchemy driver named in a storage URL (``dialect+driver://``).
DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "pymysql": "pymysql",
                   "mysqldb": "mysqlclient", "asyncpg": "asyncpg"}


def missing_driver(url: str, error: BaseException | None) -> str | None:
    """The pip package to install when ``error`` says the database driver of storage ``url`` could
    not be imported (SQLAlchemy raises ImportError or ModuleNotFoundError); None otherwise."""
    if not isinstance(error, ImportError):
        return None
    scheme = url.split("://", 1)[0]
    dialect, _, driver = scheme.partition("+")
    if not driver:
        driver = {"postgresql": "psycopg2", "mysql": "mysqldb"}.get(dialect, "")
    return DRIVER_PACKAGES.get(driver.lower(), driver or None)

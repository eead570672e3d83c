"""The study folder of ``ngptune sweep`` (``--out``, default ``reports/<study-name>/``): the only
module that builds paths inside it.

::

    OUT/
      study.journal              Optuna journal storage (file backend; the default storage)
      study.journal.lock         the journal's lock while a worker writes (Optuna's)
      .sweep.lock                held while a worker sets the study up (create/resume pass)
      trials/<n>/                the trainer's run directory of trial n (trainer.contract.rundir layout:
                                 config.json, metrics.jsonl, logs/rank<R>.log, status.json, ...)
      trials/<n>.config.json     the trainer config trial n was launched with (--config)
      trials/<n>.launch.log      stdout and stderr of trial n's launcher (python -m trainer)
      best_config.json           the best trial's config (``ngptune train --config`` takes it as is)
      best_env.sh                the best trial's NCCL variables (export lines)
      report.html, trials.csv    written by ngptune.reporting.study_report
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["StudyDir"]


@dataclasses.dataclass(frozen=True)
class StudyDir:
    """Paths inside one study folder (nothing is created until asked)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def journal_path(self) -> Path:
        return self.root / "study.journal"

    @property
    def setup_lock_path(self) -> Path:
        return self.root / ".sweep.lock"

    @property
    def trials_dir(self) -> Path:
        return self.root / "trials"

    def run_dir(self, number: int) -> Path:
        return self.trials_dir / str(number)

    def config_path(self, number: int) -> Path:
        return self.trials_dir / f"{number}.config.json"

    def launch_log_path(self, number: int) -> Path:
        return self.trials_dir / f"{number}.launch.log"

    @property
    def best_config_path(self) -> Path:
        return self.root / "best_config.json"

    @property
    def confirmation_path(self) -> Path:
        """The evidence beside ``best_config.json`` (:mod:`ngptune.tuning.confirm`)."""
        return self.root / "best_config.confirmation.json"

    @property
    def confirm_dir(self) -> Path:
        return self.root / "confirm"

    def confirm_run_dir(self, trial: int, index: int) -> Path:
        """Re-run ``index`` of trial ``trial``'s configuration (:mod:`ngptune.tuning.confirm`)."""
        return self.confirm_dir / f"trial{trial}-run{index}"

    def confirm_config_path(self, trial: int, index: int) -> Path:
        return self.confirm_dir / f"trial{trial}-run{index}.config.json"

    def confirm_log_path(self, trial: int, index: int) -> Path:
        return self.confirm_dir / f"trial{trial}-run{index}.launch.log"

    def earlier_attempt_dir(self, trial: int, index: int, attempt: int) -> Path:
        """The logs of an earlier attempt at re-run ``index`` of trial ``trial`` (1, 2, ...: a
        re-run that failed or was stopped, launched again)."""
        return self.confirm_dir / "earlier" / f"trial{trial}-run{index}-{attempt}"

    @property
    def confirm_lock_path(self) -> Path:
        """Held by the worker that confirms (one at a time per study folder)."""
        return self.root / ".confirm.lock"

    @property
    def best_env_path(self) -> Path:
        return self.root / "best_env.sh"

    @property
    def trials_csv_path(self) -> Path:
        return self.root / "trials.csv"

"""The ``status.json`` of a run through its life (keys and states: :mod:`trainer.contract.runstatus`):
written as running before training starts (a killed run still says it was running), completed,
failed, diverged or interrupted at the end, by the process that owns the run directory (rank 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.contract.rundir import RunDir
from trainer.contract.runstatus import (
    RUN_DIR_KEY, RUNNING, STATE_KEY, diverged_fields, failed_fields, interrupted_fields, process_fields,
)

__all__ = ["RunInterrupted", "RunStatus", "Terminated", "failure_status", "keeping_finite_model", "raise_terminated"]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; the message says at which step, where its newest complete snapshot or
    checkpoint is and the command line that continues it (lines, printed after ``interrupted``)."""


class Terminated(BaseException):
    """SIGTERM arrived (a launcher or a sweep stopping the run); unwinds so status.json is written."""


class RunTerminated(Terminated):
    """SIGTERM stopped a run; the message says at which step, where its newest complete snapshot or
    checkpoint is and the command line that continues it (as :class:`RunInterrupted`'s)."""


def raise_terminated(signum: int, frame: Any) -> None:
    """A SIGTERM handler: raise :class:`Terminated`."""
    raise Terminated(f"terminated by signal {signum}")


def failure_status(exc: BaseException) -> dict[str, Any]:
    """``status.json`` fields of a run that ended by ``exc``: interrupted (Ctrl-C, SIGTERM),
    diverged (:class:`~trainer.train.divergence.DivergedError`) or failed."""
    from trainer.train.divergence import DivergedError

    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        return interrupted_fields(str(exc) or type(exc).__name__)
    if isinstance(exc, DivergedError):
        return diverged_fields(str(exc), exc.step, exc.tensor)
    return failed_fields(f"{type(exc).__name__}: {exc}")


def keeping_finite_model(exc: BaseException, status: dict[str, Any], model_path: Path | None) -> BaseException:
    """``exc``, or for a diverged run the same error naming its last finite model, ``model_path``
    (the newest snapshot or checkpoint, all written before the divergence was found), which
    ``status`` records as the run's ``snapshot`` / ``checkpoint``."""
    from trainer.train.divergence import DivergedError

    if not isinstance(exc, DivergedError):
        return exc
    if model_path is not None:
        status["checkpoint" if Path(model_path).is_dir() else "snapshot"] = str(model_path)
    return exc.keeping(model_path)


class RunStatus(dict):
    """The fields of a run's ``status.json`` (a dict), and when they are written.

    Args:
        run_dir: the run directory.
        writer: whether this process writes the file (one process of a job: rank 0).
        **fields: the first fields besides ``state`` and the writing process's ``pid`` and
            ``host`` (``scene``, ``world_size``, ...).
    """

    def __init__(self, run_dir: RunDir, writer: bool, **fields: Any) -> None:
        super().__init__({STATE_KEY: RUNNING, **process_fields(), **fields})
        self.run_dir = run_dir
        self.writer = writer

    def write(self) -> None:
        """Write the fields as they are now (the writer only)."""
        if self.writer:
            self.run_dir.write_json(self.run_dir.status_path, dict(self))

    def end(self, exc: BaseException | None = None) -> None:
        """Record how the run ended (``exc``: what ended it, None when it completed) and the run
        directory; written by :meth:`write`."""
        if exc is not None:
            self.update(failure_status(exc))
        self[RUN_DIR_KEY] = str(self.run_dir.root)

"""The trainer's exception hierarchy: every error it raises on purpose for bad input or a failed run.

Users see ``str(error)``: one line that says what is wrong and where (file, frame, dotted key).
An error that has remedies to offer keeps them apart (``remedies``): a person at a terminal reads
the problem on the first line and each remedy on a short line of its own
(:func:`trainer.contract.runstatus.fitted_error_lines`); ``str(error)`` joins them after the
problem with ``; `` for the one-line readers (a rank's ``error:`` line, ``status.json``).
``assert`` is kept for programmer errors only. The driver's own errors (:mod:`ngptune.errors`)
have their own base; the driver's command line catches both.

::

    TrainerError
    ├── SceneError      a scene on disk cannot be loaded
    ├── ConfigError     a config value or a flag is invalid
    ├── SnapshotError   a snapshot or checkpoint is unreadable or of another config
    ├── TrainingError   training cannot proceed
    ├── LaunchError     a distributed launch failed
    └── MetricsError    a metrics file is malformed           (trainer.contract.metrics)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ConfigError", "LaunchError", "SceneError", "SnapshotError", "TrainerError", "TrainingError"]


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose for bad input or a failed run.

    Args:
        problem: what is wrong and where (one line).
        remedies: what the user can do about it, each a short statement (module docstring).
    """

    def __init__(self, problem: object = "", *, remedies: Sequence[str] = ()) -> None:
        super().__init__(problem)
        self.problem = str(problem)
        self.remedies = tuple(remedies)

    def __str__(self) -> str:
        return "; ".join([self.problem, *self.remedies]) if self.remedies else super().__str__()


class SceneError(TrainerError):
    """A scene on disk cannot be loaded: names the file, the frame or key, and the problem."""


class ConfigError(TrainerError):
    """A config value is invalid: names the dotted key and the bad value."""


class SnapshotError(TrainerError):
    """A snapshot file is truncated, corrupt or was written for another config."""


class TrainingError(TrainerError):
    """Training cannot proceed (for example no ray sample hit an occupied cell)."""


class LaunchError(TrainerError):
    """A distributed launch failed (port in use, rank died, world size mismatch)."""

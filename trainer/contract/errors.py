"""The trainer's exception hierarchy: every error it raises on purpose for bad input or a failed run.

Users see ``str(error)``: one line that says what is wrong and where (file, frame, dotted key).
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

__all__ = ["ConfigError", "LaunchError", "SceneError", "SnapshotError", "TrainerError", "TrainingError"]


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose for bad input or a failed run."""


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

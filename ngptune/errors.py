"""Errors the ngptune driver raises on its own, in the trainer's tree
(:class:`trainer.errors.NgptuneError`): an ``except NgptuneError`` catches them, and the CLI
prints each as one ``error: `` line.

::

    NgptuneError (trainer.errors)
    ├── SceneError, ConfigError, SnapshotError, TrainingError, LaunchError   (trainer.errors)
    ├── MetricsError                                                        (trainer.schema)
    ├── TrialFailed        a tuning trial failed
    ├── PrepareError       ngptune prepare could not make a scene of its input
    └── NcclValueError     an NCCL variable or value outside the tuner's allow-list (also a ValueError)
"""

from __future__ import annotations

from trainer.errors import NgptuneError

__all__ = ["NcclValueError", "PrepareError", "TrialFailed"]


class TrialFailed(NgptuneError):
    """A tuning trial failed; carries the reason and the log path."""


class NcclValueError(NgptuneError, ValueError):
    """A variable or value outside the allow-list; the message says why (no file or key: the
    caller adds where it came from)."""


class PrepareError(NgptuneError):
    """``ngptune prepare`` cannot make a scene of its input; the message names the file or the
    stage (frames, features, matching, mapping) and the problem."""

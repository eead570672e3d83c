"""Errors the ngptune driver raises on its own, in the trainer's tree
(:class:`trainer.errors.NgptuneError`): an ``except NgptuneError`` catches them, and the CLI
prints each as one ``error: `` line.

::

    NgptuneError (trainer.errors)
    ├── SceneError, ConfigError, SnapshotError, TrainingError, LaunchError   (trainer.errors)
    ├── MetricsError                                                        (trainer.schema)
    ├── TrialFailed        a tuning trial failed
    ├── NcclValueError     an NCCL variable or value outside the tuner's allow-list (also a ValueError)
    └── ServeError         a page the driver serves cannot start (a port in use, no study storage)
"""

from __future__ import annotations

from trainer.errors import NgptuneError

__all__ = ["NcclValueError", "ServeError", "TrialFailed"]


class TrialFailed(NgptuneError):
    """A tuning trial failed; carries the reason and the log path."""


class NcclValueError(NgptuneError, ValueError):
    """A variable or value outside the allow-list; the message says why (no file or key: the
    caller adds where it came from)."""


class ServeError(NgptuneError):
    """A page the driver serves (``ngptune dashboard``) cannot start; names the flag or folder."""

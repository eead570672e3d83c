"""Exception hierarchy shared by the trainer and the ngptune driver (whose own errors,
:mod:`ngptune.errors`, derive from :class:`NgptuneError` too).

Users see ``str(error)``: one line that says what is wrong and where (file, frame, dotted key).
``assert`` is kept for programmer errors only.
"""

from __future__ import annotations


class NgptuneError(Exception):
    """Base class of every error ngptune raises on purpose for bad input or a failed run."""


class SceneError(NgptuneError):
    """A scene on disk cannot be loaded: names the file, the frame or key, and the problem."""


class ConfigError(NgptuneError):
    """A config value is invalid: names the dotted key and the bad value."""


class SnapshotError(NgptuneError):
    """A snapshot file is truncated, corrupt or was written for another config."""


class TrainingError(NgptuneError):
    """Training cannot proceed (for example no ray sample hit an occupied cell)."""


class LaunchError(NgptuneError):
    """A distributed launch failed (port in use, rank died, world size mismatch)."""

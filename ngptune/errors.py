"""The driver's errors, under their own base :class:`NgptuneError`; the CLI prints each, and each
of the trainer's (:class:`trainer.contract.TrainerError`), as one ``error: `` line.

::

    NgptuneError
    ├── TrialFailed        a tuning trial failed
    ├── PrepareError       ngptune prepare could not make a scene of its input
    ├── NcclValueError     an NCCL variable or value outside the tuner's allow-list (also a ValueError)
    └── the errors of a driver module: SweepError, ProfileError, DiagnosisError, TraceError,
        LinkBandwidthError, NvmlUnavailable, ProfileReportError, StudyReportError, DashboardError, ...
"""

from __future__ import annotations

from trainer.contract import TrainerError

__all__ = ["NcclValueError", "NgptuneError", "PrepareError", "TrialFailed", "USER_ERRORS"]


class NgptuneError(Exception):
    """Base class of every error the driver raises on purpose for bad input or a failed run."""


USER_ERRORS: tuple[type[Exception], ...] = (NgptuneError, TrainerError)
"""The errors a command reports as one ``error: `` line: the driver's and the trainer's."""


class TrialFailed(NgptuneError):
    """A tuning trial failed; carries the reason and the log path."""


class NcclValueError(NgptuneError, ValueError):
    """A variable or value outside the allow-list; the message says why (no file or key: the
    caller adds where it came from)."""


class PrepareError(NgptuneError):
    """``ngptune prepare`` cannot make a scene of its input; the message names the file or the
    stage (frames, features, matching, mapping) and the problem."""

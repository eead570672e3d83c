"""Trials that failed for the host's reasons run again, and so does a default that did not complete.

Infrastructure failures (:func:`ngptune.tuning.trial.infrastructure_cause`: a rank or the launcher
killed by a signal the sweep did not send, a launch whose ranks never formed their group) say
nothing about the trial's settings. Such a trial is retried: a new trial with the same parameters
(Optuna's ``retry_history``, the journal's existing retry mechanism), while the failed one stops
counting towards the study's trial target. Each sweep worker retries a trial at most
:data:`MAX_INFRA_RETRIES` times, so a host that keeps killing trials still ends the sweep.

The untuned default is what every recommendation is compared with: without a completed default
nothing can be judged. A default attempt that failed is retried the same way, unless its outcome
is its settings' own, which another attempt repeats: it diverged (a NaN or infinite loss or
parameter), or it was pruned (the pruner never prunes the default: an invalid combination, or a
PSNR target not reached within the budget). Then the study's settings need changing, not another
attempt. A sweep that starts (the same command run again) while its study has no
completed default and none waiting runs it once more before anything else.
"""

from __future__ import annotations

import collections
import warnings

from optuna.trial import FrozenTrial, TrialState

from ngptune.tuning.storage import UNTUNED_ATTR

__all__ = ["INFRASTRUCTURE_ATTR", "MAX_INFRA_RETRIES", "TrialRetries", "default_missing", "default_not_completed"]

MAX_INFRA_RETRIES = 2
"""Retries of one trial (infrastructure failure, or a default that did not complete) per sweep worker."""

DIVERGED_PREFIX = "diverged"
"""How a diverged trial's recorded reason begins (:func:`ngptune.tuning.trial.classify_exit`)."""

INFRASTRUCTURE_ATTR = "infrastructure"
"""Trial user attribute: True when the trial failed for the host's reasons (retried)."""


def _history(trial: FrozenTrial) -> list[int]:
    return list(trial.system_attrs.get("retry_history", []))


def _superseded(trials: list[FrozenTrial]) -> set[int]:
    return {n for t in trials for n in _history(t)}


def _is_default(trial: FrozenTrial) -> bool:
    return trial.user_attrs.get(UNTUNED_ATTR) is True


def _diverged(trial: FrozenTrial) -> bool:
    return str(trial.user_attrs.get("reason") or "").startswith(DIVERGED_PREFIX)


def _settled_by_its_settings(trial: FrozenTrial) -> bool:
    """Whether the attempt's outcome is its settings' own, which a re-run repeats: diverged, or
    pruned (the default is never pruned by the pruner: an invalid combination, a PSNR target not
    reached within the budget)."""
    return _diverged(trial) or trial.state == TrialState.PRUNED


def default_missing(study) -> bool:
    """Whether the study holds default attempts but none completed and none is waiting or running."""
    defaults = [t for t in study.get_trials(deepcopy=False) if _is_default(t)]
    return bool(defaults) and not _settled_by_its_settings(defaults[-1]) and not any(
        t.state in (TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING) for t in defaults)


def default_not_completed(study) -> str:
    """Why the study has no default to compare with, for the verdict: its attempts and the last
    one's outcome, and that running the command again retries it."""
    defaults = [t for t in study.get_trials(deepcopy=False) if _is_default(t)]
    if not defaults:
        return "the study has no default trial"
    last = defaults[-1]
    reason = last.user_attrs.get("reason") or last.state.name.lower()
    if _diverged(last):
        return (f"the default trial diverged (trial {last.number}: {reason}); nothing is compared with it, and it is "
                "not run again (the same settings diverge again): change the study's settings")
    if last.state == TrialState.PRUNED:
        return (f"the default trial was pruned (trial {last.number}: {reason}); nothing is compared with it, and it "
                "is not run again (its settings decide that outcome)")
    return (f"the default trial did not complete ({len(defaults)} attempt{'s' if len(defaults) != 1 else ''}, "
            f"the last, trial {last.number}: {reason}); nothing is compared with it: run the same command "
            "again to retry it")


class TrialRetries:
    """One sweep worker's retries (see the module docstring); counts them per original trial."""

    def __init__(self, limit: int = MAX_INFRA_RETRIES) -> None:
        self.limit = limit
        self.made: collections.Counter[int] = collections.Counter()

    def _retry(self, study, trial: FrozenTrial, counted: bool = True) -> None:
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None)(study, trial)
        if counted:
            self.made[(_history(trial) or [trial.number])[0]] += 1

    def after_trials(self, study) -> list[int]:
        """Retry the failed trials that qualify (infrastructure failures; a default attempt that
        failed for another reason than diverging) and that nobody retried yet, within :attr:`limit` per original.

        Returns:
            The numbers of the trials retried.
        """
        trials = study.get_trials(deepcopy=False)
        superseded = _superseded(trials)
        retried = []
        for trial in trials:
            if trial.number in superseded or trial.user_attrs.get("interrupted"):
                continue  # retried already; an interrupted sweep's trial is retried by recover_trials
            infrastructure = trial.state == TrialState.FAIL and trial.user_attrs.get(INFRASTRUCTURE_ATTR) is True
            default = _is_default(trial) and trial.state == TrialState.FAIL and not _diverged(trial)
            original = (_history(trial) or [trial.number])[0]
            if (infrastructure or default) and self.made[original] < self.limit:
                self._retry(study, trial)
                retried.append(trial.number)
        return retried

    def default_again(self, study) -> int | None:
        """At a sweep's start: retry the newest default attempt when the study has no completed
        default and none waiting or running (the command was run again after the default failed
        its attempts); returns that attempt's number, or None."""
        if not default_missing(study):
            return None
        trials = study.get_trials(deepcopy=False)
        superseded = _superseded(trials)
        last = max((t for t in trials if _is_default(t) and t.number not in superseded), key=lambda t: t.number,
                   default=None)
        if last is None:
            return None
        self._retry(study, last, counted=False)
        return last.number

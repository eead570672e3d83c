"""Which failed trials run again: infrastructure failures (a rank killed from outside, a launch
error) and a default that did not complete, within a stated limit; a sweep that starts again
gives a missing default one more attempt instead of saying there is nothing to run."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from ngptune.tuning.retries import MAX_INFRA_RETRIES, TrialRetries, default_missing, default_not_completed
from ngptune.tuning.storage import UNTUNED_ATTR, study_progress
from ngptune.tuning.trial import infrastructure_cause


@pytest.mark.parametrize("returncode, reason, cause", [
    (2, "crash (exit status 2): rank 0 was killed by SIGKILL (exit code -9); log: x/rank0.log", "killed from outside"),
    (2, "crash (exit status 2): rank 1 was killed by SIGTERM (exit code 143); also failed: rank 0", "killed from outside"),
    (-9, "crash (exit status -9): no output", "killed from outside"),
    (143, "crash (exit status 143): (--checkpoint-every N keeps one along the way)", "killed from outside"),
    (129, "crash (exit status 129): no output", "killed from outside"),
    (2, "crash (exit status 2): rendezvous at 127.0.0.1:4 failed within 60 s (distributed.timeout_s): X", "launch error"),
    (2, "crash (exit status 2): rank 0 raised ValueError: bad", None),
    (2, "crash (exit status 2): rank 0 was killed by SIGSEGV (exit code -11)", None),  # the process's own fault
    (2, "out of memory: rank 0 ran out of memory (OutOfMemoryError: CUDA out of memory.)", None),
    (2, "NCCL error: rank 1 raised DistBackendError: NCCL error in ...", None),
])
def test_infrastructure_failures_are_told_from_the_trials_own(returncode, reason, cause):
    assert infrastructure_cause(returncode, reason) == cause


def _add(study, state, *, default=False, infrastructure=False, history=None, reason="crash"):
    attrs = {"reason": reason, "infrastructure": infrastructure, "is_default": default}
    if default:
        attrs[UNTUNED_ATTR] = True
    study.add_trial(optuna.create_trial(
        state=state, params={"x": 1.0}, distributions={"x": CategoricalDistribution([1.0, 2.0])},
        value=1.0 if state == TrialState.COMPLETE else None, user_attrs=attrs,
        system_attrs={"retry_history": history} if history else {}))


def test_the_default_and_infrastructure_failures_run_again_up_to_the_limit():
    study = optuna.create_study()
    _add(study, TrialState.FAIL, default=True, reason="crash: rank 0 was killed by SIGKILL", infrastructure=True)
    _add(study, TrialState.FAIL, reason="crash: rank 0 raised ValueError")  # the settings' fault: stays failed
    _add(study, TrialState.FAIL, infrastructure=True)
    retries = TrialRetries()
    assert retries.after_trials(study) == [0, 2]
    assert retries.after_trials(study) == []  # nobody retries a trial twice
    trials = study.get_trials()
    assert [t.state for t in trials[3:]] == [TrialState.WAITING, TrialState.WAITING]
    assert trials[3].user_attrs[UNTUNED_ATTR] is True and trials[3].system_attrs["retry_history"] == [0]
    assert study_progress(study) == (2, 1)  # waiting: 2; counted: trial 1 (the failed originals no longer count)
    # every attempt fails again: each is retried until MAX_INFRA_RETRIES retries of its original
    for attempt in range(MAX_INFRA_RETRIES):
        for _ in range(2):
            trial = study.ask()  # the waiting retries, oldest first
            study.tell(trial, state=TrialState.FAIL)
        expected = [] if attempt == MAX_INFRA_RETRIES - 1 else [3 + 2 * attempt, 4 + 2 * attempt]
        assert retries.after_trials(study) == expected
    assert study_progress(study) == (0, 3)


def test_a_sweep_started_again_runs_a_missing_default_instead_of_nothing():
    study = optuna.create_study()
    for number in range(1 + MAX_INFRA_RETRIES):  # the default and its retries all failed
        history = list(range(number)) or None
        _add(study, TrialState.FAIL, default=True, history=history, reason=f"crash {number}")
    _add(study, TrialState.COMPLETE)
    assert default_missing(study)
    assert default_not_completed(study) == (
        f"the default trial did not complete ({1 + MAX_INFRA_RETRIES} attempts, the last, trial {MAX_INFRA_RETRIES}: "
        f"crash {MAX_INFRA_RETRIES}); nothing is compared with it: run the same command again to retry it")
    waiting_before, _ = study_progress(study)
    again = TrialRetries().default_again(study)
    assert again == MAX_INFRA_RETRIES
    waiting, _ = study_progress(study)
    assert (waiting_before, waiting) == (0, 1) and not default_missing(study)
    assert TrialRetries().default_again(study) is None  # one attempt waits already


def test_a_diverged_default_is_not_run_again_and_the_verdict_says_why():
    study = optuna.create_study()  # optimizer.learning_rate=1e30 in the study's settings: every attempt diverges
    reason = "diverged: rank 0 exited with code 2: training diverged at step 5: parameter encoding.table is not finite"
    _add(study, TrialState.FAIL, default=True, reason=reason)
    retries = TrialRetries()
    assert retries.after_trials(study) == [] and retries.default_again(study) is None
    assert not default_missing(study) and study_progress(study) == (0, 1)
    assert default_not_completed(study) == (
        f"the default trial diverged (trial 0: {reason}); nothing is compared with it, and it is not run again "
        "(the same settings diverge again): change the study's settings")


def test_a_launcher_stopped_by_sigterm_from_outside_is_a_failure_of_the_host(tmp_path):
    """A trial's launcher that SIGTERM (or SIGHUP) reached from outside the sweep stops its ranks,
    says how to continue and exits 128 + the signal: the trial failed for the host's reasons."""
    from trainer.contract.rundir import RunDir
    from ngptune.tuning.trial import classify_exit

    log = tmp_path / "0.launch.log"
    log.write_text("terminated (SIGTERM): the ranks were stopped; logs in x/logs\n"
                   "  no snapshot or checkpoint was kept in x\n    (--checkpoint-every N keeps one along the way)\n")
    outcome, reason = classify_exit(143, log, RunDir(tmp_path / "run"), {"state": "interrupted"}, 2)
    assert outcome == "failed" and reason.startswith("stopped by SIGTERM from outside the sweep (exit status 143)")
    assert infrastructure_cause(143, reason) == "killed from outside"

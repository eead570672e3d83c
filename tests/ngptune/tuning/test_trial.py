"""Trials as real process trees: outcomes of faulty trials, and nothing left behind after a stop."""

from __future__ import annotations

import os
from pathlib import Path

from ngptune.tuning import nccl
from ngptune.tuning.trial import TrialLaunch, run_trial, trial_argv
from tests.support.processes import processes_mentioning
from tests.support.scenes import tiny_config
from trainer.contract.config import dump_config
from trainer.contract.rundir import RunDir


def _launch(tmp_path: Path, scene: Path, nproc: int, timeout_s: float = 120.0, **overrides) -> TrialLaunch:
    cfg = tiny_config(**{"training__n_steps": 40, "data__scene": str(scene), **overrides})
    config_path = tmp_path / "trial.config.json"
    config_path.write_text(dump_config(cfg))
    run_dir = tmp_path / "run"
    return TrialLaunch(
        argv=trial_argv(config_path, run_dir, nproc, evaluate=False),
        env=nccl.trial_env(os.environ, {}, nccl_active=False),
        run_dir=run_dir,
        log_path=tmp_path / "launch.log",
        world_size=nproc,
        timeout_s=timeout_s,
        poll_s=0.2,
    )


def _assert_nothing_left(run, launch: TrialLaunch) -> None:
    assert run.leftover_pids == []
    assert processes_mentioning(str(launch.run_dir)) == []


def test_crash_on_one_rank_is_failed_naming_the_rank(tmp_path, demo_scene):
    launch = _launch(tmp_path, demo_scene, nproc=2, faults__crash_at_step=3, faults__ranks=[1])
    run = run_trial(launch)
    assert run.outcome == "failed"
    assert run.reason.startswith("crash (exit status 2): rank 1 raised RuntimeError: simulated crash (faults.crash_at_step=3")
    assert str(RunDir(launch.run_dir).log_path(1)) in run.reason
    _assert_nothing_left(run, launch)


def test_out_of_memory_is_failed_not_pruned(tmp_path, demo_scene):
    launch = _launch(tmp_path, demo_scene, nproc=1, faults__oom_at_step=3)
    run = run_trial(launch)
    assert run.outcome == "failed"  # the point never ran: no value the pruner may compare
    assert run.reason.startswith("out of memory: rank 0 ran out of memory (OutOfMemoryError: CUDA out of memory. (simulated")
    _assert_nothing_left(run, launch)


def test_a_diverged_trial_is_failed_as_diverged_not_as_an_empty_occupancy_grid(tmp_path, demo_scene):
    # two ranks, no metrics record before the occupancy warm-up ends: the first error the NaN
    # parameters cause is "no ray sample of any rank hit an occupied cell"
    launch = _launch(tmp_path, demo_scene, nproc=2, optimizer__learning_rate=1e30, training__log_every=100)
    run = run_trial(launch)
    assert run.outcome == "failed"
    assert run.reason.startswith("diverged: ") and "training diverged at step" in run.reason
    assert "is not finite (NaN or inf)" in run.reason
    assert run.status["state"] == "diverged"
    _assert_nothing_left(run, launch)


def test_hang_past_the_timeout_is_failed_and_killed(tmp_path, demo_scene):
    launch = _launch(tmp_path, demo_scene, nproc=1, timeout_s=30.0, faults__hang_at_step=3)
    run = run_trial(launch)
    assert run.outcome == "failed"
    assert run.reason.startswith("timeout: still running after 30 s (budget.trial_timeout_s), killed as hung")
    assert "hanging at step 3" in RunDir(launch.run_dir).log_path(0).read_text()
    _assert_nothing_left(run, launch)


def test_pruning_stops_every_rank_and_the_launcher(tmp_path, demo_scene):
    launch = _launch(tmp_path, demo_scene, nproc=2, training__n_steps=100000)
    seen: list[int] = []

    def prune_after_first_record(records):
        if records:
            seen.append(records[-1]["step"])
            return "pruned by the test"
        return None

    run = run_trial(launch, prune_after_first_record)
    assert (run.outcome, run.reason) == ("pruned", "pruned by the test")
    assert seen and seen[0] >= 5
    assert run.returncode is not None and run.returncode != 0
    assert run.status["state"] == "interrupted"  # the trainer saw SIGTERM and wrote its status
    _assert_nothing_left(run, launch)

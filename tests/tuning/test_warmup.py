"""The kernel-cache warm-up before trial 0: when a sweep runs it, and the throw-away launch itself."""

from __future__ import annotations

import json

import optuna
import pytest

from ngptune.scheduling.slots import SlotPool
from ngptune.tuning.concurrency import TrialSlots
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.objectives import startup_s
from ngptune.tuning.study import load_study
from ngptune.tuning.warmup import STARTUP_REPORTED_ATTR, WARMUP_STEPS, needs_warm_up, warm_kernel_cache, warmup_config
from tests.tuning.conftest import write_study

PSNR = '[[objectives]]\nname = "psnr_at_budget_db"\n'


def _study(*trials: dict) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for attrs in trials:
        study.add_trial(optuna.trial.create_trial(value=20.0, params={}, distributions={}, user_attrs=attrs))
    return study


def test_the_warm_up_runs_only_where_a_clock_decides_and_start_up_is_not_reported(tmp_path, demo_scene):
    seconds = load_study(write_study(tmp_path / "s.toml", scene=demo_scene, objectives=PSNR,
                                     budget="seconds = 5\ntrial_timeout_s = 100"))
    steps = load_study(write_study(tmp_path / "n.toml", scene=demo_scene, objectives=PSNR))
    from ngptune.tuning.objectives import TRAINER_REPORTS_STARTUP

    assert TRAINER_REPORTS_STARTUP  # this trainer starts its clock after start-up: no sweep warms up for it
    assert not needs_warm_up(seconds, _study(), uses_cuda=True)
    old = dict(uses_cuda=True, trainer_reports_startup=False)  # a trainer without the report
    assert needs_warm_up(seconds, _study(), **old)
    assert not needs_warm_up(seconds, _study(), uses_cuda=False, trainer_reports_startup=False)  # no kernel on a CPU
    assert not needs_warm_up(steps, _study(), **old)  # N steps' PSNR does not depend on the first step's time
    assert not needs_warm_up(seconds, _study({"is_default": True}), **old)  # trial 0 already ran
    assert not needs_warm_up(seconds, _study({"is_default": False, "quality": {"startup_s": 4.2}}), **old)
    reported = _study()
    reported.set_user_attr(STARTUP_REPORTED_ATTR, True)
    assert not needs_warm_up(seconds, reported, **old)


@pytest.mark.slow
def test_the_warm_up_launch_trains_the_default_briefly_without_evaluation(tmp_path, demo_scene):
    spec = load_study(write_study(tmp_path / "s.toml", scene=demo_scene, objectives=PSNR,
                                  budget="seconds = 5\ntrial_timeout_s = 100"))
    base = spec.base_config()
    cfg = warmup_config(base, {}, str(demo_scene))
    assert cfg.training.n_steps == base.training.occupancy_warmup_steps + WARMUP_STEPS
    assert cfg.training.time_budget_s is None and cfg.training.eval_every == 0
    study_dir = StudyDir(tmp_path / "out")
    slots = TrialSlots(pool=SlotPool([], 0, capacity=1), concurrent=1, trials_per_gpu=1)
    study = _study()
    run = warm_kernel_cache(study, cfg=cfg, study_dir=study_dir, nproc_per_node=1, nccl_active=False, slots=slots)
    assert run.outcome == "completed", run.reason
    status = json.loads((study_dir.warmup_dir / "status.json").read_text())
    assert status["step"] == cfg.training.n_steps and "eval_psnr_db" not in status
    assert study_dir.warmup_log_path.is_file() and study_dir.warmup_config_path.is_file()
    # the study records whether the trainer reported its start-up: no warm-up once it does
    assert (study.user_attrs.get(STARTUP_REPORTED_ATTR) is True) == (startup_s(run.records, status) is not None)


@pytest.mark.parametrize("status, first_record, expected", [
    ({"startup_s": 3.5}, {"startup_s": 9.0}, 3.5),
    ({}, {"startup_s": 2.0}, 2.0),
    ({}, {}, None),
    ({"startup_s": float("nan")}, {}, None),
])
def test_start_up_is_read_from_the_status_or_the_first_record(status, first_record, expected):
    assert startup_s([{"step": 5, **first_record}, {"step": 10}], status) == expected

"""Multi-fidelity search and packed GPUs: evaluation marks reported to a successive-halving pruner
stop a deliberately bad configuration early; step-budget trials sharing one (fake) GPU train the
same steps; marks under a seconds budget are judged at whole seconds of training, or taken at the
pruner's rungs."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ngptune.scheduling.slots import CLAIMS_DIR_ENV, FAKE_GPUS_ENV
from ngptune.tuning.concurrency import STEP_BUDGET_TRIALS_PER_GPU_ENV, plan_trial_slots
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.objectives import intermediate_values
from ngptune.tuning.study import load_study
from tests.support.paths import REPO, repo_python_path
from tests.support.studies import write_study
from trainer.contract import ConfigError, RunDir, read_metrics

PSNR = '[[objectives]]\nname = "psnr_at_budget_db"\n'


def _sweep(args: list, env: dict | None = None, timeout_s: float = 500) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ngptune", "sweep", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": repo_python_path(), **(env or {})})


def _trials(out, name: str = "t") -> list:
    storage = JournalStorage(JournalFileBackend(str(StudyDir(out).journal_path)))
    return sorted(optuna.load_study(study_name=name, storage=storage).get_trials(), key=lambda t: t.number)


def _sweep_default_and_bad(tmp_path, scene, budget: str, marks: str, settings: dict | None = None):
    """A 2-trial study without confirmation: trial 0 trains at the base learning rate, trial 1 can
    only take 1e-7, which learns nothing; successive halving judges it on 1 held-out view at
    ``marks``. Returns the study folder."""
    path = write_study(tmp_path / "bad.toml", scene=scene, objectives=PSNR, trials=2, settings=settings,
                       budget=f"{budget}\ntrial_timeout_s = 400",
                       pruner=f'type = "successive_halving"\n{marks}\neval_images = 1',
                       params='[params."optimizer.learning_rate"]\ntype = "categorical"\nchoices = [1e-7]\n')
    out = tmp_path / "out"
    result = _sweep(["--study", path, "--out", out, "--nproc-per-node", "1", "--no-confirm"])
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.mark.slow
def test_a_deliberately_bad_configuration_is_pruned_early(tmp_path, demo_scene):
    budget_steps = 200
    out = _sweep_default_and_bad(tmp_path, demo_scene, f"steps = {budget_steps}",
                                 'min_resource = 10\nreduction_factor = 2\neval_every_steps = 10')
    default, bad = _trials(out)
    assert default.state == TrialState.COMPLETE and default.user_attrs["quality"]["steps"] == budget_steps
    assert bad.params == {"optimizer.learning_rate": 1e-7}
    assert bad.state == TrialState.PRUNED and bad.user_attrs["outcome"] == "pruned"
    assert bad.user_attrs["reason"].startswith("pruned by SuccessiveHalvingPruner at step 10 (PSNR of the evaluation "
                                               "marks = ")
    # the marks: the PSNR of the same held-out view every 10 steps, reported at those steps
    assert sorted(default.intermediate_values) == list(range(10, budget_steps, 10))
    assert bad.intermediate_values[10] < default.intermediate_values[10]
    records = read_metrics(RunDir(bad.user_attrs["run_dir"]).metrics_path(0))
    assert records[-1]["step"] < budget_steps / 2, "the bad trial was stopped early"
    report = (out / "report.html").read_text()
    assert "Pruned trials and intermediate values" in report and "1 of 2 trials that reported" in report


@pytest.mark.slow
def test_two_step_budget_trials_sharing_a_device_train_the_same_steps(tmp_path, demo_scene):
    budget_steps = 30
    path = write_study(tmp_path / "packed.toml", scene=demo_scene, objectives=PSNR, trials=2,
                       budget=f"steps = {budget_steps}\ntrial_timeout_s = 300",
                       params='[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n')
    out = tmp_path / "out"
    # one (fake) GPU, and the default of trials per GPU for step budgets set to 2 from outside
    env = {FAKE_GPUS_ENV: "1", CLAIMS_DIR_ENV: str(tmp_path / "claims"), STEP_BUDGET_TRIALS_PER_GPU_ENV: "2"}
    result = _sweep(["--study", path, "--out", out, "--nproc-per-node", "1", "--no-confirm"], env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 trials at once" in result.stdout
    trials = _trials(out)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert [t.user_attrs["gpus"] for t in trials] == [[0], [0]] and all(t.user_attrs["trials_per_gpu"] == 2
                                                                       for t in trials)
    (a0, b0), (a1, b1) = (t.user_attrs["gpus_held_unix_s"] for t in trials)
    assert a1 < b0 and a0 < b1, "the two trials did not share the device at the same time"
    assert [t.user_attrs["quality"]["steps"] for t in trials] == [budget_steps, budget_steps]
    for trial in trials:
        records = read_metrics(RunDir(trial.user_attrs["run_dir"]).metrics_path(0))
        assert records[-1]["step"] == budget_steps


def test_a_seconds_budget_is_not_shared_without_consent(tmp_path, demo_scene, monkeypatch):
    monkeypatch.setenv(FAKE_GPUS_ENV, "1")
    spec = load_study(write_study(tmp_path / "s.toml", scene=demo_scene, objectives=PSNR,
                                  budget="seconds = 5\ntrial_timeout_s = 100"))
    plan = dict(nproc=1, uses_cuda=False, gpus_per_trial=None, concurrent_trials=None)
    with pytest.raises(ConfigError, match=r"--trials-per-gpu 2: .* has budget.seconds = 5, which trials sharing a GPU "
                                          r"distort \(a step budget does not\); add --allow-shared-gpu"):
        plan_trial_slots(spec, trials_per_gpu=2, **plan)
    assert plan_trial_slots(spec, trials_per_gpu=None, **plan).trials_per_gpu == 1  # no packing by default
    monkeypatch.setenv(STEP_BUDGET_TRIALS_PER_GPU_ENV, "3")
    steps = load_study(write_study(tmp_path / "t.toml", scene=demo_scene, objectives=PSNR))
    packed = plan_trial_slots(steps, trials_per_gpu=None, **plan)
    assert (packed.trials_per_gpu, packed.concurrent) == (3, 3)
    assert plan_trial_slots(steps, trials_per_gpu=1, **plan).concurrent == 1  # the flag wins
    monkeypatch.setenv(STEP_BUDGET_TRIALS_PER_GPU_ENV, "two")
    with pytest.raises(ConfigError, match="NGPTUNE_STEP_BUDGET_TRIALS_PER_GPU: expected an integer >= 1, got 'two'"):
        plan_trial_slots(steps, trials_per_gpu=None, **plan)


def test_marks_under_a_seconds_budget_are_judged_at_whole_seconds():
    records = [{"step": 50, "wall_time_s": 0.8, "train_psnr_db": 15.0},
               {"step": 100, "wall_time_s": 1.6, "eval_psnr_db": 20.0},
               {"step": 150, "wall_time_s": 2.4, "train_psnr_db": 22.0},
               {"step": 200, "wall_time_s": 3.6, "eval_psnr_db": 26.0},
               {"step": 300, "wall_time_s": 4.2, "eval_psnr_db": 27.0}]
    by_second = intermediate_values("psnr_at_budget_db", records, evaluations=True, per_second=True)
    assert [s for s, _ in by_second] == [2, 3, 4]
    assert [round(v, 6) for _, v in by_second] == [21.2, 24.2, round(26.0 + 1.0 * 0.4 / 0.6, 6)]  # 20 + 3 dB/s · 0.4 s, ...
    assert intermediate_values("psnr_at_budget_db", records, evaluations=True) == [(100, 20.0), (200, 26.0), (300, 27.0)]
    assert intermediate_values("psnr_at_budget_db", records) == [(50, 15.0), (150, 22.0)]  # no marks: training PSNR
    # marks at the rungs: each evaluation at the whole second its record reached (the rung it was taken for)
    assert intermediate_values("psnr_at_budget_db", records, evaluations=True, per_second=True,
                               at_marks=True) == [(1, 20.0), (3, 26.0), (4, 27.0)]


@pytest.mark.slow
def test_marks_at_the_rungs_evaluate_once_per_rung_and_prune_a_bad_configuration(tmp_path, demo_scene):
    # a seconds budget of 6 s; successive halving at 1, 2 and 4 s of training
    out = _sweep_default_and_bad(tmp_path, demo_scene, "seconds = 6",
                                 'min_resource = 1\nreduction_factor = 2\neval_at = "rungs"',
                                 settings={"training.log_every": 2})
    default, bad = _trials(out)
    assert default.state == TrialState.COMPLETE and sorted(default.intermediate_values) == [1, 2, 4]
    records = read_metrics(RunDir(default.user_attrs["run_dir"]).metrics_path(0))
    marks = [r for r in records if r.get("eval_psnr_db") is not None]
    assert [int(r["wall_time_s"]) for r in marks] == [1, 2, 4]  # one evaluation per rung, none between
    assert bad.state == TrialState.PRUNED
    assert bad.user_attrs["reason"].startswith("pruned by SuccessiveHalvingPruner at 1 s of training (PSNR of the "
                                               "evaluation marks = ")

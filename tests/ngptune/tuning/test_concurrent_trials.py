"""Trials side by side on fake GPUs (NGPTUNE_FAKE_GPUS): disjoint sets per running trial, two
workers on one study never on one GPU at once, no trial lost or duplicated; the flags' bad input."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ngptune.scheduling.slots import CLAIMS_DIR_ENV, FAKE_GPUS_ENV
from ngptune.tuning.concurrency import plan_trial_slots
from ngptune.tuning.layout import StudyDir
from ngptune.tuning.study import load_study
from tests.support.paths import REPO, repo_python_path
from tests.support.studies import write_study
from trainer.contract.errors import ConfigError


def _spec(tmp_path, demo_scene, **kwargs):
    return load_study(write_study(tmp_path / "s.toml", scene=demo_scene, **kwargs))


@pytest.mark.parametrize("flags, message", [
    (dict(gpus_per_trial=0), "--gpus-per-trial: expected an integer >= 1, got 0"),
    (dict(gpus_per_trial=5), "--gpus-per-trial 5: only 4 GPUs visible"),
    (dict(gpus_per_trial=2, concurrent_trials=3), "--concurrent-trials 3: trials of 2 GPUs need 6 GPUs, 4 visible"),
    (dict(gpus_per_trial=1, nproc=2, uses_cuda=True), "--gpus-per-trial 1: each trial runs 2 CUDA ranks"),
    (dict(nproc=64, uses_cuda=True), "--nproc-per-node 64: this host has 4 GPUs; each CUDA rank needs one of its own "
                                     "(give --nproc-per-node 4 or fewer)"),
    (dict(trials_per_gpu=2), "--trials-per-gpu 2: {path} has throughput_samples_per_s, which trials sharing "
                             "a GPU distort (a step budget does not); add --allow-shared-gpu to accept that"),
])
def test_bad_concurrency_flags(tmp_path, demo_scene, monkeypatch, flags, message):
    monkeypatch.setenv(FAKE_GPUS_ENV, "4")
    spec = _spec(tmp_path, demo_scene)
    kwargs = dict(nproc=1, uses_cuda=False, gpus_per_trial=None, concurrent_trials=None)
    kwargs.update(flags)
    with pytest.raises(ConfigError) as err:
        plan_trial_slots(spec, **kwargs)
    assert str(err.value).startswith(message.format(path=spec.path))


def test_concurrency_plan(tmp_path, demo_scene, monkeypatch):
    monkeypatch.setenv(FAKE_GPUS_ENV, "8")
    spec = _spec(tmp_path, demo_scene)
    plan = dict(nproc=1, uses_cuda=False, gpus_per_trial=2)
    assert plan_trial_slots(spec, concurrent_trials="auto", **plan).concurrent == 4
    assert plan_trial_slots(spec, concurrent_trials=None, **plan).concurrent == 1
    shared = plan_trial_slots(spec, concurrent_trials="auto", trials_per_gpu=2, allow_shared_gpu=True, **plan)
    assert (shared.concurrent, shared.pool.per_gpu) == (8, 2)
    monkeypatch.setenv(FAKE_GPUS_ENV, "0")  # a CPU host: one trial at a time unless asked
    assert plan_trial_slots(spec, concurrent_trials=None, nproc=2, uses_cuda=False, gpus_per_trial=None).concurrent == 1


def test_two_workers_run_trials_side_by_side_on_disjoint_gpus(tmp_path, demo_scene):
    study = write_study(tmp_path / "c.toml", scene=demo_scene, budget="steps = 3\ntrial_timeout_s = 200", trials=4,
                        params='[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n')
    out = tmp_path / "out"
    env = {**os.environ, FAKE_GPUS_ENV: "3", CLAIMS_DIR_ENV: str(tmp_path / "claims"), "PYTHONPATH": repo_python_path()}
    cmd = [sys.executable, "-m", "ngptune", "sweep", "--study", str(study), "--out", str(out), "--nproc-per-node", "1",
           "--gpus-per-trial", "1", "--concurrent-trials", "2", "--trials", "4"]
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
               for _ in range(2)]
    outputs = [w.communicate(timeout=500)[0] for w in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output
    storage = JournalStorage(JournalFileBackend(str(StudyDir(out).journal_path)))
    trials = sorted(optuna.load_study(study_name="t", storage=storage).get_trials(), key=lambda t: t.number)
    assert [t.number for t in trials] == list(range(len(trials))) and 4 <= len(trials) <= 7
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["run_dir"] for t in trials}) == len(trials)
    spans = [(t.user_attrs["gpus"], *t.user_attrs["gpus_held_unix_s"]) for t in trials]
    assert all(len(gpus) == 1 and gpus[0] in (0, 1, 2) for gpus, _, _ in spans)
    for i, (gpus, a, b) in enumerate(spans):
        for gpus2, a2, b2 in spans[i + 1:]:
            assert set(gpus).isdisjoint(gpus2) or b <= a2 or b2 <= a, f"GPU {gpus} held by two trials at once"
    assert any(not (b <= a2 or b2 <= a) for i, (_, a, b) in enumerate(spans) for _, a2, b2 in spans[i + 1:]), \
        "no two trials ever ran at once"
    with open(StudyDir(out).trials_csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert {row["gpus"] for row in rows} <= {"0", "1", "2"}
    assert not list((tmp_path / "claims").glob("gpu*.json")), "a released claim was left behind"


def test_a_cpu_host_bounds_trials_at_once_by_its_cores_and_the_study(tmp_path, demo_scene, monkeypatch):
    from ngptune.tuning import concurrency

    monkeypatch.setenv(FAKE_GPUS_ENV, "0")
    monkeypatch.setattr(concurrency, "host_cores", lambda: 2)
    spec = _spec(tmp_path, demo_scene, trials=1)
    flags = dict(uses_cuda=False, gpus_per_trial=None)
    # 2 ranks of cores // ranks threads each take both cores: one trial at a time, said once
    slots = plan_trial_slots(spec, nproc=2, concurrent_trials=1000000, **flags)
    assert slots.concurrent == 1
    assert slots.note == ("--concurrent-trials 1000000: 1 trial at a time on this host's 2 CPU cores (each trial "
                          "runs 2 ranks × 1 thread, training.cpu_threads); more would share cores and slow each other")
    one_core_each = plan_trial_slots(spec, nproc=1, concurrent_trials=3, cpu_threads=1, **flags)
    assert one_core_each.concurrent == 2 and one_core_each.at_once(1) == 1 and one_core_each.at_once(5) == 2
    assert plan_trial_slots(spec, nproc=1, concurrent_trials="auto", cpu_threads=1, **flags).note is None
    assert plan_trial_slots(spec, nproc=1, concurrent_trials="auto", cpu_threads=0, **flags).concurrent == 1
    with pytest.raises(ConfigError) as err:
        plan_trial_slots(spec, nproc=64, concurrent_trials=None, **flags)
    assert str(err.value) == ("--nproc-per-node 64: this host has 2 CPU cores and no GPU; each gloo rank needs a "
                              "core of its own (give --nproc-per-node 2 or fewer)")
    with pytest.raises(ConfigError, match=r"^--trials-per-gpu 2: this host has no GPU"):
        plan_trial_slots(spec, nproc=1, concurrent_trials=None, trials_per_gpu=2, **flags)


@pytest.mark.parametrize("objective, budget", [
    ("samples_per_s", "steps = 20"),
    ("rays_per_s", "steps = 20"),
    ("time_to_psnr_s", "steps = 20"),
    ("psnr_at_budget_db", "seconds = 5"),  # a slowed trial trains fewer steps in its seconds
])
def test_trials_sharing_a_gpu_under_a_timed_objective_are_refused(tmp_path, demo_scene, monkeypatch, objective,
                                                                  budget):
    monkeypatch.setenv(FAKE_GPUS_ENV, "2")
    target = "\ntarget_db = 20.0" if objective == "time_to_psnr_s" else ""
    spec = _spec(tmp_path, demo_scene, objectives=f'[[objectives]]\nname = "{objective}"{target}\n',
                 budget=f"{budget}\ntrial_timeout_s = 120")
    plan = dict(nproc=1, uses_cuda=False, gpus_per_trial=1, concurrent_trials="auto", trials_per_gpu=2)
    with pytest.raises(ConfigError) as err:
        plan_trial_slots(spec, **plan)
    distorted = "budget.seconds = 5" if budget.startswith("seconds") else objective
    assert str(err.value) == (f"--trials-per-gpu 2: {spec.path} has {distorted}, which trials sharing a GPU "
                              "distort (a step budget does not); add --allow-shared-gpu to accept that")
    assert plan_trial_slots(spec, allow_shared_gpu=True, **plan).concurrent == 4

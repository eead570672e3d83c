"""``ngptune sweep`` end to end: resume after a kill, concurrent workers on the journal file and on
PostgreSQL, invalid combinations, the best config, and the fox scene with 2 gloo ranks."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ngptune.processes import cuda_device_count
from ngptune.tuning.command import register
from ngptune.tuning.layout import StudyDir
from tests.support.cli import SWEEP, run_command
from tests.support.paths import REPO
from tests.support.processes import processes_mentioning
from tests.support.studies import write_study
from trainer.contract.config import TrainConfig, apply_overrides, load_config
from trainer.contract.rundir import RunDir

FOX = REPO.parent / "shared" / "data" / "fox"


def _load(out: Path, name: str = "t") -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(str(StudyDir(out).journal_path)))
    return optuna.load_study(study_name=name, storage=storage)


def _trials(study: optuna.Study) -> list:
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def test_command_line():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sweep", "--trials", "4", "--nproc-per-node", "2", "--timeout", "90",
                              "--storage", "sqlite:///x.db", "--study-name", "s", "--out", "o", "--scene", "sc"])
    assert (args.trials, args.nproc_per_node, args.timeout, args.storage, args.study_name) == (4, 2, 90.0, "sqlite:///x.db", "s")
    assert args.out == Path("o") and args.scene == Path("sc")
    assert parser.parse_args(["sweep"]).study == REPO / "studies" / "demo.toml"
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--trials", "0"])


def test_bad_study_is_one_error_line_before_any_launch(tmp_path, demo_scene):
    path = write_study(tmp_path / "bad.toml", scene=demo_scene,
                       params='[params.NCCL_PROTO]\ntype = "categorical"\nchoices = ["LL128"]\n')
    result = run_command(SWEEP + ["--study", path, "--out", tmp_path / "out"], timeout_s=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {path}: params.NCCL_PROTO.choices[0]: "
                                      "NCCL_PROTO=LL128 is never forced (NCCL enables it only where it is safe)")
    assert not (tmp_path / "out").exists()


def test_folders_of_other_commands_and_other_studies_are_refused_without_a_trace(tmp_path, tiny_study):
    run = tmp_path / "run"
    RunDir(run).create().write_json(RunDir(run).status_path, {"state": "completed"})
    result = run_command(SWEEP + ["--study", tiny_study, "--out", run], timeout_s=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --out {run}: holds a training run: its status.json says 'completed'; "
                                      "a sweep needs its own folder")
    assert sorted(p.name for p in run.iterdir()) == ["status.json"]

    out = tmp_path / "out"
    (StudyDir(out).trials_dir / "0").mkdir(parents=True)  # trials of a study this journal does not hold
    for _ in range(2):  # the refusal leaves no half-made study behind: the second try says the same
        again = run_command(SWEEP + ["--study", tiny_study, "--out", out], timeout_s=120)
        assert again.returncode == 2
        assert again.stderr.strip() == (f"error: {StudyDir(out).trials_dir}: holds trials of another study (not 't' "
                                         f"of {StudyDir(out).journal_path}); use another --out or remove that folder")
    assert optuna.get_all_study_names(JournalStorage(JournalFileBackend(str(StudyDir(out).journal_path)))) == []
    journal = StudyDir(out).journal_path
    assert not journal.exists() or journal.read_bytes() == b""  # refused before anything was written into it


def test_invalid_combinations_are_pruned_without_launch(tmp_path, demo_scene):
    path = write_study(tmp_path / "inv.toml", scene=demo_scene, settings={"parallel.mode": "subgrid"},
                       params='[params."parallel.num_subgrids"]\ntype = "categorical"\nchoices = [1]\n')
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", path, "--out", out, "--nproc-per-node", "2", "--trials", "2"], timeout_s=200)
    assert result.returncode == 1, result.stdout + result.stderr  # no trial completed
    trials = _trials(_load(out))
    assert [t.state for t in trials] == [TrialState.PRUNED, TrialState.PRUNED]
    for trial in trials:
        assert trial.user_attrs["outcome"] == "pruned"
        assert trial.user_attrs["reason"].startswith("invalid combination: parallel.num_subgrids: ")
        assert not Path(trial.user_attrs["run_dir"]).exists()  # nothing was launched
    assert trials[0].user_attrs["is_default"] is True and trials[1].user_attrs["is_default"] is False
    assert "no trial completed" in result.stdout
    assert (out / "trials.csv").is_file() and (out / "report.html").is_file()
    assert not StudyDir(out).best_config_path.exists()

    # the same study name and folder with another definition is refused, not mixed in
    path.write_text(path.read_text().replace('"training.log_every" = 5', '"training.log_every" = 10'))
    again = run_command(SWEEP + ["--study", path, "--out", out, "--nproc-per-node", "2", "--trials", "3"], timeout_s=200)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"error: study 't' in {StudyDir(out).journal_path} was made from another definition: "
        'settings."training.log_every" (config.training.log_every): 5 → 10; use another --study-name or --out']
    # (names what changed, as the study file spells it)
    assert len(_load(out).trials) == 2


def test_unreachable_storage_is_one_error_line(tmp_path, tiny_study):
    url = "postgresql+psycopg2://someone:secret@127.0.0.1:1/nodb"
    result = run_command(SWEEP + ["--study", tiny_study, "--storage", url, "--out", tmp_path / "out"], timeout_s=120)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --storage postgresql+psycopg2://someone:***@127.0.0.1:1/nodb: "
                                     "cannot open the study storage (OperationalError: ")
    assert "secret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_resume_after_kill_keeps_completed_trials_and_retries_the_running_one(tmp_path, tiny_study):
    out = tmp_path / "out"
    cmd = [str(c) for c in SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "3",
                                    "--no-confirm"]]
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        # trial 0 completed and trial 1 is training: kill the sweep mid-trial, without warning
        _wait_for(lambda: RunDir(StudyDir(out).run_dir(1)).metrics_path(0).is_file(), 240, "trial 1 to train")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    # the trial's launcher gets SIGTERM from the kernel when its parent dies and stops its worker
    _wait_for(lambda: not processes_mentioning(str(StudyDir(out).trials_dir)), 60, "the orphaned trial to stop")
    before = _trials(_load(out))
    assert [t.state for t in before] == [TrialState.COMPLETE, TrialState.RUNNING]

    second = run_command(cmd)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resuming with 1 of 3 trials done or running; retrying trial 1" in " ".join(second.stdout.split())
    after = _trials(_load(out))
    assert [t.number for t in after] == [0, 1, 2, 3]
    assert after[0].state == TrialState.COMPLETE
    assert (after[0].values, after[0].datetime_complete) == (before[0].values, before[0].datetime_complete)
    assert after[1].state == TrialState.FAIL
    assert after[1].user_attrs["reason"] == "the sweep stopped before this trial finished"
    retry = after[2]
    assert retry.system_attrs["retry_history"] == [1] and retry.params == after[1].params
    assert retry.state == TrialState.COMPLETE and after[3].state == TrialState.COMPLETE
    assert [t.user_attrs["is_default"] for t in after] == [True, False, False, False]
    assert after[0].params == {"parallel.bucket_mib": 25.0}  # the trainer default, enqueued
    for trial in (after[0], after[2], after[3]):
        attrs = trial.user_attrs
        assert attrs["outcome"] == "completed" and attrs["reason"] == ""
        assert attrs["objectives"]["throughput_samples_per_s"] == trial.values[0] > 0
        assert attrs["nccl_active"] is False and attrs["nccl_env"] == {"NCCL_NVLS_ENABLE": "0"}
        assert attrs["nccl_applied"] == {}
        assert attrs["settings"]["training.n_steps"] == 20
        assert set(attrs["phase_ms"]) >= {"march", "field_forward", "backward", "other"}
        assert isinstance(attrs["diagnoses"], list)
        assert Path(attrs["log_path"]).is_file() and RunDir(attrs["run_dir"]).metrics_path(0).is_file()

    # outputs; best_config.json is a config `ngptune train --config` takes as is
    study_dir = StudyDir(out)
    for path in (study_dir.best_config_path, study_dir.best_env_path, study_dir.trials_csv_path, out / "report.html"):
        assert path.is_file(), path
    best = optuna.load_study(study_name="t", storage=JournalStorage(JournalFileBackend(str(study_dir.journal_path)))).best_trial
    chosen, launched = load_config(study_dir.best_config_path), load_config(best.user_attrs["config_path"])
    assert launched.training.n_steps == 20  # the trial budget ...
    assert (chosen.training.n_steps, chosen.training.time_budget_s) == (35000, None)  # ... is the base's again
    assert launched.data.scene is not None and chosen.data.scene is None  # the study's scene stays behind
    # nothing else differs but the study's run-control and machine settings (logging, threads), back at the base's
    assert chosen == apply_overrides(launched, {"training.n_steps": 35000, "data.scene": None,
                                                "training.log_every": TrainConfig().training.log_every,
                                                "training.device": TrainConfig().training.device,
                                                "training.cpu_threads": TrainConfig().training.cpu_threads})
    header = study_dir.best_config_path.read_text().splitlines()[:3]
    assert header[0].startswith(f"// Recommended by study t ({tiny_study}): trial {best.number}")
    assert "unconfirmed: confirmation skipped (--no-confirm)" in header[2]
    assert header[1].startswith(f"// Tuned on scene {launched.data.scene} and for it alone: train it with --scene")
    if best.number == 0:  # the default won its single run: recommended, and said to be without re-runs
        assert "the default (trial 0) won its single run and is recommended without re-runs" in header[2]
    evidence = json.loads(study_dir.confirmation_path.read_text())
    assert evidence["verdict"]["confirmed"] is False and evidence["runs"] == []  # no runs, never confirmed
    assert "export NCCL_NVLS_ENABLE=0" in study_dir.best_env_path.read_text().splitlines()
    train = run_command([sys.executable, "-m", "ngptune", "train", "--config", study_dir.best_config_path, "--n-steps", "3",
                  "--no-eval", "--quiet", "--out", tmp_path / "best_run", "--scene", launched.data.scene], timeout_s=200)
    assert train.returncode == 0, train.stdout + train.stderr
    status = json.loads((tmp_path / "best_run" / "status.json").read_text())
    assert (status["state"], status["step"]) == ("completed", 3)


def test_concurrent_workers_share_the_journal_file(tmp_path, tiny_study):
    out = tmp_path / "out"
    cmd = [str(c) for c in SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "3",
                                    "--no-confirm"]]
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
               for _ in range(3)]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output
        assert "lock" not in output.lower(), output
    trials = _trials(_load(out))
    numbers = [t.number for t in trials]
    assert numbers == list(range(len(trials))) and 3 <= len(trials) <= 5  # each worker overshoots by at most one
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert sum(t.user_attrs["is_default"] for t in trials) == 1
    assert len({t.user_attrs["run_dir"] for t in trials}) == len(trials)
    from ngptune.reporting.study_sampling import sampling_facts, worker_records

    study = _load(out)
    records = worker_records(study.user_attrs)
    assert len(records) == 3 and {r["concurrent_trials"] for r in records.values()} == {1}
    assert {t.user_attrs["worker"] for t in trials} <= set(records)
    seed = study.user_attrs["sampler"]["seed"]
    assert sum(r["sampler_seed"] == seed for r in records.values()) >= 1  # the creator's; later ones offset
    facts = sampling_facts(study)
    assert facts.reproducible == (len(facts.workers) == 1)
    report = (out / "report.html").read_text()
    assert f"seed {seed}. Pruner: " in report and f"Workers: {len(facts.workers)} sweep process" in report


def _postgres_url() -> str:
    url = os.environ.get("NGPTUNE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("NGPTUNE_TEST_POSTGRES_URL is not set under CI (.ci/run starts PostgreSQL with scripts/ci_postgres.sh)")
        pytest.skip("NGPTUNE_TEST_POSTGRES_URL is not set (start a server: URL=$(bash scripts/ci_postgres.sh | tail -n 1))")
    return url


def test_two_workers_share_a_postgresql_study(tmp_path, tiny_study):
    url = _postgres_url()
    name = f"t-{uuid.uuid4().hex[:12]}"
    cmds = [[str(c) for c in SWEEP + ["--study", tiny_study, "--out", tmp_path / f"worker{i}", "--nproc-per-node", "1",
                                      "--trials", "3", "--storage", url, "--study-name", name]] for i in range(2)]
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
               for cmd in cmds]
    outputs = [w.communicate(timeout=400)[0] for w in workers]
    try:
        for worker, output in zip(workers, outputs):
            assert worker.returncode == 0, output
            assert "ngptune:ngptune@" not in output  # the password is masked
        study = optuna.load_study(study_name=name, storage=url)
        trials = _trials(study)
        assert [t.number for t in trials] == list(range(len(trials))) and 3 <= len(trials) <= 4
        assert all(t.state == TrialState.COMPLETE for t in trials)  # none lost, none left running
        assert sum(t.user_attrs["is_default"] for t in trials) == 1 and trials[0].user_attrs["is_default"]
        assert len({t.user_attrs["worker"] for t in trials}) == 2  # both workers ran trials of the one study
    finally:
        optuna.delete_study(study_name=name, storage=url)


@pytest.mark.slow
@pytest.mark.skipif(not FOX.is_dir(), reason="the fox scene (../shared/data/fox) is not present")
def test_fox_scene_two_gloo_ranks_six_trials(tmp_path):
    params = ('[params."parallel.compression"]\ntype = "categorical"\nchoices = ["none", "bf16"]\n'
              '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n')
    path = write_study(tmp_path / "fox.toml", scene=FOX, params=params, trials=6, name="fox",
                       settings={"data.downscale": 8, "data.cache_dir": str(tmp_path / "cache"),
                                 "training.eval_max_images": 1})  # one held-out view scores each trial
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", path, "--out", out, "--nproc-per-node", "2", "--no-confirm"], timeout_s=600)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = _trials(_load(out, "fox"))
    completed = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(completed) >= 6, [(t.number, t.user_attrs.get("reason")) for t in trials]
    for trial in completed:
        records = [json.loads(line) for line in RunDir(trial.user_attrs["run_dir"]).metrics_path(0).read_text().splitlines()]
        assert records[-1]["world_size"] == 2 and records[-1]["step"] == 20
        assert trial.user_attrs["quality"]["psnr_db"] > 0  # every trial is scored on PSNR


def _last_tensorboard_psnr(run_dir: RunDir) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir.tensorboard_dir))
    events.Reload()
    return events.Scalars("eval/psnr_db")[-1].value


def test_several_objectives_from_evaluations(tmp_path, demo_scene):
    objectives = ('[[objectives]]\nname = "psnr_at_budget_db"\n'
                  '[[objectives]]\nname = "time_to_psnr_s"\ntarget_db = 5.0\neval_every_steps = 4\n'
                  '[[objectives]]\nname = "throughput_samples_per_s"\n')
    params = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'
    path = write_study(tmp_path / "q.toml", scene=demo_scene, objectives=objectives, params=params, trials=2,
                       budget="seconds = 5\ntrial_timeout_s = 120", sampler='type = "tpe"\nseed = 2',
                       settings={"training.eval_max_images": 1})  # 5 s: a loaded 2-core machine still makes 4 steps
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", path, "--out", out, "--nproc-per-node", "1", "--no-confirm"])
    assert result.returncode == 0, result.stdout + result.stderr
    study = _load(out)
    assert study.metric_names == ["psnr_at_budget_db", "time_to_psnr_s", "throughput_samples_per_s"]
    for trial in _trials(study):
        assert trial.state == TrialState.COMPLETE, trial.user_attrs["reason"]
        run_dir = RunDir(trial.user_attrs["run_dir"])
        status = json.loads(run_dir.status_path.read_text())
        records = [json.loads(line) for line in run_dir.metrics_path(0).read_text().splitlines()]
        evaluated = [r for r in records if r.get("eval_psnr_db") is not None]
        assert evaluated and evaluated[0]["step"] == 4  # training.eval_every from eval_every_steps
        first_reached = next(r for r in evaluated if r["eval_psnr_db"] >= 5.0)
        psnr, time_to, throughput = trial.values
        assert psnr == status["eval_psnr_db"]  # the final evaluation after the 3 s budget
        assert time_to == first_reached["wall_time_s"]
        assert run_dir.root.parent == StudyDir(out).trials_dir  # a trial is a run in the study folder: its
        assert _last_tensorboard_psnr(run_dir) == pytest.approx(psnr, rel=1e-6)  # TensorBoard events too
        assert throughput > 0 and trial.user_attrs["settings"]["training.time_budget_s"] == 5.0
    best = [t.number for t in study.best_trials]
    text = " ".join(result.stdout.split())
    if cuda_device_count() == 0:  # the rule of studies/README.md, said where the trials run on a CPU
        assert f"warning: {path}: budget.seconds on a CPU: each trial trains as many steps as the machine's" in text
    assert ("recommended (representative of the Pareto front, not confirmed): trial" in text  # the front's knee,
            or "recommended (the default, not confirmed): trial 0" in text)  # or the default, which won its run
    chosen = load_config(StudyDir(out).best_config_path)
    assert chosen.training.time_budget_s is None  # the trials' 5 s budget is not carried over
    restore = {"training.n_steps": chosen.training.n_steps, "training.time_budget_s": None, "data.scene": None,
               "training.log_every": TrainConfig().training.log_every,
               "training.eval_max_images": TrainConfig().training.eval_max_images,
               "training.device": TrainConfig().training.device,
               "training.cpu_threads": TrainConfig().training.cpu_threads}  # machine settings are not recommended
    assert any(apply_overrides(load_config(_trials(study)[n].user_attrs["config_path"]), restore) == chosen for n in best)


def test_confirmation_re_runs_best_and_default_and_records_them(tmp_path, tiny_study):
    from ngptune.tuning.confirm import CONFIRMATION_ATTR, confirm_study
    from ngptune.tuning.rerun import RerunLauncher
    from ngptune.tuning.study import load_study

    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "2", "--no-confirm"])
    assert result.returncode == 0, result.stdout + result.stderr
    study = _load(out)
    default, other = _trials(study)
    spec = load_study(tiny_study)
    launcher = RerunLauncher(spec=spec, objective="throughput_samples_per_s", study_dir=StudyDir(out),
                             nproc_per_node=1, nccl_active=False)
    launched: list = []

    def confirm(repeats: int):
        # trial 1 stands for the best whatever its value: the re-runs, their folders and record are checked
        return confirm_study(study, best=other, default=default, repeats=repeats, objective="throughput_samples_per_s",
                             direction="maximize", unit="samples/s", base_seed=1337, launch=launcher,
                             on_run=lambda run: launched.append((run.label, run.index)))

    verdict = confirm(2)
    runs = study.user_attrs[CONFIRMATION_ATTR]["runs"]
    assert sorted((r["label"], r["trial"], r["index"], r["seed"]) for r in runs) == [
        ("best", 1, 0, 2337), ("best", 1, 1, 2338), ("default", 0, 0, 2337), ("default", 0, 1, 2338)]
    assert all(r["outcome"] == "completed" and r["value"] > 0 for r in runs), runs
    assert verdict.status in ("confirmed", "no_significant_difference", "default_better")
    assert len(verdict.best_values) == 2 and verdict.p_value is not None
    assert StudyDir(out).confirm_run_dir(1, 1).is_dir() and StudyDir(out).confirm_run_dir(0, 1).is_dir()
    # a re-run stopped by a kill leaves its folder behind, unrecorded: it runs again from the start
    stale = StudyDir(out).confirm_run_dir(1, 2)
    stale.mkdir(parents=True)
    (stale / "status.json").write_text(json.dumps({"state": "interrupted"}))
    launched.clear()
    verdict = confirm(3)
    assert sorted(launched) == [("best", 2), ("default", 2)]  # only the third pair is new
    earlier = StudyDir(out).earlier_attempt_dir(1, 2, 1)  # the stopped attempt's records, moved aside
    assert json.loads((earlier / "run" / "status.json").read_text()) == {"state": "interrupted"}
    assert len(study.user_attrs[CONFIRMATION_ATTR]["runs"]) == 6 and len(verdict.default_values) == 3
    assert all(r["outcome"] == "completed" for r in study.user_attrs[CONFIRMATION_ATTR]["runs"])
    # the sweep resumed with the same K reuses what is recorded (or needs none: the default won)
    again = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "2",
                          "--confirm-runs", "3"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "  re-run " not in again.stdout  # every re-run is recorded: none launched again
    evidence = json.loads(StudyDir(out).confirmation_path.read_text())
    sentence, text = evidence["verdict"]["sentence"], " ".join(again.stdout.split())
    # the verdict and its test, as the summary words them (it drops "and is recommended": its lead says so)
    verdict_words = sentence.split("; ")[0].split(" (gain")[0].replace(" and is recommended", "")
    assert verdict_words in text and sentence.split("; ")[-1] in text, (sentence, text)
    assert len(evidence["runs"]) == 6  # the runs behind the verdict, whichever trial won its single run
    # --no-confirm launches nothing; the re-runs recorded earlier still decide, in the files and the headline
    skipped = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "2",
                                   "--no-confirm"])
    assert skipped.returncode == 0 and "  re-run " not in skipped.stdout, skipped.stdout + skipped.stderr
    kept = json.loads(StudyDir(out).confirmation_path.read_text())
    assert kept["verdict"]["status"] == evidence["verdict"]["status"] and len(kept["runs"]) == 6
    assert kept["recommended_trial"] == evidence["recommended_trial"]
    assert "the 3 re-runs each of trial" in " ".join(skipped.stdout.split())
    # a smaller --confirm-runs launches nothing and drops nothing: every recorded pair still decides
    fewer = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--nproc-per-node", "1", "--trials", "2",
                                 "--confirm-runs", "2"])
    assert fewer.returncode == 0 and "  re-run " not in fewer.stdout, fewer.stdout + fewer.stderr
    assert "(--confirm-runs 2 asks fewer: every pair recorded earlier counts)" in " ".join(fewer.stdout.split())
    assert json.loads(StudyDir(out).confirmation_path.read_text()) == kept | {"verdict": evidence["verdict"]}
    for line in (result.stdout + again.stdout).splitlines():  # piped: every line and table under 80 columns
        assert len(line) <= 80 or " " not in line.strip(), line  # but a path, whole on a line of its own


def test_contradictory_or_useless_confirmation_flags_are_refused(tmp_path, tiny_study):
    for flags, message in ((["--no-confirm", "--confirm-runs", "2"], "--no-confirm and --confirm-runs 2: give one"),
                           (["--confirm-runs", "1"], "expected 2 to 100 re-runs each, got 1 (one re-run each"),
                           (["--confirm-runs", "0"], "expected 2 to 100 re-runs each, got 0"),
                           (["--confirm-runs", "1000000000000"], "expected 2 to 100 re-runs each")):
        result = run_command(SWEEP + ["--study", tiny_study, "--out", tmp_path / "o", *flags])
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not (tmp_path / "o").exists()


def test_an_unusable_study_folder_is_refused_in_one_line(tmp_path, tiny_study):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for out, message in ((a_file, f"error: --out {a_file}: not a folder (a file of that name exists)"),
                         (a_file / "sub", f"error: --out {a_file / 'sub'}: cannot create the folder ({a_file} is a file)"),
                         ("", "argument --out: expected a folder, got an empty value")):
        result = run_command(SWEEP + ["--study", tiny_study, "--out", out, "--no-confirm"])
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "tiny.toml"]  # nothing created beside them


def test_a_reopened_study_draws_new_points(tmp_path, tiny_study):
    # Re-running a sweep reopens its study; a sampler seeded as at the start would repeat the
    # start-up draws of the first session (wasted trials), so it is offset by the trials so far.
    from ngptune.tuning.study import load_study
    from ngptune.tuning.storage import open_study

    spec = load_study(tiny_study)
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    study_dir = StudyDir(tmp_path / "out")

    def draws(study: optuna.Study, n: int) -> list[float]:
        values = []
        for _ in range(n):
            trial = study.ask()
            values.append(trial.suggest_float("x", 0.0, 1.0))
            study.tell(trial, 0.0)
        return values

    first, created, *_ = open_study(storage, "t", spec, "fp", {"storage": "journal"}, study_dir, spec.base_config(), False)
    assert created
    first_draws = draws(first, 3)  # the enqueued default trial, then two draws
    again, created, *_ = open_study(storage, "t", spec, "fp", {"storage": "journal"}, study_dir, spec.base_config(), False)
    assert not created
    assert not set(draws(again, 2)) & set(first_draws[1:])


def test_a_target_no_trial_reaches_ends_with_the_best_psnr_seen(tmp_path, demo_scene):
    objectives = '[[objectives]]\nname = "time_to_psnr_s"\ntarget_db = 99.0\neval_every_steps = 10\n'
    params = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'
    path = write_study(tmp_path / "t.toml", scene=demo_scene, objectives=objectives, params=params, trials=1,
                       settings={"training.eval_max_images": 1})
    result = run_command(SWEEP + ["--study", path, "--out", tmp_path / "out", "--nproc-per-node", "1", "--no-confirm"])
    assert result.returncode == 1, result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    assert re.search(r"1 of 1 trials missed the time_to_psnr_s target of 99 dB; the best PSNR reached was "
                     r"\d+\.\d\d dB \(trial 0\): lower target_db or give the trials a longer budget", text), text


def test_the_default_of_a_null_parameter_is_the_value_its_run_chose(tmp_path, demo_scene):
    """training.cone_angle is null in the base config (the trainer takes 0 for the demo's unit box):
    the default trial samples it not, its run records what it chose in status.json, and the summary,
    report.html and trials.csv show that value, marked derived."""
    params = '[params."training.cone_angle"]\ntype = "categorical"\nchoices = [0.0, 0.0078125]\n'
    path = write_study(tmp_path / "t.toml", scene=demo_scene, params=params, trials=2)
    out = tmp_path / "out"
    result = run_command(SWEEP + ["--study", path, "--out", out, "--nproc-per-node", "1", "--no-confirm"])
    assert result.returncode == 0, result.stdout + result.stderr
    default = _trials(_load(out))[0]
    assert default.params == {} and default.user_attrs["derived_settings"]["training.cone_angle"] == 0.0
    assert RunDir(Path(default.user_attrs["run_dir"])).read_status()["derived_settings"]["training.cone_angle"] == 0.0
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ training.cone_angle "))
    assert row.split("│")[2].strip() == "0.0 (derived)", result.stdout  # the default's column of the best settings
    assert "training.cone_angle=0.0 (derived)" in (out / "report.html").read_text()
    assert (out / "trials.csv").read_text().splitlines()[1].split(",")[-3] == "0.0"  # param_training.cone_angle


_BUCKET_PARAM = '[params."parallel.bucket_mib"]\ntype = "categorical"\nchoices = [1.0, 25.0]\n'


def _sweep_edited_between(tmp_path, demo_scene, first: dict, edited: dict) -> tuple[Path, str]:
    """One trial of a tiny study written with ``first`` (write_study's keywords), then the study file
    rewritten with ``edited`` and the sweep resumed to two trials: the output folder and the
    resumed sweep's words (whitespace joined)."""
    study_file, out = tmp_path / "tiny.toml", tmp_path / "out"
    for keywords, trials in ((first, "1"), (edited, "2")):
        write_study(study_file, scene=demo_scene, params=_BUCKET_PARAM, **keywords)
        result = run_command(SWEEP + ["--study", study_file, "--out", out, "--nproc-per-node", "1", "--trials", trials,
                                      "--no-confirm"])
        assert result.returncode == 0, result.stdout + result.stderr
    return out, " ".join(result.stdout.split())


def test_a_sampler_edited_between_sweeps_is_noted_and_reported(tmp_path, demo_scene):
    """A study file whose sampler changed since the study's trials so far: the sweep goes on, says
    what changed, and the report names each worker's sampler."""
    out, text = _sweep_edited_between(tmp_path, demo_scene, {},
                                      {"sampler": 'type = "tpe"\nseed = 3\nn_startup_trials = 1'})
    assert "changes how this study draws and stops trials: sampler random → tpe" in text
    assert "(the trials so far, 1, keep their draws and prunings;" in text
    report = (out / "report.html").read_text()
    assert "The sampler or pruner changed between workers (the study file edited between sweeps):" in report
    assert len(_load(out).trials) == 2


def test_a_study_begun_when_a_default_was_fixed_keeps_it(tmp_path, demo_scene):
    """A study whose trials ran with optimizer.l2_reg 1e-6 (once the default for every scene), resumed
    by a study file that leaves it to the trainer (null): it resumes, says so, and its new trials keep 1e-6."""
    out, text = _sweep_edited_between(tmp_path, demo_scene, {"settings": {"optimizer.l2_reg": 1e-6}}, {})
    assert "changes how this study draws" not in text
    assert "the study began when these trainer settings had one default for every scene;" in text
    assert "optimizer.l2_reg = 1e-06" in text
    configs = sorted((out / "trials").glob("*/config.json")) or sorted((out / "trials").glob("*.config.json"))
    assert len(configs) == 2
    assert [json.loads(p.read_text())["optimizer"]["l2_reg"] for p in configs] == [1e-6, 1e-6]

"""``ngptune train-many``'s input before any launch: a scene given where a folder of scenes is
expected is refused, the jobs' own output folder inside the source is no scene, an entry holding
no scene fails alone without a launch, and a finished job skipped by a run with other training
flags says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ngptune.train_many import TrainManyOptions, discover_scenes, run_train_many
from trainer.contract.errors import ConfigError
from trainer.data.demo import write_demo_sequence


def test_a_scene_folder_is_refused_as_a_source_naming_the_command_that_trains_it(tmp_path):
    write_demo_sequence(tmp_path / "seq", 1, resolution=16, n_train=2, n_val=1, n_test=1)
    scene = tmp_path / "seq" / "0000"
    with pytest.raises(ConfigError) as err:
        discover_scenes(scene)
    assert str(err.value) == (f"{scene}: a blender scene, not a folder of scenes: train it with "
                              f"`ngptune train --scene {scene}`, or give train-many the folder that holds it")


def test_the_jobs_output_folder_inside_the_source_is_not_a_scene(tmp_path):
    write_demo_sequence(tmp_path / "seq", 2, resolution=16, n_train=2, n_val=1, n_test=1)
    (tmp_path / "seq" / "runs" / "logs").mkdir(parents=True)  # left by a first run with --out seq/runs
    assert [p.name for p in discover_scenes(tmp_path / "seq", tmp_path / "seq" / "runs")] == ["0000", "0001"]
    assert [p.name for p in discover_scenes(tmp_path / "seq")] == ["0000", "0001", "runs"]


def test_an_entry_without_a_scene_fails_alone_before_any_launch(tmp_path):
    (tmp_path / "seq" / "notes").mkdir(parents=True)
    results = run_train_many(TrainManyOptions(source=tmp_path / "seq", out_dir=tmp_path / "out"))
    assert [(r.status, r.gpus) for r in results] == [("failed", "")]
    assert results[0].reason.startswith(f"{tmp_path / 'seq' / 'notes'}: no scene found (looked for sparse/, ")
    assert not (tmp_path / "out" / "notes").exists() and not (tmp_path / "out" / "logs" / "notes.log").exists()


def test_a_finished_job_skipped_by_a_run_with_other_flags_names_both(tmp_path):
    write_demo_sequence(tmp_path / "seq", 1, resolution=16, n_train=2, n_val=1, n_test=1)
    finished = tmp_path / "out" / "0000"
    finished.mkdir(parents=True)
    record = {"scene": str(tmp_path / "seq" / "0000"), "gpus": "cpu", "steps": 30, "train_time_s": 1.0,
              "psnr_db": 20.0, "status": "completed", "log_path": "", "run_dir": str(finished),
              "warm_started_from": "", "finished_at": "2026-01-01T00:00:00+00:00", "train_args": ["--n-steps", "30"]}
    (finished / "job.json").write_text(json.dumps(record))
    options = TrainManyOptions(source=tmp_path / "seq", out_dir=tmp_path / "out", train_args=("--n-steps", "60"))
    [result] = run_train_many(options)
    assert result.status == "completed" and result.skipped_at
    assert result.reason == (f"skipped: finished by an earlier run at 2026-01-01T00:00:00+00:00 with other training "
                             f"flags (--n-steps 30; this run's: --n-steps 60) (step 30); remove {finished / 'job.json'} "
                             "to train it again")
    same = TrainManyOptions(source=tmp_path / "seq", out_dir=tmp_path / "out", train_args=("--n-steps", "30"))
    assert "other training flags" not in run_train_many(same)[0].reason


def test_a_scene_named_as_out_s_own_folders_gets_an_indexed_job_name():
    from ngptune.train_many import job_names

    assert job_names([Path("s/a"), Path("s/logs")]) == ["0000-a", "0001-logs"]  # OUT/logs holds the jobs' logs
    assert job_names([Path("s/a"), Path("s/b")]) == ["a", "b"]


def test_an_out_inside_a_scene_is_refused_and_an_earlier_runs_out_is_no_scene(tmp_path):
    write_demo_sequence(tmp_path / "seq", 2, resolution=16, n_train=2, n_val=1, n_test=1)
    with pytest.raises(ConfigError, match=r"^--out .*0001/runs: inside the scene .*0001; choose a folder outside"):
        discover_scenes(tmp_path / "seq", tmp_path / "seq" / "0001" / "runs")
    (tmp_path / "seq" / "old_runs").mkdir()
    (tmp_path / "seq" / "old_runs" / "summary.csv").write_text("scene\n")  # the --out of an earlier run
    assert [p.name for p in discover_scenes(tmp_path / "seq", tmp_path / "seq" / "runs")] == ["0000", "0001"]


def test_an_entry_failed_before_a_launch_names_no_log_and_no_warm_start(tmp_path):
    write_demo_sequence(tmp_path / "seq", 1, resolution=16, n_train=2, n_val=1, n_test=1)
    listing = tmp_path / "scenes.txt"
    listing.write_text("seq/missing\n")
    [result] = run_train_many(TrainManyOptions(source=listing, out_dir=tmp_path / "out", warm_start="previous"))
    assert result.status == "failed" and result.log_path == "" and result.warm_started_from == ""


def test_a_job_whose_resume_failed_stays_resumable(tmp_path):
    from ngptune.train_many import RESUME_FILE, Job, interrupted_model

    run = tmp_path / "out" / "0000"
    (run / "snapshots").mkdir(parents=True)
    snapshot = run / "snapshots" / "step_0000033.pt"
    snapshot.write_bytes(b"")
    job = Job(0, "0000", tmp_path / "scene", run, tmp_path / "out" / "logs" / "0000.log")
    (run / "status.json").write_text(json.dumps({"state": "interrupted"}))
    assert interrupted_model(job) == snapshot
    (run / "status.json").write_text(json.dumps({"state": "failed"}))  # a resume refused over its flags
    assert interrupted_model(job) is None  # a failed run of its own trains anew
    (run / RESUME_FILE).write_text("{}")
    assert interrupted_model(job) == snapshot  # a failed resume keeps the kept model resumable

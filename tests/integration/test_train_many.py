"""``ngptune train-many``: scene discovery and its bad input; a run with warm start, a missing
scene that fails alone, the final model where every run keeps it (render finds it), and a re-run
that skips finished jobs (keeping their outcome) and reruns an unfinished one."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ngptune.scheduling.slots import visible_gpus
from ngptune.train_many import TrainManyOptions, devices_text, discover_scenes, job_names, run_train_many
from tests.support.paths import REPO
from tests.support.scenes import tiny_config
from trainer.contract.config import dump_config
from trainer.data.demo import write_demo_sequence
from trainer.contract.errors import ConfigError


def test_scenes_in_natural_order_and_from_a_list(tmp_path):
    for name in ("10", "2", "1"):
        (tmp_path / "seq" / name).mkdir(parents=True)
    assert [p.name for p in discover_scenes(tmp_path / "seq")] == ["1", "2", "10"]
    listing = tmp_path / "scenes.txt"
    listing.write_text("seq/2  # a comment\n\nseq/1\n")
    assert discover_scenes(listing) == [tmp_path / "seq" / "2", tmp_path / "seq" / "1"]
    assert job_names([Path("a/x"), Path("b/x")]) == ["0000-x", "0001-x"]


@pytest.mark.parametrize("make, message", [
    (lambda d: d.mkdir(), "{src}: no scene folders to train"),
    (lambda d: d.write_text("# nothing\n"), "{src}: no scene paths to train"),
    (lambda d: d.write_text("a\nb/../a\n"), "{src}: entries {parent}/a and {parent}/b/../a are the same folder"),
    (lambda d: None, "{src}: no such folder or scene list"),
])
def test_bad_sources(tmp_path, make, message):
    src = tmp_path / "src"
    make(src)
    with pytest.raises(ConfigError) as err:
        discover_scenes(src)
    assert str(err.value).startswith(message.format(src=src, parent=tmp_path))


def test_bad_gpus_per_job(tmp_path, monkeypatch):
    monkeypatch.setenv("NGPTUNE_FAKE_GPUS", "2")
    (tmp_path / "seq" / "a").mkdir(parents=True)
    for gpus, message in ((0, "--gpus-per-job: expected an integer >= 1, got 0"),
                          (3, "--gpus-per-job 3: only 2 GPUs visible")):
        with pytest.raises(ConfigError, match=message):
            run_train_many(TrainManyOptions(source=tmp_path / "seq", out_dir=tmp_path / "out", gpus_per_job=gpus))


def test_the_gpus_column_says_cpu_for_a_job_on_the_cpu():
    assert devices_text([]) == "cpu"  # a host without GPUs
    assert devices_text([0, 1]) == "0,1"
    assert devices_text([2], ("--device", "cpu")) == devices_text([2], ("--set", "training.device=cpu")) == "cpu"


def test_train_many_warm_starts_fails_one_and_resumes(tmp_path):
    write_demo_sequence(tmp_path / "seq", 2, resolution=16, n_train=4, n_val=1, n_test=1)
    config = tmp_path / "tiny.json"
    config.write_text(dump_config(tiny_config()))
    listing = tmp_path / "scenes.txt"
    listing.write_text("seq/0000\nseq/missing\nseq/0001\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ngptune", "train-many", str(listing), "--out", str(out), "--config", str(config),
           "--n-steps", "4", "--eval-max-images", "1", "--warm-start", "previous", "--cpu-threads", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert first.returncode == 1, first.stdout + first.stderr  # one scene failed
    with open(out / "summary.csv", newline="") as f:
        rows = {Path(r["scene"]).name: r for r in csv.DictReader(f)}
    assert [rows[n]["status"] for n in ("0000", "missing", "0001")] == ["completed", "failed", "completed"]
    assert "scene path does not exist" in rows["missing"]["reason"]
    assert not (out / "logs" / "missing.log").exists()  # refused before a launch
    assert rows["0000"]["steps"] == "4" and float(rows["0000"]["psnr_db"]) > 0
    assert rows["0000"]["gpus"] == ("cpu" if not visible_gpus() else "0")
    assert rows["0001"]["warm_started_from"] == ""  # its predecessor failed: a cold start
    assert json.loads((out / "0000" / "config.json").read_text())["training"]["cpu_threads"] == 1  # --cpu-threads
    # each job's final line has its final step (the last look at its progress may be short of it)
    assert {"0000: completed at step 4/4", "missing: failed", "0001: completed at step 4/4"} <= set(
        first.stdout.splitlines()), first.stdout
    said = first.stdout.splitlines()
    steps = [line for line in said if line.startswith(("0000: step ", "0001: step "))]
    assert steps and all("/4, eta " in line for line in steps), first.stdout  # --n-steps is the total from the start
    assert not any("/?" in line for line in said), first.stdout
    assert [line for line in said if line != line.rstrip()] == [], first.stdout  # the table's rows end in no spaces
    assert any(line.startswith("0000 ") and line.endswith("completed") for line in said), first.stdout
    assert "data:image/png;base64," in (out / "summary.html").read_text()
    # one layout for every run: the final model in snapshots/, which render finds
    assert Path(rows["0000"]["model"]).parent == out / "0000" / "snapshots" and rows["0000"]["finished_at"]
    assert not (out / "0000" / "final.pt").exists()
    rendered = subprocess.run([sys.executable, "-m", "ngptune", "render", str(out / "0000"), "--frames", "1",
                               "--quiet"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert rendered.returncode == 0, rendered.stderr
    assert len(list((out / "0000" / "render-test").glob("*.png"))) == 1

    (out / "0001" / "job.json").unlink()  # as if killed after training: not finished
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    with open(out / "summary.csv", newline="") as f:
        rows = {Path(r["scene"]).name: r for r in csv.DictReader(f)}
    # a finished job keeps its outcome; the row says when the re-run skipped it
    assert [rows[n]["status"] for n in ("0000", "missing", "0001")] == ["completed", "failed", "completed"], second.stdout
    assert rows["0000"]["skipped_at"] and not rows["0001"]["skipped_at"]
    assert rows["0000"]["reason"].startswith("skipped: finished by an earlier run at ")
    assert (out / "0001.unfinished-1" / "status.json").is_file()  # the earlier attempt is kept
    assert json.loads((out / "0001" / "job.json").read_text())["status"] == "completed"


def test_ctrl_c_stops_the_running_job_keeps_its_model_and_writes_the_summary(tmp_path):
    """SIGINT to the driver (Ctrl-C): the running job is stopped and keeps the model of its step
    under way, the next job never starts, summary.csv lists what ran, exit status 130, no traceback."""
    import signal
    import time

    write_demo_sequence(tmp_path / "seq", 2, resolution=16, n_train=4, n_val=1, n_test=1)
    config = tmp_path / "tiny.json"
    config.write_text(dump_config(tiny_config()))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ngptune", "train-many", str(tmp_path / "seq"), "--out", str(out), "--config",
           str(config), "--n-steps", "100000", "--no-eval"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and not (out / "0000" / "metrics.jsonl").is_file():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    said = " ".join(stderr.split())
    assert "interrupted: 0 of 2 jobs finished, 1 stopped (0000; the model each kept: summary.csv's reason), " \
           "1 not started; the same command again skips the finished jobs, resumes the stopped ones from their " \
           "models and trains the others anew" in said, stderr
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(Path(r["scene"]).name, r["status"]) for r in rows] == [("0000", "interrupted")]
    kept = sorted((out / "0000" / "snapshots").glob("step_*.pt"))
    assert kept and f"its newest model: {kept[-1]}" in rows[0]["reason"]
    assert json.loads((out / "0000" / "status.json").read_text())["state"] == "interrupted"
    assert not (out / "0001").exists()

    # the same command again resumes the stopped job from its model (to a total of 5 more steps)
    kept_step = int(kept[-1].stem.removeprefix("step_"))
    again = [*cmd[:cmd.index("--n-steps") + 1], str(kept_step + 5), *cmd[cmd.index("--n-steps") + 2:]]
    second = subprocess.run(again, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert second.returncode == 0, second.stdout + second.stderr
    with open(out / "summary.csv", newline="") as f:
        rows = {Path(r["scene"]).name: r for r in csv.DictReader(f)}
    assert rows["0000"]["status"] == "completed" and rows["0000"]["steps"] == str(kept_step + 5)
    assert rows["0000"]["reason"] == f"resumed from {kept[-1]}"
    assert not list(out.glob("0000.unfinished-*"))  # resumed in place, not moved aside
    assert (out / "logs" / "0000.1.log").is_file() and (out / "logs" / "0000.log").is_file()  # both runs' logs
    assert rows["0001"]["status"] == "completed" and rows["0001"]["reason"] == ""

"""Rank 0's progress on the launcher's console: :class:`trainer.parallel.rank_log.RankLogFollower`
on a log written here, and ``ngptune train --nproc-per-node 2`` (gloo, CPU) printing a scene
warning first, rank 0's step lines live, then the run's summary and its JSON line last."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scenes import tiny_flags
from trainer.parallel.rank_log import RankLogFollower, reported_step, restart_line


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def test_follower_repeats_progress_and_reports_a_restart(tmp_path):
    log = tmp_path / "rank0.log"
    out, err = io.StringIO(), io.StringIO()
    follower = RankLogFollower(log, 20, 1, plain=True, out=out, err=err)
    follower.poll()  # no log yet: nothing, no error
    _append(log, "=== rank 0/2 local rank 0 attempt 0 pid 11: -m trainer\n"
                 "[rank0]: step 5  loss 0.01000  psnr 20.00 dB  rays/s 1e+03  samples/s 1e+04  t=1.0s\n"
                 "warning: said on stderr at once\nprogress: step 7/20 (35 %), 2 s trained, eta 0:04\nstep 10  lo")
    follower.poll()
    assert out.getvalue().splitlines() == [
        "rank 0: step 5  loss 0.01000  psnr 20.00 dB  rays/s 1e+03  samples/s 1e+04  t=1.0s",
        "rank 0: progress: step 7/20 (35 %), 2 s trained, eta 0:04",
    ]  # the unfinished line waits for its end
    assert err.getvalue() == "warning: said on stderr at once (rank 0)\n"
    _append(log, "ss 0.02\nTraceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: boom\n"
                 "=== rank 0/2 local rank 0 attempt 1 pid 12: -m trainer\n"
                 "resumed from checkpoint runs/x/checkpoints/step_0000010 at step 10 after restart 1\n"
                 "warning: said on stderr at once\ntrained to step 20 in 3.0 s, 1.00 k samples/s,\n"
                 "  model: runs/x/checkpoints/step_0000020\n"
                 '{"state": "completed", "step": 20}\n')
    follower.poll()
    assert out.getvalue().splitlines()[2:] == [
        "rank 0: step 10  loss 0.02",
        restart_line(1, 1),
        "rank 0: resumed from checkpoint runs/x/checkpoints/step_0000010 at step 10 after restart 1",
    ]
    assert follower.restarts_seen == 1
    assert err.getvalue().count("warning:") == 1  # each warning once; rank 0's summary and JSON are the launcher's
    log.write_text("step 1  loss 0.5\n")  # truncated (a new run): read from its start
    follower.poll()
    assert out.getvalue().splitlines()[-1] == "rank 0: step 1  loss 0.5"
    assert reported_step("progress: step 7/20 (35 %)") == 7 and reported_step("stepping") is None
    assert reported_step("step 10/20  eta 0:04  t=2.0 s  loss 0.5") == 10


def _capture_with_a_missing_image(demo_scene: Path, scene: Path) -> Path:
    """The demo scene's training views as an instant-ngp capture (transforms.json with
    sharpness, as colmap2nerf writes it) naming one image that is not there: the loader skips that
    frame with a warning."""
    import json
    import shutil

    shutil.copytree(demo_scene / "train", scene / "train")
    train = json.loads((demo_scene / "transforms_train.json").read_text())
    frames = [dict(f, file_path=f["file_path"] + ".png", sharpness=100.0) for f in train["frames"]]
    frames.append(dict(frames[0], file_path="./train/r_missing.png"))
    (scene / "transforms.json").write_text(json.dumps({"camera_angle_x": train["camera_angle_x"], "frames": frames}))
    return scene


@pytest.mark.timeout(120)
def test_two_rank_launch_prints_rank0_progress_before_the_summary(demo_scene, tmp_path):
    scene = _capture_with_a_missing_image(demo_scene, tmp_path / "scene")
    run = tmp_path / "run"
    argv = ["train", "--nproc-per-node", "2", "--scene", str(scene), "--out", str(run), *tiny_flags(),
            "--n-steps", "10", "--no-eval", "--set", "distributed.timeout_s=30"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               PYTHONUNBUFFERED="1", COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "ngptune", *argv], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.splitlines()  # stdout and stderr in the order they were written
    step_lines = [i for i, line in enumerate(lines) if line.startswith("rank 0: step ")]
    assert [lines[i].split()[3] for i in step_lines] == ["5/10", "10/10"], proc.stdout
    summary = next(i for i, line in enumerate(lines) if line.startswith("trained to step 10"))
    # the warning and its wrapped lines (indented) name the missing file
    warning = [i for i, line in enumerate(lines) if line.startswith("warning:")
               and "r_missing.png" in " ".join([line] + [x for x in lines[i + 1:i + 4] if x.startswith("  ")])]
    assert len(warning) == 1 and warning[0] < step_lines[0], proc.stdout  # said once, before training
    assert step_lines[-1] < summary and lines[-1].startswith('{"state": "completed"')
    assert all(line.startswith("  ") for line in lines[summary + 1:-1])  # the summary's own lines, then the JSON
    assert not any(line.startswith(("restart ", "rank 0: {", "rank 0: trained")) for line in lines)
    # rank 0's own summary lines are the launcher's: no "rank 0:" line after the last step (the
    # scene's notes before training may wrap onto "rank 0:   " lines)
    after = step_lines[-1] + 1
    while lines[after].startswith("rank 0:   "):
        after += 1  # the last step line's own continuation
    assert not any(line.startswith("rank 0:") for line in lines[after:]), proc.stdout
    # rank 0 wraps its lines for the launcher's "rank 0: " prefix: the console's lines fit 80
    # columns (the JSON line last is for programs, a warning is one line on stderr; a path without
    # spaces cannot be broken)
    wide = [line for line in lines[:-1] if len(line) > 80 and len(line.split()) > 2 and not line.startswith("warning: ")]
    assert wide == [], proc.stdout
    assert sum(line.startswith("rank 0: ") for line in lines) >= 3  # the rank's lines were there to check
    # the JSON line carries what a one-process run's does: step, times, throughput, the model, ...
    job = json.loads(lines[-1])
    one = subprocess.run([sys.executable, "-m", "ngptune", "train", "--scene", str(scene), *tiny_flags(), "--n-steps", "10",
                          "--no-eval", "--quiet", "--out", str(tmp_path / "one")],
                         cwd=REPO, env=env, text=True, capture_output=True, timeout=110)
    assert one.returncode == 0, one.stderr[-3000:]
    alone = json.loads(one.stdout.splitlines()[-1])
    assert set(alone) - {"snapshot"} <= set(job) and "checkpoint" in job, sorted(set(alone) - set(job))
    assert job["step"] == alone["step"] == 10 and job["nproc_per_node"] == 2 and job["run_dir"] == str(run)
    for key in ("train_time_s", "throughput_samples_per_s", "wall_s", "startup_s"):
        assert isinstance(job[key], (int, float)) and isinstance(alone[key], (int, float)), key
    for status in (job, alone):  # a fresh run's wall time holds the start-up (scene loading included) and the training
        assert status["wall_s"] >= status["startup_s"] + status["train_time_s"], status


def test_a_warning_that_goes_on_in_more_lines_is_repeated_whole_and_once(tmp_path):
    """Rank 0 fits a long warning into lines under 80 columns (less the ``rank 0: `` prefix): the
    launcher repeats it on stderr as one warning, refitted with ``(rank 0)``, and nothing of it on
    stdout."""
    from trainer.contract.runstatus import fitted_warning
    from trainer.contract.textlines import joined

    text = ("runs/a-run-folder-with-a-long-name/checkpoints/step_0000100: resuming with settings other than it was "
            "trained with: loss.otype: 'L2' → 'Huber'; pass its run's config.json as --config to continue the same "
            "training")
    printed = f"warning: {fitted_warning(text)}\n"
    assert printed.count("\n") > 1 and joined(printed.splitlines()) == f"warning: {text}"
    log = tmp_path / "rank0.log"
    out, err = io.StringIO(), io.StringIO()
    follower = RankLogFollower(log, 20, 0, plain=True, out=out, err=err)
    _append(log, "step 5  loss 0.1\n" + printed + "step 6  loss 0.1\n" + printed)
    follower.poll()
    assert out.getvalue().splitlines() == ["rank 0: step 5  loss 0.1", "rank 0: step 6  loss 0.1"]
    lines = err.getvalue().splitlines()
    assert joined(lines) == f"warning: {text} (rank 0)"  # once
    assert len(lines) > 1 and all(len(line) <= 79 for line in lines), lines


def test_a_warning_goes_to_stderr_as_it_is_when_said(tmp_path, monkeypatch):
    """On a terminal rich's live bar stands in for sys.stderr while it runs, so a warning written
    there goes above the bar; the follower must not keep the stderr it was built with (a warning
    written to it landed inside the bar)."""
    log = tmp_path / "rank0.log"
    follower = RankLogFollower(log, 20, 0, plain=True, out=io.StringIO())
    stand_in = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stand_in)  # what rich's live display does once it starts
    _append(log, "warning: scene.json: skipping 1 frame whose image file is missing: a.png\n")
    follower.poll()
    assert stand_in.getvalue() == "warning: scene.json: skipping 1 frame whose image file is missing: a.png (rank 0)\n"


def test_live_line_keeps_step_eta_and_elapsed_at_any_width(tmp_path):
    log = tmp_path / "rank0.log"
    follower = RankLogFollower(log, 2000, 0, plain=True, out=io.StringIO(), err=io.StringIO())
    assert "step 0/2000 eta -:-- 0:00" in follower.bar_line(80)  # before rank 0 said anything
    _append(log, "start-up: loading the scene and the model, first steps (not training time)\n")
    follower.poll()
    line = follower.bar_line(80)  # rank 0's start-up: not "train ... step 0"
    assert line.startswith("start-up (rank 0) ") and "first steps not training time 0:0" in line, line
    _append(log, "start-up 2.4 s (kernels from the cache; 1 step), then the clock;\n")
    follower.poll()
    assert follower.bar_line(80).startswith("train (rank 0) ")
    _append(log, "step 100/2000  eta 9:30  t=30.0 s  loss 0.01235\n  psnr 23.46 dB  6.10 M samples/s\n"
                 "progress: step 133/2000 (7 %), 40 s trained, eta 9:20\n")
    follower.poll()
    line = follower.bar_line(80)
    assert len(line) <= 80 and line.startswith("train (rank 0) ")
    assert "step 133/2000 eta 9:20 0:40" in line  # the newest step and ETA, then the seconds trained
    assert line.endswith("loss 0.01235 psnr 23.46 dB")  # the figures of a line broken in two
    narrow = follower.bar_line(50)
    assert len(narrow) <= 50 and "step 133/2000 eta 9:20" in narrow and "loss" not in narrow


def test_live_line_follows_rank_0_into_its_final_evaluation(tmp_path):
    """Rank 0 announces its final evaluation and then says the share of its rays: the live line
    turns to the evaluation, its clock from the evaluation's start (not the seconds trained)."""
    log = tmp_path / "rank0.log"
    out = io.StringIO()
    follower = RankLogFollower(log, 100000, 0, plain=True, out=out, err=io.StringIO())
    _append(log, "progress: step 126/100000 (0 %), 6 s trained, eta 0:00\n"
                 "evaluating 7 test views (14.5 M pixels, 1 render each), estimated 9.1 s\n")
    follower.poll()
    line = follower.bar_line(80)
    assert line.startswith("evaluate (rank 0) ") and "0 % of the rays eta -:-- 0:00" in line, line
    _append(log, "evaluating: 41 % of the rays (52.9 k of 130 k) in 54.7 s, eta 1:19\n")
    follower.poll()
    line = follower.bar_line(80)
    assert len(line) <= 80 and "41 % of the rays eta 1:19 0:5" in line, line  # 54.7 s and running on
    assert "rank 0: evaluating: 41 % of the rays" in out.getvalue()  # plain: repeated as said
    _append(log, "  evaluated 4/7 views in 61.5 s (last: ./test/r_3, PSNR 20.04 dB)\n")
    follower.poll()
    line = follower.bar_line(80)
    assert "4/7 views eta 0:46 1:0" in line, line  # the views done, their pace (61.5 s · 3/4), the evaluation's seconds

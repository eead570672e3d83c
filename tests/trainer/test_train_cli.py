"""`python -m trainer` with instant-ngp style flags, `ngptune train --print-config`, and a scene box
that no camera ray crosses."""

import json
import shutil
import re
import subprocess
import sys
from itertools import takewhile

import numpy as np
import pytest

from tests.support.paths import REPO
from tests.support.scenes import tiny_config_file
from trainer.contract.errors import TrainingError
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, fit_lines, joined


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_instant_ngp_flags_train_save_and_resume(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    first = _run("--scene", str(demo_scene), "--network", str(config), "--n_steps", "10",
                 "--save_snapshot", str(tmp_path / "s.pt"), "--out", str(tmp_path / "run1"), "--no-eval", cwd=REPO)
    assert first.returncode == 0, first.stderr
    status = json.loads((tmp_path / "run1" / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 10
    # the config's nulls the run resolved (the tiny config sets F, T and the per-level scale)
    assert status["derived_settings"] == {"data.aabb_scale": 1, "data.downscale": 1, "loss.distortion_weight": 0.0,
                                          "optimizer.l2_reg": 0.0, "training.cone_angle": 0.0}
    assert "step 10" in first.stdout  # plain progress lines when not on a terminal
    second = _run("--scene", str(demo_scene), "--network", str(config), "--n_steps", "15",
                  "--load_snapshot", str(tmp_path / "s.pt"), "--out", str(tmp_path / "run2"), "--eval-max-images", "1", cwd=REPO)
    assert second.returncode == 0, second.stderr
    status = json.loads((tmp_path / "run2" / "status.json").read_text())
    assert status["step"] == 15 and status["eval_psnr_db"] > 5
    evaluation = json.loads((tmp_path / "run2" / "eval.json").read_text())
    assert len(evaluation["images"]) == 1 and (tmp_path / "run2" / "renders" / "test_000.png").is_file()


def test_print_config_and_bad_override_are_one_line(tmp_path):
    ok = _run("--print-config", "--set", "training.precision=bf16", cwd=REPO)
    assert ok.returncode == 0 and json.loads(ok.stdout)["training"]["precision"] == "bf16"
    assert ok.stderr.strip().splitlines()[-1].endswith("configs/small.json (the CPU preset: no --config on a CPU)")
    bad = _run("--print-config", "--set", "encoding.log2_hashmap_size=32", cwd=REPO)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --set encoding.log2_hashmap_size: expected null or an integer in [10, 24], got 32"
    ]


def test_a_box_no_camera_ray_crosses_is_a_clear_error(tmp_path):
    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    folder = tmp_path / "away"
    (folder / "images").mkdir(parents=True)
    import cv2

    frames = []
    for i in range(3):
        cv2.imwrite(str(folder / "images" / f"{i}.png"), np.full((8, 8, 3), 128, np.uint8))
        # cameras 10 units above the scene looking up (+z in NeRF world), away from the box
        c2w = [[1, 0, 0, 0.1 * i], [0, -1, 0, 0], [0, 0, -1, 10.0], [0, 0, 0, 1]]
        frames.append({"file_path": f"images/{i}.png", "transform_matrix": c2w})
    (folder / "transforms.json").write_text(json.dumps({"camera_angle_x": 0.5, "frames": frames}))
    # the box model's error: the unbounded model (auto's choice for this capture without alpha) marches
    # every ray through the background shell, so its rays always have samples
    trainer = Trainer(tiny_config(data__holdout_every=0, training__scene_model="box"), load_scene(folder, holdout_every=0))
    with pytest.raises(TrainingError, match="no ray sample hit an occupied cell"):
        trainer.train(n_steps=40)
    trainer.close()


def test_a_used_out_folder_is_refused_unless_resumed_and_a_missing_scene_writes_nothing(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    out = tmp_path / "run"
    common = ("--scene", str(demo_scene), "--config", str(config), "--no-eval", "--quiet", "--out", str(out))
    first = _run(*common, "--n-steps", "5", "--snapshot-every", "5", cwd=REPO)
    assert first.returncode == 0, first.stderr
    metrics_before = (out / "metrics.jsonl").read_text()

    again = _run(*common, "--n-steps", "5", cwd=REPO)
    assert again.returncode == 2
    snapshot = out / "snapshots" / "step_0000005.pt"
    assert again.stderr.strip() == (f"error: --out {out}: already holds a run (its status.json says 'completed'); "
                                    f"choose a new folder, or continue that run with --resume {snapshot}")
    assert (out / "metrics.jsonl").read_text() == metrics_before  # nothing of the refused run mixed in

    resumed = _run(*common, "--n-steps", "10", "--resume", str(snapshot), cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    resumed_status = json.loads((out / "status.json").read_text())
    assert resumed_status["step"] == 10 and resumed_status["resumed_from_step"] == 5
    said = resumed.stdout.splitlines()
    start = next(i for i, line in enumerate(said) if line.startswith("resumed from"))
    end = next(i for i in range(start + 1, len(said)) if not said[i].startswith("  "))
    assert " ".join(" ".join(said[start:end]).split()).startswith(  # under 80 columns, the path whole
        f"resumed from {snapshot} at step 5 (train_time_s includes its ")
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in said[start:end]), said[start:end]

    # a time budget already spent before the resume is said, with what trains on
    trained_s = json.loads((out / "status.json").read_text())["train_time_s"]
    spent = _run(*common, "--n-steps", "15", "--resume", str(out / "snapshots" / "step_0000010.pt"),
                 "--time-budget", f"{trained_s:.6f}", cwd=REPO)
    assert spent.returncode == 0, spent.stderr
    assert (f"warning: the time budget of {float(f'{trained_s:.6f}'):g} s (--time-budget) "
            f"counts the {trained_s:.1f} s trained before the resume") in " ".join(spent.stdout.split()), spent.stdout
    assert "a larger --time-budget trains on" in " ".join(spent.stdout.split())
    # the same budget kept by the run's config.json, as the README resumes: the warning names where it came from
    kept = tmp_path / "kept.json"
    saved = json.loads((out / "config.json").read_text())
    saved["training"]["time_budget_s"] = trained_s
    kept.write_text(json.dumps(saved))
    from_config = _run(*[a if a != str(config) else str(kept) for a in common], "--n-steps", "15",
                       "--resume", str(out / "snapshots" / "step_0000010.pt"), cwd=REPO)
    assert from_config.returncode == 0, from_config.stderr
    assert f"s (training.time_budget_s of --config {kept}) counts the" in " ".join(from_config.stdout.split())

    missing = tmp_path / "no_such_scene"
    lost = _run("--scene", str(missing), "--config", str(config), "--out", str(tmp_path / "never"), cwd=REPO)
    assert lost.returncode == 2
    assert lost.stderr.strip() == f"error: --scene {missing}: scene path does not exist"
    assert not (tmp_path / "never").exists()
    images = tmp_path / "images_only"  # a capture's images/ given for the capture: no scene format in it
    images.mkdir()
    (images / "0.png").write_bytes(b"")
    none = _run("--scene", str(images), "--config", str(config), "--out", str(tmp_path / "never"), cwd=REPO)
    assert none.returncode == 2
    assert none.stderr.strip().startswith(f"error: {images}: no scene found (looked for "), none.stderr
    assert "training" not in none.stdout and not (tmp_path / "never").exists()


def test_a_run_stopped_by_its_time_budget_says_so(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    out = tmp_path / "run"
    result = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "100000", "--time-budget", "1",
                  "--no-eval", "--quiet", "--out", str(out), cwd=REPO)
    assert result.returncode == 0, result.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed" and status["stopped_by"] == "time_budget" and status["step"] < 100000
    lines = result.stdout.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith(f"stopped at step {status['step']} of 100000 "))
    end = next((i for i in range(said + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    statement = " ".join(line.strip() for line in lines[said:end])
    # the budget stops the run before a step predicted to pass it, or (a step slower than those
    # before it: a loaded machine) says by how much the last one passed it
    assert re.fullmatch(rf"stopped at step {status['step']} of 100000 after [0-9.]+ m?s: (the next step, expected to "
                        r"take [0-9.]+ m?s, would pass the time budget of 1 s \(training.time_budget_s, --time-budget\)"
                        r"|the last step ran [0-9.]+ m?s past the time budget of 1 s \(training.time_budget_s, "
                        r"--time-budget\), longer than the steps before it)", statement), statement
    assert all(len(line) < 80 for line in lines[said:end])  # an 80-column terminal


def test_the_summary_throughput_is_the_mean_over_the_run(demo_scene, tmp_path):
    """status.json's (and the summary's) samples/s: every record's timed steps, not the last interval's."""
    out = tmp_path / "run"
    result = _run("--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)), "--n-steps", "22",
                  "--no-eval", "--quiet", "--out", str(out), cwd=REPO)
    assert result.returncode == 0, result.stderr
    status = json.loads((out / "status.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = [(r["throughput_samples_per_s"], r["timed_steps"] / r["steps_per_s"]) for r in records if r["timed_steps"]]
    assert len(timed) >= 2
    mean = sum(rate * seconds for rate, seconds in timed) / sum(seconds for _, seconds in timed)
    assert status["throughput_samples_per_s"] == pytest.approx(mean, rel=1e-9)


def test_an_interrupted_final_evaluation_keeps_the_trained_model(demo_scene, tmp_path, monkeypatch, capsys):
    from trainer.cli import build_parser, train_command
    from trainer.train.loop import Trainer
    from trainer.train.snapshot import load_snapshot

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "evaluate", interrupted)
    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "6", "--out", str(run), "--quiet"])
    assert train_command(args) == 130
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and status["interrupted_during"] == "evaluation"
    snapshot = run / "snapshots" / "step_0000006.pt"
    assert status["snapshot"] == str(snapshot) and load_snapshot(snapshot)["step"] == 6
    out = capsys.readouterr().out
    lines = out.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("evaluation interrupted;"))
    note = lines[said:said + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION), lines[said + 1:]))
    assert joined(note) == (f"evaluation interrupted; the trained model (step 6) is in {snapshot}; --resume it "
                            "with --n-steps 6 to evaluate later")
    assert all(len(line) <= LINE_WIDTH for line in note if " " in line.strip()), note  # a long path stays whole
    assert "evaluating 4 test views" in out


def test_eval_time_estimate_follows_the_training_rate():
    from trainer.train.eval_estimate import eval_seconds_estimate

    last = {"rays_per_step": 1000.0, "samples_per_step": 50000.0, "throughput_samples_per_s": 1e6}
    # 518 400 pixels × 50 samples per ray at 3 × 1e6 samples/s
    assert eval_seconds_estimate(518_400, 1, last) == pytest.approx(518_400 * 50 / 3e6)
    assert eval_seconds_estimate(518_400, 8, last) == pytest.approx(8 * 518_400 * 50 / 3e6)
    assert eval_seconds_estimate(100, 1, {}) is None
    assert eval_seconds_estimate(100, 1, dict(last, rays_per_step=0)) is None


def test_resume_names_changed_settings_and_refuses_fewer_steps(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    first = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "6", "--save-snapshot",
                 str(tmp_path / "s.pt"), "--out", str(tmp_path / "run1"), "--no-eval", cwd=REPO)
    assert first.returncode == 0, first.stderr
    changed = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(tmp_path / "s.pt"),
                   "--set", "loss.otype=Huber", "--out", str(tmp_path / "run2"), "--no-eval", cwd=REPO)
    assert changed.returncode == 0, changed.stderr
    lines = changed.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("warning:")]
    assert len(said) == 1, changed.stderr
    warning = lines[said[0]:said[0] + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION),
                                                          lines[said[0] + 1:]))
    assert joined(warning) == (f"warning: {tmp_path / 's.pt'}: resuming with settings other than it was trained "
                               "with: loss.otype: 'L2' → 'Huber'; pass its run's config.json as --config to continue "
                               "the same training")
    assert len(warning) > 1 and all(len(line) <= LINE_WIDTH for line in warning if " " in line.strip()), warning
    same = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(tmp_path / "s.pt"),
                "--out", str(tmp_path / "run3"), "--no-eval", cwd=REPO)
    assert same.returncode == 0 and "resuming with settings" not in same.stderr, same.stderr
    fewer = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "4", "--resume", str(tmp_path / "s.pt"),
                 "--out", str(tmp_path / "run4"), "--no-eval", cwd=REPO)
    assert fewer.returncode == 2
    assert fewer.stderr.strip().endswith(f"error: training.n_steps: 4 is below step 6 of the snapshot "
                                         f"{tmp_path / 's.pt'}; give --n-steps 6 or more")


def test_resume_of_a_single_process_run_folder_takes_its_newest_snapshot(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    first = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "6", "--snapshot-every", "3",
                 "--out", str(tmp_path / "run1"), "--no-eval", cwd=REPO)
    assert first.returncode == 0, first.stderr
    again = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(tmp_path / "run1"),
                 "--out", str(tmp_path / "run2"), "--no-eval", cwd=REPO)
    assert again.returncode == 0, again.stderr
    status = json.loads((tmp_path / "run2" / "status.json").read_text())
    assert status["resumed_from_step"] == 6 and status["step"] == 8
    # fewer steps than the newest snapshot's name says: refused before the run folder is written
    for resume in (tmp_path / "run1", tmp_path / "run1" / "snapshots" / "step_0000006.pt"):
        fewer = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "4", "--resume", str(resume),
                     "--out", str(tmp_path / "run3"), "--no-eval", cwd=REPO)
        assert fewer.returncode == 2, fewer.stderr
        assert fewer.stderr.strip().endswith(f"error: training.n_steps: 4 is below step 6 of the snapshot "
                                             f"{tmp_path / 'run1' / 'snapshots' / 'step_0000006.pt'}; give --n-steps 6 "
                                             "or more"), fewer.stderr
        assert not (tmp_path / "run3").exists()
    # a newest snapshot cut short (a save killed, a disk full) is skipped for the one before it, and said
    newest = tmp_path / "run1" / "snapshots" / "step_0000006.pt"
    whole = newest.read_bytes()
    newest.write_bytes(whole[: len(whole) // 2])
    older = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(tmp_path / "run1"),
                 "--out", str(tmp_path / "run5"), "--no-eval", cwd=REPO)
    assert older.returncode == 0, older.stderr
    assert (f"warning: --resume {tmp_path / 'run1'}: skipping {newest} (truncated or corrupt snapshot"
            in joined(older.stderr.splitlines())), older.stderr
    assert json.loads((tmp_path / "run5" / "status.json").read_text())["resumed_from_step"] == 3
    # resumed into its own folder: the damaged file is kept aside, not written over by the run's own step 6
    shutil.copytree(tmp_path / "run1", tmp_path / "same")
    damaged = tmp_path / "same" / "snapshots" / "step_0000006.pt"
    again = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(tmp_path / "same"),
                 "--out", str(tmp_path / "same"), "--no-eval", cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert "kept as step_0000006.pt.damaged" in joined(again.stderr.splitlines())
    assert damaged.with_name("step_0000006.pt.damaged").read_bytes() == whole[: len(whole) // 2]
    # every snapshot damaged, a sound final.pt in the folder's root: that one
    shutil.copytree(tmp_path / "run1", tmp_path / "final_only")
    (tmp_path / "final_only" / "final.pt").write_bytes(whole)
    (tmp_path / "final_only" / "snapshots" / "step_0000003.pt").write_bytes(b"")
    last = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume",
                str(tmp_path / "final_only"), "--out", str(tmp_path / "run6"), "--no-eval", cwd=REPO)
    assert last.returncode == 0, last.stderr
    assert json.loads((tmp_path / "run6" / "status.json").read_text())["resumed_from_step"] == 6
    assert "step_0000003.pt (no such file" not in last.stderr  # an empty file is a damaged archive, said so
    newest.write_bytes(whole)
    # a folder whose model is a final.pt in its root (render and export read it) resumes from it too
    only_final = tmp_path / "kept"
    only_final.mkdir()
    shutil.copy(tmp_path / "run1" / "snapshots" / "step_0000006.pt", only_final / "final.pt")
    again = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(only_final),
                 "--out", str(tmp_path / "run4"), "--no-eval", cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "run4" / "status.json").read_text())["resumed_from_step"] == 6


def test_a_run_resumed_in_its_own_folder_keeps_the_earlier_evaluation_aside(demo_scene, tmp_path):
    config = tiny_config_file(tmp_path)
    run = tmp_path / "run"
    first = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "6", "--snapshot-every", "6",
                 "--out", str(run), "--eval-max-images", "1", cwd=REPO)
    assert first.returncode == 0, first.stderr
    assert json.loads((run / "eval.json").read_text())["step"] == 6
    again = _run("--scene", str(demo_scene), "--config", str(config), "--n-steps", "8", "--resume", str(run),
                 "--out", str(run), "--no-eval", cwd=REPO)
    assert again.returncode == 0, again.stderr
    assert not (run / "eval.json").exists()  # nothing evaluated step 8
    assert json.loads((run / "eval.step_0000006.json").read_text())["step"] == 6


def test_ctrl_c_says_where_the_newest_snapshot_is_and_the_command_that_continues(demo_scene, tmp_path, monkeypatch,
                                                                                 capsys):
    import shlex

    from trainer.cli import build_parser, train_command
    from trainer.train.loop import Trainer

    real_step = Trainer.train_step

    def stopped_at_step_8(self):
        if self.step == 8:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", stopped_at_step_8)
    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "10", "--snapshot-every", "3", "--out", str(run), "--quiet"])
    assert train_command(args) == 130
    snapshot = run / "snapshots" / "step_0000006.pt"
    command = f"ngptune train --config {run / 'config.json'} --resume {snapshot} --out {run}"
    said = capsys.readouterr().err.splitlines()
    start = said.index("interrupted: the run stopped at step 8")
    # under 80 columns, the snapshot's path whole; the command whole on its own line, to be copied
    assert said[start + 1:] == fit_lines(["  the newest complete snapshot is", str(snapshot), "(step 6)"],
                                         indent="    ") + ["  continue with:", f"    {command}"]
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in said[start:-1]), said  # a lone path may pass
    assert json.loads((run / "status.json").read_text())["state"] == "interrupted"
    monkeypatch.undo()
    resumed = build_parser().parse_args(shlex.split(command)[2:] + ["--no-eval", "--quiet"])  # the command, as printed
    assert train_command(resumed) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 10 and status["resumed_from_step"] == 6

    nothing = tmp_path / "bare"
    monkeypatch.setattr(Trainer, "train_step", stopped_at_step_8)
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "10", "--out", str(nothing), "--quiet"])
    assert train_command(args) == 130
    said = capsys.readouterr().err.splitlines()
    start = said.index("interrupted: the run stopped at step 8")
    assert said[start + 1:] == fit_lines(["  no snapshot or checkpoint was kept in", str(nothing),
                                          "(--snapshot-every N keeps one along the way)"], indent="    ")
    assert " ".join(" ".join(said[start + 1:]).split()) == (
        f"no snapshot or checkpoint was kept in {nothing} (--snapshot-every N keeps one along the way)")
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in said[start:]), said

    early = tmp_path / "early"  # --snapshot-every given, the stop before its first snapshot
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "20", "--snapshot-every", "9", "--out", str(early), "--quiet"])
    assert train_command(args) == 130
    said = capsys.readouterr().err.splitlines()
    start = said.index("interrupted: the run stopped at step 8")
    assert " ".join(" ".join(said[start + 1:]).split()) == (
        f"no snapshot or checkpoint was kept in {early} (it stopped before --snapshot-every 9 kept one)")


def test_a_second_ctrl_c_while_the_run_ends_is_noted_and_the_end_is_written(demo_scene, tmp_path, monkeypatch,
                                                                            capsys):
    """The first Ctrl-C stops after its step; a second one that comes while the snapshot of that
    step is written (Python's own handler is back by then) does not cut the end short: the
    snapshot is kept, status.json says interrupted, and the run says how to continue."""
    import os
    import signal

    from trainer.cli import build_parser, train_command
    from trainer.run.lifecycle import OneProcess
    from trainer.train.loop import Trainer

    real_step, real_keep = Trainer.train_step, OneProcess.keep_interrupted_model

    def first_ctrl_c_at_step_4(self):
        if self.step == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self)

    def second_ctrl_c_during_the_snapshot(self, *args):
        os.kill(os.getpid(), signal.SIGINT)
        return real_keep(self, *args)

    monkeypatch.setattr(Trainer, "train_step", first_ctrl_c_at_step_4)
    monkeypatch.setattr(OneProcess, "keep_interrupted_model", second_ctrl_c_during_the_snapshot)
    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(tiny_config_file(tmp_path)),
                                      "--n-steps", "10", "--out", str(run), "--quiet"])
    assert train_command(args) == 130
    said = capsys.readouterr().err
    assert "interrupted: the run stopped at step 5" in said and "Traceback" not in said, said
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and status["snapshot"] == str(run / "snapshots" / "step_0000005.pt")
    assert (run / "snapshots" / "step_0000005.pt").is_file()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers are back after the run


def test_a_refused_resume_leaves_the_run_config_it_was_trained_with(demo_scene, tmp_path, capsys):
    """A resume into a run folder replaces its config.json only once the model has loaded: one
    refused (here another hash grid than the snapshot's) leaves the folder's config, with which the
    run still resumes and renders."""
    from trainer.cli import build_parser, train_command

    config = tiny_config_file(tmp_path)
    run = tmp_path / "run"
    nulls = ["--set", "encoding.n_features_per_level=null", "--set", "encoding.log2_hashmap_size=null"]
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(config), "--n-steps", "4",
                                      "--no-eval", "--quiet", "--out", str(run), *nulls])
    assert train_command(args) == 0
    saved = (run / "config.json").read_text()
    snapshot = run / "snapshots" / "step_0000004.pt"
    args = build_parser().parse_args(["--scene", str(demo_scene), "--config", str(config), "--n-steps", "8",
                                      "--no-eval", "--quiet", "--out", str(run), "--resume", str(snapshot)])
    assert train_command(args) != 0
    assert "its hash grid was trained with F=4, T=2^18" in capsys.readouterr().err
    assert (run / "config.json").read_text() == saved  # unchanged: F and T still null there
    args = build_parser().parse_args(["--config", str(run / "config.json"), "--n-steps", "8", "--no-eval", "--quiet",
                                      "--out", str(run), "--resume", str(snapshot)])
    assert train_command(args) == 0
    assert json.loads((run / "config.json").read_text())["training"]["n_steps"] == 8  # replaced once loaded


@pytest.mark.parametrize("program", [["trainer"], ["ngptune", "train"]])
def test_a_reader_that_goes_away_stops_the_output_not_the_run(program, demo_scene, tmp_path):
    """``python -m trainer ... | head -1`` (or ``ngptune train``): the run goes on to its end."""
    config = tiny_config_file(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", *program, "--scene", str(demo_scene), "--network", str(config),
                             "--n_steps", "30", "--set", "training.log_every=1", "--out", str(tmp_path / "run"),
                             "--no-eval"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone; later lines meet a closed pipe
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "BrokenPipeError" not in err
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 30

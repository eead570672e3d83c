"""Bad input to `render`/`export`: one error line naming the file, key or flag; nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from trainer.contract.textlines import LINE_WIDTH

from tests.support.cli import deepest_bracket, first_statement, run_inference_cli
from tests.support.scenes import tiny_config


def _fails(argv, capsys, pattern):
    """The one ``error:`` statement of a refused command (its lines under 80 columns), joined."""
    code, out, err = run_inference_cli(argv, capsys)
    statement, n = first_statement(err)
    assert code == 2 and statement.startswith("error: ") and n == err.count("\n"), err
    assert all(len(line) <= LINE_WIDTH or len(line.split()) == 1 for line in err.splitlines()), err  # a long path stays whole
    assert re.search(pattern, statement), err
    return statement


def test_a_snapshot_of_another_config_names_the_entry(trained_run, tmp_path, capsys, demo_scene):
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    other = Trainer(tiny_config(network__n_neurons=32, data__scene=str(demo_scene)), load_scene(demo_scene))
    run = tmp_path / "run"
    shutil.copytree(trained_run["run"], run)
    (run / "snapshots" / trained_run["snapshot"].name).unlink()
    other.save(run / "snapshots" / "step_0000005.pt")
    other.close()
    _fails(["render", run, "--out", tmp_path / "frames", "--quiet"], capsys,
           r"step_0000005\.pt: model entry '.*' has shape .* in the snapshot but .* in this config")
    assert not list((tmp_path / "frames").glob("*.png"))


def test_a_truncated_snapshot_is_named(trained_run, tmp_path, capsys):
    broken = tmp_path / "cut.pt"
    data = trained_run["snapshot"].read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    _fails(["render", broken, "--out", tmp_path / "frames", "--quiet"], capsys, r"cut\.pt: truncated or corrupt snapshot")
    _fails(["export", "mesh", broken, "--out", tmp_path / "m.ply", "--quiet"], capsys, r"cut\.pt: truncated or corrupt")
    assert not (tmp_path / "m.ply").exists()


def test_a_run_folder_whose_newest_snapshot_is_broken_uses_the_newest_that_loads(trained_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run["run"], run)
    good = sorted((run / "snapshots").glob("step_*.pt"))[-1]
    broken = run / "snapshots" / "step_9999999.pt"
    broken.write_bytes(good.read_bytes()[:1000])
    code, stdout, err = run_inference_cli(["render", run, "--cameras", "test", "--frames", "1", "--out",
                                           tmp_path / "frames", "--quiet"], capsys)
    said = " ".join(err.split())
    assert code == 0 and f"{broken}: truncated or corrupt snapshot" in said, err
    assert f"using the newest snapshot that loads, {good} (step {int(good.stem[5:])})" in said, err
    good.unlink()  # none left that loads: the newest one's error
    _fails(["render", run, "--out", tmp_path / "f2", "--quiet"], capsys, r"step_9999999\.pt: truncated or corrupt")


@pytest.mark.parametrize("command", [["render"], ["export", "mesh"], ["export", "pointcloud"]])
def test_a_missing_model_path_is_named_and_no_folder_is_made_for_it(tmp_path, capsys, command):
    missing = tmp_path / "nonexist.pt"
    _fails([*command, missing, "--quiet"], capsys, r"nonexist\.pt: no such file or folder \(expected a run folder")
    assert not missing.exists()


def test_a_run_trained_on_cuda_names_device_on_a_machine_without_cuda(trained_run, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = tmp_path / "run"
    shutil.copytree(trained_run["run"], run)
    config = json.loads((run / "config.json").read_text())
    config["training"]["device"] = "cuda"
    (run / "config.json").write_text(json.dumps(config))
    _fails(["render", run, "--out", tmp_path / "f", "--quiet"], capsys,
           r"training\.device: the run's 'cuda' needs a CUDA device .*; give --device cpu")
    _fails(["render", run, "--device", "cuda", "--out", tmp_path / "f", "--quiet"], capsys,
           r"--device cuda: no CUDA device is available on this machine; use --device cpu")


def test_a_run_folder_without_snapshots(trained_run, tmp_path, capsys, monkeypatch):
    run = tmp_path / "empty_run"
    run.mkdir()
    shutil.copy(trained_run["run"] / "config.json", run / "config.json")
    said = _fails(["render", run, "--out", tmp_path / "f", "--quiet"], capsys,
                  r"empty_run: no trained model in this folder .*snapshots/step_N\.pt.*--snapshot-every")
    assert deepest_bracket(said) == 0, said
    monkeypatch.chdir(tmp_path)  # the folder as a user names it: runs/x
    (tmp_path / "runs" / "x").mkdir(parents=True)  # one line of ~270 columns before
    for command in (["render", "runs/x", "--cameras", "test"], ["export", "mesh", "runs/x"],
                    ["export", "pointcloud", "runs/x"]):
        code, _, err = run_inference_cli(command, capsys)
        assert code == 2 and err.splitlines() == [
            "error: runs/x: no trained model in this folder",
            "  looked for snapshots/step_N.pt, final.pt and a complete checkpoints/step_N/",
            "  train the run to its end: a finished run keeps its model here",
            "  or press Ctrl-C once: a one-process run keeps the model of its last step",
            "  or train with --snapshot-every N: a model is kept every N steps"], err
    assert sorted(p.name for p in (tmp_path / "runs" / "x").iterdir()) == []  # no render-test/ left behind
    assert not (tmp_path / "f").exists()


def test_a_scene_folder_given_for_a_run_says_to_train_it_first(demo_scene, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(demo_scene, tmp_path / "scenes" / "demo")
    for command in (["render", "scenes/demo", "--cameras", "test"], ["export", "mesh", "scenes/demo"]):
        code, _, err = run_inference_cli(command, capsys)
        assert code == 2 and " ".join(err.split()) == (
            "error: scenes/demo: a blender scene, not a run: train it first (ngptune train --scene scenes/demo "
            "--out RUN), then give RUN"), err
    assert not (tmp_path / "scenes" / "demo" / "render-test").exists()
    code, _, err = run_inference_cli(["render", "scenes/demo/transforms_train.json"], capsys)
    assert code == 2 and " ".join(err.split()) == (
        "error: scenes/demo/transforms_train.json: the file of a blender scene, not a model: train it first "
        "(ngptune train --scene scenes/demo/transforms_train.json --out RUN), then give RUN"), err


def test_a_folder_of_runs_names_the_runs_to_give_instead(tmp_path, capsys, monkeypatch):
    """train-many's --out holds a run per job: render of that folder names a few of them."""
    monkeypatch.chdir(tmp_path)
    for name in ("0000", "0001", "0002", "0003"):
        (tmp_path / "many" / name).mkdir(parents=True)
        (tmp_path / "many" / name / "status.json").write_text('{"state": "completed"}')
    code, _, err = run_inference_cli(["render", "many", "--cameras", "test"], capsys)
    lines = err.splitlines()
    assert code == 2 and lines[:2] == [
        "error: many: no trained model in this folder",
        "  looked for snapshots/step_N.pt, final.pt and a complete checkpoints/step_N/"], err
    assert " ".join(" ".join(lines[2:]).split()) == (
        "this folder holds 4 runs; give one of them: many/0000, many/0001, many/0002 ..."), err
    assert all(len(line) <= 80 for line in lines), err


def test_a_run_that_did_not_finish_is_named_so(tmp_path, capsys, monkeypatch):
    """A run folder whose status.json says running from a dead process (killed by SIGKILL), failed
    or still training: the line on its model (or the error for its missing model) says so."""
    import socket
    import subprocess

    from trainer.inference.loading import run_state_note

    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid now names no process
    run = tmp_path / "killed"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "pid": dead.pid, "host": socket.gethostname()}))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_inference_cli(["render", "killed", "--out", tmp_path / "f", "--quiet"], capsys)
    assert code == 2 and err.splitlines()[:3] == [
        "error: killed: no trained model in this folder",
        "  looked for snapshots/step_N.pt, final.pt and a complete checkpoints/step_N/",
        "  killed/status.json says the run did not finish before it kept one: stale:"], err
    assert err.splitlines()[3] == f"    process {dead.pid} no longer exists, killed before it could write its end", err
    assert deepest_bracket(err) == 0, err
    model = f"snapshot {run}/snapshots/step_0000040.pt (step 40)"
    note = run_state_note(run, model)
    assert note == (f"{run}/status.json: the run did not finish: stale: process {dead.pid} no longer exists, killed "
                    f"before it could write its end; using its newest complete {model}")
    assert deepest_bracket(note) == 1, note  # no "(stale (process ...))"
    (run / "status.json").write_text(json.dumps({"state": "failed", "reason": "process 7 was killed by SIGKILL"}))
    assert run_state_note(run, model) == (f"{run}/status.json: the run did not finish: failed: process 7 was killed "
                                          f"by SIGKILL; using its newest complete {model}")
    (run / "status.json").write_text(json.dumps({"state": "failed", "reason": "RuntimeError: crash (step 3)"}))
    assert deepest_bracket(run_state_note(run, model)) == 1  # a reason's own bracket is never put inside another
    (run / "status.json").write_text(json.dumps({"state": "running", "pid": os.getpid(), "host": socket.gethostname()}))
    assert run_state_note(run, model) == f"{run}/status.json: the run is still training; using its newest {model} so far"
    (run / "status.json").write_text(json.dumps({"state": "completed"}))
    assert run_state_note(run, model) is None


@pytest.mark.parametrize("argv, pattern", [
    (["--spp", "0"], r"--spp 0: expected an integer >= 1"),
    (["--screenshot-spp", "-2"], r"--spp -2: expected an integer >= 1"),
    (["--width", "0"], r"--width 0: expected an integer >= 1"),
    (["--video", "{tmp}/clip.xyz"], r"--video .*clip\.xyz: unknown video extension '\.xyz'"),
    (["--video", "{tmp}/clip.webm"], r"--video .*clip\.webm: WebM holds only VP8, VP9 or AV1 video, .*H\.264 .*; "
                                     r"use \.mp4, \.mov, \.mkv, \.avi$"),
    (["--device", "gpu"], r"--device gpu: expected cpu, cuda or cuda:N"),
    (["--device", "cuda:99"], r"--device cuda:99: (no CUDA device is available|this machine has \d+ CUDA device)"),
    (["--out", "{tmp}/file/frames"], r"--out .*file/frames: cannot create the folder"),
    (["--background", "pink"], r"--background 'pink': expected white, black or #RRGGBB"),
    (["--cameras", "{tmp}/missing.json"], r"--cameras .*missing\.json: camera-path file not found"),
    (["--cameras", "front"], r"--cameras front: expected test, train, val, orbit"),
    (["--width", "100000", "--height", "100000"], r"--width 100000: expected at most 16384 pixels$"),
    (["--cameras", "orbit", "--elevation", "nan"], r"--elevation nan: expected degrees in \[-90, 90\]$"),
    (["--cameras", "orbit", "--radius", "inf"], r"--radius inf: expected a finite number > 0$"),
    (["--cameras", "orbit", "--frames", "8", "--seconds", "10"], r"--frames 8 and --seconds 10: give one of them"),
    (["--cameras", "orbit", "--seconds", "1e300"], r"--seconds 1e\+300 at 30 fps: 3e\+301 frames: expected at most "
                                                   r"100000 frames$"),
])
def test_bad_render_flags_are_refused_before_loading(trained_run, tmp_path, capsys, argv, pattern):
    (tmp_path / "file").write_text("a file where a folder is expected")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    _fails(["render", trained_run["run"], *argv, "--quiet"], capsys, pattern)
    assert not list(tmp_path.rglob("*.png")) and not list(tmp_path.rglob("*.xyz")) and not list(tmp_path.rglob("*.webm"))


def test_a_bad_camera_path_file_is_named_with_its_keyframe(trained_run, tmp_path, capsys):
    path = tmp_path / "base_cam.json"
    path.write_text('{"path": [{"R": [0, 0, 0, 1], "T": [0.5, 0.5, -1]}]}')
    _fails(["render", trained_run["run"], "--cameras", path, "--out", tmp_path / "f", "--quiet"], capsys,
           r"base_cam\.json: path\[0\]: missing key 'fov'")
    assert not list((tmp_path / "f").glob("*.png"))


def test_help_shows_default_values_not_names(capsys):
    from trainer.inference.cli import build_parser

    for argv in (["render"], ["export", "mesh"], ["export", "pointcloud"]):
        with pytest.raises(SystemExit):
            build_parser("ngptune").parse_args([*argv, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        # no module path, no constant's name where a default is given
        assert not re.search(r"trainer\.inference|\(default[^)]*\b[A-Z]+_[A-Z_]+\b", text), text
        if argv[-1] == "mesh":
            assert "(default 2.5, instant-ngp's)" in text


def test_ngptune_render_and_export_run_the_trainers_program(trained_run, tmp_path, capfd):
    from ngptune.cli import main

    assert main(["render", str(trained_run["run"]), "--spp", "0"]) == 2
    assert "--spp 0" in capfd.readouterr().err
    assert main(["export", "pointcloud", str(trained_run["run"]), "--out", str(tmp_path / "c.txt")]) == 2
    assert "unknown point-cloud extension '.txt'" in first_statement(capfd.readouterr().err)[0]


def test_an_export_to_a_place_that_cannot_hold_a_file_is_refused_before_the_work(trained_run, capsys, monkeypatch):
    import trainer.inference.mesh as mesh

    def extract_never(*args, **kwargs):
        raise AssertionError("the mesh was computed before its destination was checked")

    monkeypatch.setattr(mesh, "extract_mesh", extract_never)
    _fails(["export", "mesh", trained_run["run"], "--out", "/proc/x.ply", "--quiet"], capsys,
           r"^error: --out /proc/x\.ply: cannot write a file in /proc \(")

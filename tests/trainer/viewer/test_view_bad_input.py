"""``ngptune view`` on bad input: one ``error:`` statement naming the folder or flag (in lines
under 80 columns, as render and export write theirs), exit status 2; a model trained on CUDA, on a
machine without CUDA, is served from the CPU with a note; Ctrl-C stops the viewer with one line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from tests.support.paths import REPO, repo_python_path
from tests.support.cli import first_statement, run_inference_cli
from tests.support.served import Served
from trainer.contract.textlines import LINE_WIDTH
from trainer.contract.threads import describe_cpu_threads

pytest.importorskip("viser")


def _view(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ngptune", "view", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={**os.environ, "PYTHONPATH": repo_python_path()})


def _one_error(proc: subprocess.CompletedProcess) -> str:
    """The one ``error:`` statement of a refused view (its lines under 80 columns), joined."""
    assert proc.returncode == 2, proc.stderr
    statement, n = first_statement(proc.stderr)
    assert statement.startswith("error: ") and n == proc.stderr.count("\n"), proc.stderr
    assert all(len(line) <= LINE_WIDTH or len(line.split()) == 1 for line in proc.stderr.splitlines()), proc.stderr
    return statement


def test_a_folder_without_a_model_is_said_as_render_and_export_say_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the folder as a user names it: runs/x
    (tmp_path / "runs" / "x").mkdir(parents=True)
    said = _view("runs/x", cwd=tmp_path)
    assert said.returncode == 2
    assert said.stderr.splitlines() == [
        "error: runs/x: no trained model in this folder",
        "  looked for snapshots/step_N.pt, final.pt and a complete checkpoints/step_N/",
        "  train the run to its end: a finished run keeps its model here",
        "  or press Ctrl-C once: a one-process run keeps the model of its last step",
        "  or train with --snapshot-every N: a model is kept every N steps"], said.stderr  # one line of ~270 columns before
    assert run_inference_cli(["render", "runs/x"], capsys)[2] == said.stderr
    assert run_inference_cli(["export", "mesh", "runs/x"], capsys)[2] == said.stderr
    assert _one_error(_view(tmp_path / "missing")) == (
        f"error: {tmp_path / 'missing'}: no such file or folder (expected a run folder, a snapshot file or a "
        "checkpoint folder)")


def test_a_port_in_use_and_bad_flags_are_one_clear_error(trained_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert _one_error(_view(trained_run["run"], "--port", port)) == (
            f"error: --port {port}: already in use on 127.0.0.1; choose another port, or leave --port out for a "
            "free one")
    assert _one_error(_view(trained_run["run"], "--max-resolution", 8)) == (
        "error: --max-resolution 8: expected an integer >= 16 (pixels)")
    assert _one_error(_view(trained_run["run"], "--background", "teal")) == (
        "error: --background 'teal': expected white, black or #RRGGBB")
    assert _one_error(_view(trained_run["run"], "--cpu-threads", -1)) == (
        "error: --cpu-threads -1: expected an integer >= 0 (0: cores // ranks)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the model would render there")
def test_a_cuda_model_without_cuda_is_served_from_the_cpu_with_a_note_and_ctrl_c_stops_it(trained_run, tmp_path):
    run = tmp_path / "cuda_run"
    shutil.copytree(trained_run["run"], run)
    config = json.loads((run / "config.json").read_text())
    config["training"]["device"] = "cuda"
    (run / "config.json").write_text(json.dumps(config))
    with Served(["ngptune", "view", run]) as served:
        url = served.url()
        served.wait_for("Ctrl-C stops it$")
        assert served.lines[0] == (
            "note: the model trained on cuda and this machine has no CUDA device: rendering on the CPU, much more slowly")
        statement, n = first_statement("\n".join(served.lines[1:]))
        assert statement == (f"viewer: {url} — scene, step 80 from {run}/snapshots/step_0000080.pt, on cpu, "
                             f"{describe_cpu_threads(0, 1)}; Ctrl-C stops it")  # the run's training.cpu_threads: 0
        assert served.interrupt() == 130
    assert served.lines[1 + n:] == ["viewer stopped"]

"""``ngptune view`` on bad input: one ``error:`` line naming the folder or flag, exit status 2; a
model trained on CUDA, on a machine without CUDA, is served from the CPU with a note; Ctrl-C stops
the viewer with one line."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from tests.support.paths import REPO
from tests.support.cli import first_statement
from tests.support.served import Served

pytest.importorskip("viser")


def _view(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ngptune", "view", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_folder_without_a_model_is_one_clear_error(tmp_path):
    assert _one_error(_view(tmp_path)) == (
        f"error: {tmp_path}: no snapshot (snapshots/step_N.pt or final.pt) and no complete checkpoint "
        "(checkpoints/step_N/) in this folder; a run that finishes keeps its model there, Ctrl-C of a one-process "
        "run keeps its last step's, and --snapshot-every N keeps one along the way")
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
        assert statement == f"viewer: {url} — scene, step 80 from {run}/snapshots/step_0000080.pt, on cpu; Ctrl-C stops it"
        assert served.interrupt() == 130
    assert served.lines[1 + n:] == ["viewer stopped"]

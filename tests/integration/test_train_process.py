"""``ngptune train`` runs ``python -m trainer`` as a process and is, for the user, that program:
the same output and exit status, Ctrl-C and SIGTERM reach the training once and end it as they
would end ``python -m trainer``, and a killed ``ngptune`` leaves no trainer behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scenes import TINY

pytestmark = pytest.mark.timeout(180)


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_print_config_and_refusals_match_python_m_trainer():
    for flags in (["--print-config", "--set", "training.precision=bf16"],
                  ["--print-config", "--set", "encoding.log2_hashmap_size=32"]):
        ours, theirs = _run("ngptune", "train", *flags), _run("trainer", *flags)
        assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    bad = _run("ngptune", "train", "--precision", "fp8")
    assert bad.returncode == 2 and "usage: ngptune train" in bad.stderr and "invalid choice: 'fp8'" in bad.stderr


def _long_run(tmp_path: Path, demo_scene: Path) -> tuple[subprocess.Popen, Path]:
    """``ngptune train`` of many steps, once it has trained a few."""
    out = tmp_path / "run"
    flags = [f"{key}={json.dumps(value)}" for key, value in {**TINY, "training.log_every": 1}.items()]
    argv = [sys.executable, "-m", "ngptune", "train", "--scene", str(demo_scene), "--n-steps", "100000",
            "--no-eval", "--quiet", "--out", str(out), *sum((["--set", f] for f in flags), [])]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "metrics.jsonl").is_file():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return proc, out


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _children(pid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and (f := _stat(int(e))) and int(f[1]) == pid
            and f[0] != "Z"]


def test_ctrl_c_to_ngptune_reaches_the_training_once(tmp_path, demo_scene):
    proc, out = _long_run(tmp_path, demo_scene)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in stderr
    assert json.loads((out / "status.json").read_text())["state"] == "interrupted"


def test_a_killed_ngptune_leaves_no_training_behind(tmp_path, demo_scene):
    proc, out = _long_run(tmp_path, demo_scene)
    trainers = _children(proc.pid)
    assert len(trainers) == 1
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(trainers[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(trainers[0]), "the training ran on after ngptune was killed"
    assert json.loads((out / "status.json").read_text())["state"] == "interrupted"

"""``ngptune prepare`` stopped by SIGTERM or Ctrl-C in the middle of structure from motion: one
line, its exit status, nothing under ``--out``'s name and no partial folder beside it (pycolmap's
own SIGTERM handler, which prints a C stack trace, never takes over)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO, repo_python_path
from tests.support.processes import as_from_a_terminal

pytest.importorskip("pycolmap")


def _stop_during_sfm(photos: Path, out: Path, sig: int) -> subprocess.CompletedProcess:
    log = out.parent / "prepare.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": repo_python_path()}
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "ngptune", "prepare", str(photos), "--out", str(out)],
                                cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=as_from_a_terminal)
        deadline = time.monotonic() + 240
        # a stage after the frames: pycolmap has been imported and is working
        while "features" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, log.read_text()
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
    return subprocess.CompletedProcess(proc.args, code, log.read_text(), "")


@pytest.mark.parametrize("sig, code, words", [(signal.SIGTERM, 143, "stopped (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted")])
def test_a_stopped_prepare_says_so_in_one_line_and_leaves_nothing(fox_photos: Path, tmp_path: Path,
                                                                   sig: int, code: int, words: str) -> None:
    out = tmp_path / "scenes" / "fox"
    done = _stop_during_sfm(fox_photos, out, sig)
    assert done.returncode == code, done.stdout
    assert f"prepare: {words}; nothing was written to {out}" in done.stdout
    assert "SIGTERM" not in done.stdout.replace("(SIGTERM)", "") and "Traceback" not in done.stdout, done.stdout
    assert sorted(p.name for p in out.parent.iterdir()) == ["prepare.log"]

"""Ranks die with their launcher: no rank orphaned by a launcher (or a profile) killed with SIGKILL,
the last complete checkpoint kept, the lifeline wrapper's own refusals, and a launch refused for a
``distributed.timeout_s`` that is not a finite number of seconds."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import wait_for_job
from tests.support.scenes import tiny_flags
from trainer.contract.errors import LaunchError


# ------------------------------------------------------------------------------- process helpers


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else (fields[0], int(fields[1]))


def _alive(pid: int) -> bool:
    return _stat(pid) is not None


def _ranks_of(run_dir: Path) -> list[int]:
    """Live rank processes (``trainer.parallel.launch --run-dir RUN_DIR``) of a run."""
    marker = f"trainer.parallel.launch\0--run-dir\0{run_dir}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return sorted(found)


def _seconds_until_gone(pids: list[int], timeout_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not any(_alive(p) for p in pids):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def _start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ngptune", *argv], cwd=REPO, text=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _kill_all(proc: subprocess.Popen, run_dir: Path) -> None:
    for pid in [proc.pid, *_ranks_of(run_dir)]:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=30)


# ------------------------------------------------------------------- ranks die with their launcher


@pytest.mark.timeout(180)
def test_sigkilled_train_launcher_leaves_no_ranks_and_its_last_complete_checkpoint(tmp_path):
    import torch

    from trainer.parallel.checkpoint import COMPLETE_MARKER, latest_checkpoint

    run = tmp_path / "run"  # no --scene: the built-in demo scene
    proc = _start(["train", "--nproc-per-node", "2", "--n-steps", "100000", "--out", str(run), *tiny_flags(),
                   "--quiet", "--no-eval", "--checkpoint-every", "5", "--set", "distributed.timeout_s=30"])
    try:
        # both ranks run, as children of the launcher, and have written a complete checkpoint
        wait_for_job(lambda: len(_ranks_of(run)) == 2 and latest_checkpoint(run) is not None, 120,
                  "two ranks and a complete checkpoint", proc)
        ranks = _ranks_of(run)
        launchers = {_stat(p)[1] for p in ranks}  # `ngptune train` runs the trainer's launcher as its child
        assert len(launchers) == 1 and _stat(next(iter(launchers)))[1] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        took = _seconds_until_gone([*ranks, *launchers], 10)
        assert took is not None, f"ranks {ranks} still run 10 s after their launcher was killed"
        assert took < 5
        newest = latest_checkpoint(run)
        assert newest is not None and (newest / COMPLETE_MARKER).is_file()
        for rank in (0, 1):
            state = torch.load(newest / f"rank{rank}.pt", map_location="cpu", weights_only=False)
            assert state  # a whole file, not a torn one
    finally:
        _kill_all(proc, run)


@pytest.mark.timeout(240)
def test_sigkilled_profile_stops_its_trainer_and_ranks(tmp_path):
    out = tmp_path / "profile"
    run = out / "run"
    proc = _start(["profile", "--nproc-per-node", "2", "--steps", "100000", "--link-busbw", "off", "--out", str(out),
                   *tiny_flags()])
    try:
        wait_for_job(lambda: len(_ranks_of(run)) == 2, 150, "the profiled run's two ranks", proc)
        ranks = _ranks_of(run)
        launchers = sorted({_stat(p)[1] for p in ranks})  # the `ngptune train` child of the profile
        assert proc.pid not in launchers and len(launchers) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        took = _seconds_until_gone([*launchers, *ranks], 15)
        assert took is not None, "the profiled trainer ran on after `ngptune profile` was killed"
    finally:
        _kill_all(proc, run)


def test_stop_with_parent_without_prctl_still_stops_the_orphan(tmp_path):
    """Where prctl is missing the watch thread sends the SIGTERM itself; a process that ignores it
    is ended after the grace period."""
    pid_file = tmp_path / "child.pid"
    child = (
        "import signal, sys, time\n"
        "import trainer.contract.lifeline as lifeline\n"
        "lifeline.set_parent_death_signal = lambda sig=None: False\n"
        f"signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[1] == 'ignore' else signal.SIG_DFL)\n"
        "lifeline.stop_with_parent(grace_s=1.0)\n"
        f"open({str(pid_file)!r} + sys.argv[1], 'w').write(str(__import__('os').getpid()))\n"
        "time.sleep(120)\n"
    )
    for mode in ("default", "ignore"):
        parent = subprocess.Popen(
            [sys.executable, "-c",
             f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}, {mode!r}])\ntime.sleep(120)"],
            cwd=REPO, start_new_session=True)
        path = Path(f"{pid_file}{mode}")
        deadline = time.monotonic() + 30
        while not path.is_file() or not path.read_text():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.05)
        pid = int(path.read_text())
        try:
            parent.kill()
            parent.wait()
            took = _seconds_until_gone([pid], 10)
            assert took is not None, f"the orphan ({mode} SIGTERM) ran on"
            assert took < (1.0 if mode == "default" else 3.0)
        finally:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_lifeline_wrapper_refuses_a_parent_that_is_gone_and_a_bad_command_line():
    from trainer.contract.lifeline import command_stopping_with_parent

    argv = command_stopping_with_parent([sys.executable, "-c", "print('ran')"])
    assert argv[:5] == [sys.executable, "-m", "trainer.contract.lifeline", "--parent-pid", str(os.getpid())]
    here = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (here.returncode, here.stdout) == (0, "ran\n")
    gone = subprocess.run([*argv[:4], "1", *argv[5:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (gone.returncode, gone.stdout) == (1, "")  # PID 1 is not its parent: never started
    bad = subprocess.run(argv[:4], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage: python -m trainer.contract.lifeline" in bad.stderr


# ------------------------------------------------------------------------- a finite timeout_s only


@pytest.mark.parametrize("timeout_s", [math.inf, -math.inf, math.nan, 0, -1.0, "30", True, None])
def test_launch_workers_refuses_a_timeout_that_is_not_a_finite_positive_number(tmp_path, timeout_s):
    from trainer.parallel.launch import launch_workers

    with pytest.raises(LaunchError, match=r"^distributed\.timeout_s: expected a finite number of seconds > 0, got "):
        launch_workers(["-m", "trainer", "--help"], 2, timeout_s=timeout_s, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything was written

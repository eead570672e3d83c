"""A ``running`` status.json whose process is gone (SIGKILL, a power cut) reads as stale: the
status records the writing process's pid and host, and the readers name the dead pid, with no
bracket of its own: the commands show the state inside theirs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from trainer.contract.rundir import RunDir
from trainer.contract.runstatus import PID_KEY, process_fields, stale_pid, state_text


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: no process of that pid is left
    return proc.pid


def test_a_running_status_of_a_dead_process_is_stale_and_names_it(tmp_path):
    dead = _dead_pid()
    here = socket.gethostname()
    assert process_fields() == {"pid": os.getpid(), "host": here}
    assert state_text({"state": "running", "pid": dead, "host": here}) == f"stale: process {dead} no longer exists"
    assert stale_pid({"state": "running", "pid": dead}) == dead  # a status of before the host was recorded
    assert state_text({"state": "running", **process_fields()}) == "running"  # alive
    assert state_text({"state": "running", "pid": dead, "host": here + "-elsewhere"}) == "running"  # cannot tell
    assert state_text({"state": "running"}) == "running" and state_text({"state": "completed", "pid": dead}) == "completed"
    assert state_text({}) == "unknown" and state_text(None) == "unknown"
    run = RunDir(tmp_path / "run").create()
    run.write_json(run.status_path, {"state": "running", PID_KEY: dead, "host": here})
    assert run.existing_run() == f"its status.json says 'stale: process {dead} no longer exists'"



def test_the_state_has_no_bracket_of_its_own(tmp_path):
    """Shown inside another bracket (``already holds a run (its status.json says '...')``), a
    stale state nests none: it read ``(... 'stale (process 123 no longer exists)')`` before."""
    from tests.support.cli import deepest_bracket

    dead = _dead_pid()
    run = RunDir(tmp_path / "run").create()
    run.write_json(run.status_path, {"state": "running", PID_KEY: dead, "host": socket.gethostname()})
    assert deepest_bracket(state_text(run.read_status())) == 0
    assert deepest_bracket(f"--out {run.root}: already holds a run ({run.existing_run()})") == 1

"""Finding the processes a test started (or left behind) and waiting for them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def as_from_a_terminal() -> None:
    """``preexec_fn`` of a child that a test stops with SIGINT, as Ctrl-C in a terminal would: its
    SIGINT disposition reset to the default (a background job of a non-interactive shell, which is
    how a test run may be started, inherits SIGINT ignored, and Python then raises no
    KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose command line contains ``text``: [(pid, cmdline)]."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry.name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state not in ("Z", "X"):
            found.append((int(entry.name), cmdline))
    return found


def wait_for_job(predicate, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    """Wait until ``predicate()`` holds, polling every 50 ms.

    Raises:
        AssertionError: the job ``proc`` ended (its stderr tail in the message), or ``timeout_s`` passed, first.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (rc {proc.returncode}) before {what}:\n{proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)

"""Processes that stop when the process that started them dies.

A launcher killed with SIGKILL cannot stop what it started: its ranks (or its trainer command)
would run on as orphans. Two tools, both stdlib only (so the wrapper below starts in
milliseconds, without importing torch):

* :func:`stop_with_parent`, called early in a child process (every rank does, in
  :mod:`trainer.parallel.launch`'s worker entry): on Linux it asks the kernel to send SIGTERM
  when the parent dies (``prctl(PR_SET_PDEATHSIG)``), and a daemon thread watches
  ``os.getppid()`` — it sends the SIGTERM itself where prctl is missing or the parent died before
  it was armed, then, if the process still runs :data:`STOP_GRACE_S` seconds later (stuck in a
  collective, say), ends it with ``os._exit``. The SIGTERM goes through the process's own
  handler (the trainer records ``status.json`` as interrupted); checkpoints are written
  atomically (:func:`trainer.contract.rundir.atomic_write`), so the last complete one survives either way.
* ``python -m trainer.contract.lifeline --parent-pid PID -- PROGRAM ARGS...`` (:func:`command_stopping_with_parent`
  builds it): arms the same death signal, which survives ``exec``, and replaces itself with
  ``PROGRAM``; it exits with status 1 without starting ``PROGRAM`` when ``PID`` is already gone.
  ``ngptune sweep`` starts its trials and ``ngptune profile`` its trainer command this way; a
  launcher that gets SIGTERM stops its own ranks (torch elastic: SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["STOP_GRACE_S", "command_stopping_with_parent", "set_parent_death_signal", "stop_with_parent"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_GRACE_S = 5.0
"""Seconds between the SIGTERM and ``os._exit`` of an orphan; the launcher's own grace between
SIGTERM and SIGKILL (:data:`trainer.parallel.launch.SHUTDOWN_GRACE_S`)."""
POLL_S = 0.25  # how often the watch thread reads os.getppid()


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``; kept across ``exec``, cleared in forked children). Returns
    whether it was armed (False on other systems)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def stop_with_parent(parent_pid: int | None = None, *, poll_s: float = POLL_S,
                     grace_s: float = STOP_GRACE_S) -> None:
    """Make this process stop soon after ``parent_pid`` (default: the current parent) dies:
    SIGTERM at once (within ``poll_s`` without prctl), ``os._exit(143)`` ``grace_s`` later if it
    is still running. Run it once, early, in the child."""
    parent = os.getppid() if parent_pid is None else int(parent_pid)
    armed = set_parent_death_signal(signal.SIGTERM)
    signalled_by_kernel = armed and os.getppid() == parent  # else the parent died before arming

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if not signalled_by_kernel:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()


def command_stopping_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run through this module's wrapper, so that it gets SIGTERM when the calling
    process dies (module docstring)."""
    return [sys.executable, "-m", "trainer.contract.lifeline", "--parent-pid", str(os.getpid()), "--", *map(str, argv)]


def main(args: list[str]) -> int:
    if len(args) < 4 or args[0] != "--parent-pid" or not args[1].isdigit() or args[2] != "--":
        print("usage: python -m trainer.contract.lifeline --parent-pid PID -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != int(args[1]):
        return 1  # the parent died before the death signal was armed
    os.execvp(args[3], args[3:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``python -m ngptune.tuning._exec --parent-pid PID -- PROGRAM ARGS...``: become PROGRAM, but die
with the sweep.

The sweep starts each trial's launcher through this wrapper. On Linux it asks the kernel to send
SIGTERM to the process when its parent (the sweep) dies — ``prctl(PR_SET_PDEATHSIG)``, which
survives ``execv`` — and then replaces itself with ``PROGRAM``. A sweep killed with SIGKILL thus
still stops its running trial: the launcher's SIGTERM handler stops its workers (torch elastic
sends them SIGTERM, then SIGKILL). If the sweep is already gone when the wrapper starts, it
exits with status 1 instead of starting the trial.

Stdlib only, so the wrapper adds milliseconds, not an import of torch.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _set_parent_death_signal(sig: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl: the sweep still stops trials itself unless it is SIGKILLed


def main(args: list[str]) -> int:
    if len(args) < 4 or args[0] != "--parent-pid" or args[2] != "--":
        print("usage: python -m ngptune.tuning._exec --parent-pid PID -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != int(args[1]):
        return 1  # the sweep died before the death signal was armed
    os.execv(args[3], args[3:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

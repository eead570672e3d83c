"""Rank 0's opening lines of ``render --nproc-per-node N``, shown on the launcher's console.

The ranks write to their logs; the launcher waits in :func:`trainer.parallel.launch.launch_workers`.
Rank 0, once its cameras are built and its share's time measured, writes the statement a
one-process render prints second (frames, size, estimate) and its warning, if any, to a file
(:func:`write_opening`, JSON ``{"lines": [str], "warning": str | null}``, renamed into place);
:class:`OpeningRelay`, a thread of the launcher, prints them as soon as the file appears (lines
on stdout, the warning on stderr as ``warning: ...``), and at the latest when the ranks are done.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from trainer.contract.runstatus import fitted_warning

__all__ = ["OPENING_ENV", "OpeningRelay", "write_opening"]

OPENING_ENV = "NGPTUNE_RENDER_OPENING"
"""Environment variable naming the file rank 0 writes its opening lines to."""

POLL_S = 0.2  # how often the relay looks for the file


def write_opening(path: Path, lines: list[str], warning: str | None) -> None:
    """Write rank 0's opening ``lines`` and ``warning`` (without its ``warning: ``) to ``path``."""
    from trainer.contract.rundir import atomic_write_text

    atomic_write_text(Path(path), json.dumps({"lines": lines, "warning": warning}))


class OpeningRelay:
    """Prints what :func:`write_opening` wrote to ``path`` once, as soon as it appears.

    Use as a context manager around the launch: the thread starts on entry; on exit it stops and
    prints the file if it appeared but was not printed yet.
    """

    def __init__(self, path: Path, poll_s: float = POLL_S) -> None:
        self.path, self.poll_s = Path(path), poll_s
        self.printed = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="render-opening", daemon=True)

    def __enter__(self) -> "OpeningRelay":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.relay()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.relay():
                return

    def relay(self) -> bool:
        """Print the file's lines if it exists and they were not printed; True once printed."""
        with self._lock:
            if self.printed:
                return True
            try:
                said = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return False
            if said["lines"]:
                print("\n".join(said["lines"]), flush=True)
            if said.get("warning"):
                print(f"warning: {fitted_warning(said['warning'])}", file=sys.stderr, flush=True)
            self.printed = True
            return True

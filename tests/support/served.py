"""A command that serves a web page (``ngptune view``, ``ngptune dashboard``, ``train --view``), run
as a user runs it: started, its lines read as they come, its address taken from them, stopped with
Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

from tests.support.paths import REPO
from tests.support.processes import as_from_a_terminal

URL_PATTERN = r"(http://[\w.\-\[\]:]+:\d+)"


class Served:
    """``python -m <module> <args>`` in the repository with stdout and stderr as one stream of lines.

    Use as a context manager: leaving it stops the process (SIGINT, then SIGKILL) if it still runs.
    """

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", *map(str, args)], cwd=REPO, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, preexec_fn=as_from_a_terminal)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _drain(self, timeout: float) -> bool:
        """Move the lines that arrive within ``timeout`` into :attr:`lines`; False at the end of output."""
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            return True
        if line is None:
            self._queue.put(None)
            return False
        self.lines.append(line)
        return True

    def wait_for(self, pattern: str, timeout: float = 120.0, start: int = 0) -> re.Match:
        """The first match of ``pattern`` in a line (from line ``start`` on), waiting for it.

        Raises:
            AssertionError: the process ended, or ``timeout`` passed, first (with its output).
        """
        deadline = time.monotonic() + timeout
        checked = start
        while True:
            for line in self.lines[checked:]:
                match = re.search(pattern, line)
                if match:
                    return match
            checked = max(checked, len(self.lines))
            if time.monotonic() > deadline:
                raise AssertionError(f"no line matching {pattern!r} within {timeout:g} s:\n" + "\n".join(self.lines))
            if not self._drain(0.2) and checked == len(self.lines):
                raise AssertionError(f"the process ended (status {self.proc.wait()}) before a line matching "
                                     f"{pattern!r}:\n" + "\n".join(self.lines))

    def url(self, timeout: float = 120.0) -> str:
        return self.wait_for(URL_PATTERN, timeout).group(1)

    def finish(self, timeout: float = 120.0) -> int:
        """Wait for the process to end by itself; its exit status (every line read)."""
        status = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        while self._drain(0.0) and not self._queue.empty():
            pass
        return status

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C: SIGINT, then wait; the exit status (every line read)."""
        self.proc.send_signal(signal.SIGINT)
        return self.finish(timeout)

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

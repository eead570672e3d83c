"""Trainer processes started in the foreground of a driver command.

``ngptune train``, ``demo``, ``render``, ``export``, ``inspect``, ``demo-scene`` and
``bench-comm`` run the trainer's own program (command lines from :mod:`trainer.contract`) and
wait for it. The child writes to the same terminal (stdout may be captured, to read its one JSON
line); it behaves as if the user had started it:

* it runs in a process group of its own (stdin: nothing to read), and the driver passes on
  SIGINT (Ctrl-C), SIGTERM and SIGHUP, so each reaches it once whether the terminal or ``kill``
  sent it to the driver; it starts with their default handling, also where the driver inherited
  one of them ignored (a script's background job), since the driver takes them to pass them on;
* it gets SIGTERM when the driver dies (``prctl(PR_SET_PDEATHSIG)``), so no trainer outlives a
  driver killed with SIGKILL;
* its exit status is the command's (a child ended by signal N: 128 + N, as a shell reports it).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contract import set_parent_death_signal

__all__ = ["FORWARDED_SIGNALS", "ProcessResult", "cuda_device_count", "demo_scene_path", "json_line", "run_foreground"]

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals the driver passes on to its foreground child."""


class ProcessResult:
    """How a foreground child ended.

    Attributes:
        returncode: its exit status (128 + N when signal N ended it).
        stdout: what it printed on stdout when captured, else ``""``.
        stderr: what it printed on stderr when captured, else ``""``.
        signals: the signals the driver passed on to it while it ran.
        pid: its process id.
        killed_by: the signal that ended it (it did not exit by itself), else None.
    """

    def __init__(self, returncode: int, stdout: str, stderr: str, signals: list[int], pid: int = 0,
                 killed_by: int | None = None) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.signals = signals
        self.pid = pid
        self.killed_by = killed_by

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C (or SIGTERM, SIGHUP) reached the child through the driver."""
        return bool(self.signals)


def _child_setup() -> None:
    os.setpgid(0, 0)
    for sig in FORWARDED_SIGNALS:  # the driver takes and passes them on: the child acts on them, even
        signal.signal(sig, signal.SIG_DFL)  # where the driver was started with one ignored (a background job)
    set_parent_death_signal(signal.SIGTERM)


def run_foreground(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                   capture_stdout: bool = False, capture_stderr: bool = False) -> ProcessResult:
    """Run ``argv`` to its end as described in the module docstring.

    Args:
        argv: the command (e.g. :func:`trainer.contract.trainer_argv`).
        env: its whole environment (default: the driver's).
        capture_stdout: read its stdout (returned as text) instead of letting it through.
        capture_stderr: the same for stderr (to read its ``error: `` line).

    Returns:
        The :class:`ProcessResult`.
    """
    pipe = subprocess.PIPE
    proc = subprocess.Popen(list(argv), env=None if env is None else dict(env), stdin=subprocess.DEVNULL,
                            stdout=pipe if capture_stdout else None, stderr=pipe if capture_stderr else None,
                            text=True, preexec_fn=_child_setup)
    received: list[int] = []
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    if threading.current_thread() is threading.main_thread():
        for sig in FORWARDED_SIGNALS:
            previous[sig] = signal.signal(sig, forward)
    try:
        stdout, stderr = proc.communicate()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = proc.returncode
    return ProcessResult(128 - code if code < 0 else code, stdout or "", stderr or "", received, proc.pid,
                         -code if code < 0 else None)


def json_line(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that is a JSON object, or None."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


@functools.cache
def cuda_device_count() -> int:
    """The CUDA devices the trainer's processes see here (``python -m trainer.tools.devices``;
    asked once per driver process).

    Raises:
        LaunchError: the tool failed (its error line went to stderr).
    """
    from trainer.contract import LaunchError, tool_argv

    result = run_foreground(tool_argv("devices"), capture_stdout=True)
    found = json_line(result.stdout)
    if result.returncode != 0 or found is None or not isinstance(found.get("cuda_devices"), int):
        raise LaunchError(f"python -m trainer.tools.devices exited with status {result.returncode} "
                          "without naming the CUDA devices")
    return found["cuda_devices"]


def demo_scene_path() -> Path:
    """The cached demo scene the trainer trains on without ``--scene``, written by the trainer if
    it is missing (``python -m trainer.tools.demo_scene``).

    Raises:
        SceneError: the tool failed (its message: the cache cannot be written).
    """
    from trainer.contract import SceneError, last_error_message, tool_argv

    result = run_foreground(tool_argv("demo_scene"), capture_stdout=True, capture_stderr=True)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise SceneError(last_error_message(result.stderr) or f"the demo scene tool exited with status {result.returncode}")
    return Path(lines[-1])

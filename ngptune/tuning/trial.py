"""One trial as a process tree: launch, poll, stop, classify (DESIGN.md §5).

A trial is a fresh ``python -m trainer --nproc-per-node N --config C --out RUN`` started
with :class:`subprocess.Popen` in a new session (``start_new_session=True``) with its own
environment; the elastic launcher inside binds port 0 for its rendezvous, so concurrent trials
never share a port. torch elastic starts each worker in a session of its own, so the trial's
processes are tracked as a :class:`ProcessTree`: the sessions of the launcher and of every
descendant seen while the trial runs (``/proc``), which still finds workers after the launcher
is gone.

Stopping (pruned, timed out, interrupted, and after every exit): SIGTERM to the launcher, which
stops its workers (they write ``status.json`` as interrupted) — or, when the launcher is already
gone, to every session's process group — up to :data:`STOP_GRACE_S` seconds, then SIGKILL to
every process left, then a check that none is left (:attr:`TrialRun.leftover_pids`). No trial process, and so no GPU memory,
outlives its trial.

Outcomes (:func:`classify_exit` for a trial that ended by itself):

* completed: exit status 0 and ``status.json`` says completed;
* pruned: by the pruner (the caller's ``on_progress``);
* failed: diverged (``status.json`` says ``diverged``: a NaN or infinite loss or parameter, with the
  step and the tensor), out of memory ("out of memory" in the launcher's error or a rank's log:
  the point did not run, so it has no value to compare, and the pruner must not read it as a
  poor one), a crash (exit status and the launcher's one-line error naming the rank), an NCCL
  error, or no exit within the trial timeout (a hang; the trial is killed).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer.contract import (
    REASON_KEY,
    MetricsError,
    RunDir,
    command_stopping_with_parent,
    error_or_last_line,
    is_completed,
    is_diverged,
    read_metrics,
    state_of,
    trainer_argv,
)

__all__ = [
    "OUTSIDE_STOP_STATUSES",
    "ProcessTree",
    "STOP_GRACE_S",
    "TrialLaunch",
    "TrialRun",
    "classify_exit",
    "infrastructure_cause",
    "proc_stat",
    "run_trial",
    "trial_argv",
]

STOP_GRACE_S = 15.0  # SIGTERM → SIGKILL (the launcher itself waits 5 s before SIGKILLing workers)
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the kernel to remove the processes
LOG_TAIL_BYTES = 64 * 1024
_NCCL_ERROR = re.compile(r"NCCL error|nccl[A-Z][A-Za-z]*Error|ncclRemoteError|NCCL communicator was aborted")
_OOM = re.compile(r"out of memory", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------
# Process trees
# ----------------------------------------------------------------------------------------------


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)`` — state, ppid, pgrp, session, ...,
    starttime at index 19 (proc(5) fields 3, 4, 5, 6, ..., 22) — or None when the process is gone
    or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode("ascii", errors="replace").rpartition(")")[2].split()
    except OSError:
        return None
    return fields if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def _process_table() -> dict[int, tuple[int, int]]:
    """Live processes (zombies left out): pid → (parent pid, session id)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := proc_stat(entry.name)) is not None:
            table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


class ProcessTree:
    """The processes of one trial: every process in a session that the root or one of its
    descendants led or belonged to.

    Args:
        root_pid: the launcher's pid; it leads its own session (``start_new_session=True``).
    """

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.sessions: set[int] = {root_pid}

    def refresh(self) -> None:
        """Record the sessions of the root's current descendants (call while it runs)."""
        table = _process_table()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _) in table.items():
            children[ppid].append(pid)
        stack = [self.root_pid]
        while stack:
            for child in children.get(stack.pop(), []):
                self.sessions.add(table[child][1])
                stack.append(child)

    def members(self) -> list[int]:
        """Live pids in the recorded sessions, ascending."""
        return sorted(pid for pid, (_, sid) in _process_table().items() if sid in self.sessions)

    def _signal_groups(self, sig: int, sessions: set[int]) -> None:
        for sid in sessions:
            try:
                os.killpg(sid, sig)  # a session leader's group id is its pid
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, popen: subprocess.Popen | None = None, grace_s: float = STOP_GRACE_S) -> list[int]:
        """Stop every process of the tree: SIGTERM to the root's group (the launcher stops its
        workers itself, which then record that they were interrupted) or, with the root gone, to
        every session's group; up to ``grace_s`` seconds; then SIGKILL to whatever is left. Reaps
        ``popen`` (the root).

        Returns:
            pids still alive afterwards (empty unless a process cannot be killed).
        """
        self.refresh()
        members = self.members()
        if members:
            root_alive = self.root_pid in members
            self._signal_groups(signal.SIGTERM, {self.root_pid} if root_alive else self.sessions)
            deadline = time.monotonic() + grace_s
            while self.members() and time.monotonic() < deadline:
                if popen is not None:
                    popen.poll()  # reap the root so it does not linger as a zombie
                time.sleep(0.1)
        left = self.members()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + KILL_WAIT_S
        while left and time.monotonic() < deadline:
            if popen is not None:
                popen.poll()
            time.sleep(0.05)
            left = self.members()
        if popen is not None:
            try:
                popen.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        return left


# ----------------------------------------------------------------------------------------------
# Launching and running
# ----------------------------------------------------------------------------------------------


def trial_argv(config_path: Path, run_dir: Path, nproc_per_node: int, *, evaluate: bool) -> list[str]:
    """The trial's command: the parent-death wrapper (:func:`trainer.contract.command_stopping_with_parent`) around
    ``python -m trainer --nproc-per-node N --config C --out RUN --quiet [--no-eval]``
    (:func:`trainer.contract.trainer_argv`)."""
    return command_stopping_with_parent(trainer_argv(nproc_per_node=nproc_per_node, config=config_path, out=run_dir,
                                                     quiet=True, evaluate=evaluate))


@dataclasses.dataclass(frozen=True)
class TrialLaunch:
    """What to start and how long to let it run.

    Attributes:
        argv: the command (see :func:`trial_argv`).
        env: the complete environment of the launcher.
        run_dir: the trainer's run directory (``--out``).
        log_path: file for the launcher's stdout and stderr.
        world_size: the trial's ranks (their logs are ``RunDir.log_path(rank)``).
        timeout_s: wall-clock seconds after which the trial is killed as hung.
        poll_s: seconds between looks at the process and ``metrics.jsonl``.
    """

    argv: list[str]
    env: Mapping[str, str]
    run_dir: Path
    log_path: Path
    world_size: int
    timeout_s: float
    poll_s: float = 0.5


@dataclasses.dataclass
class TrialRun:
    """How a trial's processes ended.

    Attributes:
        outcome: ``"completed"``, ``"pruned"`` or ``"failed"``.
        reason: why it was pruned or failed ("" when completed).
        returncode: the launcher's exit status (negative: killed by that signal), None if unknown.
        duration_s: wall-clock seconds from launch to the end of the stop.
        records: rank 0's metrics records.
        status: the run's ``status.json``, or None.
        leftover_pids: trial processes still alive after the stop (should be empty).
        infrastructure: a failure for the host's reasons, not the settings' (:func:`infrastructure_cause`).
    """

    outcome: str
    reason: str
    returncode: int | None
    duration_s: float
    records: list[dict[str, Any]]
    status: dict[str, Any] | None
    leftover_pids: list[int]
    infrastructure: bool = False


def _read_records(run_dir: RunDir) -> list[dict[str, Any]]:
    try:
        return read_metrics(run_dir.metrics_path(0))
    except MetricsError:
        return []  # not written yet (or being written): try again at the next poll


def run_trial(launch: TrialLaunch, on_progress: Callable[[list[dict[str, Any]]], str | None] | None = None,
              stop: threading.Event | None = None) -> TrialRun:
    """Run one trial to its end and stop its whole process tree.

    Args:
        launch: the command, environment, run directory, log file and timeout.
        on_progress: called with rank 0's metrics records at every poll while the trial runs;
            returns a reason to prune the trial now (it is stopped), or None.
        stop: when set (from another thread: the caller's Ctrl-C), the trial is stopped at the next
            poll (SIGTERM: a one-process run keeps the model of its step under way) and ends as
            ``interrupted``.

    Returns:
        The :class:`TrialRun`. A ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM turned into one by the
        sweep) stops the tree before it propagates.
    """
    run_dir = RunDir(launch.run_dir)
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    outcome = reason = None
    with open(launch.log_path, "wb") as log:
        popen = subprocess.Popen(
            launch.argv, env=dict(launch.env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tree = ProcessTree(popen.pid)
    try:
        while popen.poll() is None:
            tree.refresh()
            if stop is not None and stop.is_set():
                outcome, reason = "interrupted", "stopped by Ctrl-C"
                break
            if on_progress is not None:
                prune = on_progress(_read_records(run_dir))
                if prune:
                    outcome, reason = "pruned", prune
                    break
            elapsed = time.monotonic() - start
            if elapsed > launch.timeout_s:
                outcome = "failed"
                reason = (f"timeout: still running after {launch.timeout_s:g} s (budget.trial_timeout_s), "
                          f"killed as hung; log: {launch.log_path}")
                break
            try:  # the next look, or the launcher's exit, whichever comes first
                popen.wait(timeout=launch.poll_s)
            except subprocess.TimeoutExpired:
                pass
    finally:
        leftover = tree.stop(popen)
    records = _read_records(run_dir)
    status = run_dir.read_status()
    infrastructure = False
    if outcome is None:
        outcome, reason = classify_exit(popen.returncode, launch.log_path, run_dir, status, launch.world_size)
        cause = infrastructure_cause(popen.returncode, reason) if outcome == "failed" else None
        if cause is not None:
            infrastructure, reason = True, f"{reason} [{cause}]"
    return TrialRun(
        outcome=outcome,
        reason=reason or "",
        returncode=popen.returncode,
        duration_s=time.monotonic() - start,
        records=records,
        status=status,
        leftover_pids=leftover,
        infrastructure=infrastructure,
    )


# ----------------------------------------------------------------------------------------------
# Classification
# ----------------------------------------------------------------------------------------------


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


OUTSIDE_STOP_STATUSES = (128 + signal.SIGHUP, 128 + signal.SIGTERM)
"""Exit statuses of a launcher or trainer stopped by SIGHUP or SIGTERM (it stopped its ranks first)."""

#: Launcher messages of failures that come from the host, not from a trial's settings: a rank
#: killed by a signal from outside (an operator, the OOM killer, a scheduler's preemption), the
#: launcher itself signalled, a group that never formed, a port taken by another process.
_INFRASTRUCTURE = re.compile(
    r"was killed by SIG(?:KILL|TERM|HUP|INT|QUIT)\b|the launcher received SIG|rendezvous at \S+ failed"
    r"|cannot open a TCP socket|address already in use", re.IGNORECASE)


def infrastructure_cause(returncode: int | None, reason: str) -> str | None:
    """Why a failed trial (its launcher's exit status and recorded reason) failed for the host's
    reasons and should run again, or None when the failure may be its settings' (a crash, an NCCL
    error, out of memory, divergence, a hang).

    Returns:
        A few words for the trial's reason: "killed from outside" or "launch error".
    """
    if returncode is not None and (returncode < 0 or returncode in OUTSIDE_STOP_STATUSES):
        return "killed from outside"  # the launcher itself (SIGKILL; SIGTERM or SIGHUP, which it passes on to its
        # ranks before it exits 128 + the signal); the sweep's own stops never get here
    found = _INFRASTRUCTURE.search(reason)
    if found is None:
        return None
    return "killed from outside" if "SIG" in found.group(0).upper() else "launch error"


def classify_exit(
    returncode: int | None, log_path: Path, run_dir: RunDir, status: Mapping[str, Any] | None, world_size: int
) -> tuple[str, str]:
    """Outcome and reason of a trial whose launcher exited by itself.

    Args:
        returncode: the launcher's exit status.
        log_path: the launcher's log (its last ``error:`` line names the failed rank and cause).
        run_dir: the run directory (rank logs are searched for "out of memory" and NCCL errors).
        status: the run's ``status.json`` or None.
        world_size: the trial's ranks.

    Returns:
        ``("completed", "")``, ``("failed", "diverged: ...")``, ``("failed", "out of memory: ...")``,
        ``("failed", "NCCL error: ...")`` or ``("failed", "crash (exit status N): ...")``.
    """
    if returncode == 0 and is_completed(status):
        return "completed", ""
    if is_diverged(status):
        return "failed", f"diverged: {status.get(REASON_KEY) or 'a NaN or infinite loss or parameter'}; log: {log_path}"
    launcher_text = _tail(log_path)
    message = error_or_last_line(launcher_text) or "no output"
    rank_texts = [_tail(run_dir.log_path(rank)) for rank in range(world_size)]
    if returncode == 0:
        return "failed", f"the launcher exited 0 but status.json says {state_of(status)!r}; log: {log_path}"
    if returncode in OUTSIDE_STOP_STATUSES:
        name = signal.Signals(returncode - 128).name
        return "failed", f"stopped by {name} from outside the sweep (exit status {returncode}); log: {log_path}"
    if _OOM.search(message) or any(_OOM.search(t) for t in rank_texts):
        return "failed", f"out of memory: {message}"
    if _NCCL_ERROR.search(message) or any(_NCCL_ERROR.search(t) for t in rank_texts):
        return "failed", f"NCCL error: {message}"
    return "failed", f"crash (exit status {returncode}): {message}"


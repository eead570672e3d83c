"""What ``ngptune train`` says when the trainer it started is killed by a signal it cannot catch.

A trainer killed by SIGKILL (the kernel's out-of-memory killer, ``kill -9``) or by a crash signal
ends without a word and leaves its ``status.json`` saying ``running``. The driver outlives it, so
it says what happened in one ``error:`` line (:func:`killed_line`): which process (the trainer, or
the launcher of its ranks) was killed by which signal, where the run's records or logs are, its
newest complete snapshot or checkpoint and the command line that continues the run
(:func:`trainer.contract.resume_lines`); and it marks the run ``failed`` when its status still says
``running`` from a process that no longer exists (:func:`mark_killed`).

The run folder is ``--out``; without it, the folder of ``runs/`` whose ``status.json`` names the
killed process, else the one written last since the trainer started.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

from trainer.contract import (
    PID_KEY, RunDir, default_run_dir, failed_fields, newest_model, resume_lines, stale_pid,
)

__all__ = ["find_run_folder", "killed_line", "mark_killed", "signal_name"]


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def find_run_folder(out: Path | None, pid: int, since_unix_s: float) -> RunDir | None:
    """The run folder of the trainer process ``pid`` started at ``since_unix_s`` (``time.time()``):
    ``out`` when given (and it exists); else the folder of ``runs/`` (the trainer's default place,
    :func:`trainer.contract.default_run_dir`) whose ``status.json`` was written by ``pid``, else
    the one changed last since ``since_unix_s``; None when there is none."""
    if out is not None:
        return RunDir(out) if Path(out).is_dir() else None
    parent = default_run_dir(Path("scene")).parent
    folders = [RunDir(p) for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    for run in folders:
        if (run.read_status() or {}).get(PID_KEY) == pid:
            return run
    recent = [(run.root.stat().st_mtime, str(run.root), run) for run in folders
              if run.root.stat().st_mtime >= since_unix_s]
    return max(recent)[2] if recent else None


def mark_killed(run: RunDir, reason: str) -> bool:
    """Write ``status.json`` of ``run`` as failed for ``reason`` when it still says ``running``
    from a process that no longer exists on this host (:func:`trainer.contract.stale_pid`);
    returns whether it did. A status whose process lives on (a rank still stopping) is left to
    that process."""
    status = run.read_status()
    if status is None or stale_pid(status) is None:
        return False
    status.update(failed_fields(reason))
    run.write_json(run.status_path, status)
    return True


def killed_line(pid: int, signum: int, run: RunDir | None, nproc_per_node: int | None,
                flags: Sequence[str] = ()) -> str:
    """The message of the ``error:`` line after the trainer process ``pid`` (the launcher of
    ``nproc_per_node`` ranks per node when given) was ended by signal ``signum``: what was killed,
    by which signal, the run's status, records or logs, newest model and how to continue (one
    line, parts joined by ``; ``); the command that continues the run repeats ``flags``
    (:func:`trainer.contract.resume_flags` of the trainer's command line). Marks the run failed
    (:func:`mark_killed`)."""
    launched = nproc_per_node is not None
    who = f"the launcher of the ranks (process {pid})" if launched else f"the trainer (process {pid})"
    name = signal_name(signum)
    parts = [f"{who} was killed by {name}, not stopped by ngptune"]
    if signum == signal.SIGKILL:
        parts[0] += " (the kernel's out-of-memory killer sends SIGKILL: `dmesg` names what it killed)"
    if run is None:
        parts.append("it wrote no run folder")
        return "; ".join(parts)
    if mark_killed(run, f"process {pid} was killed by {name}"):  # no bracket: readers show it inside theirs
        parts.append(f"{run.status_path} now says failed")
    if launched:
        parts.append(f"each rank's log: {run.logs_dir}/rank<R>.log")
    else:
        parts.append(f"its output is above, its records in {run.metrics_path(0)}")
    parts += resume_lines(run, newest_model(run), nproc_per_node or 1, flags)
    return "; ".join(parts)

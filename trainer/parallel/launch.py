"""Starting the ranks of a distributed job, watching them, and reporting failures.

:func:`launch_workers` is what ``torchrun`` does, called from Python: it starts
``nproc_per_node`` worker processes with the ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` ...
variables that :func:`~trainer.parallel.dist_env.detect_dist_env` reads, watches them, and when
one fails stops the survivors (SIGTERM, then SIGKILL) and reports which rank failed and why.

* One node without restarts (the common case): the ranks are plain child processes
  (:mod:`trainer.parallel.local_launch`) and the launching process never imports torch; rank 0
  hosts the rendezvous store on a port this process picked (and, when another process took that
  port first, the ranks start again on a new one).
* Several nodes, or ``max_restarts`` > 0: a
  :class:`~torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent` (through
  ``torch.distributed.launcher.api.launch_agent``) forms a c10d rendezvous and restarts the whole
  group up to ``max_restarts`` times when one rank fails.

Each worker is ``python -u -m trainer.parallel.launch --run-dir RUN_DIR --parent-pid PID --
<argv_for_worker>``: this module's own ``__main__`` makes the worker stop when the launcher
process ``PID`` dies (:func:`trainer.contract.lifeline.stop_with_parent`: a launcher killed with SIGKILL
cannot stop its ranks itself), sends the worker's stdout and stderr to
``RUN_DIR/logs/rank<R>.log`` (:meth:`trainer.contract.rundir.RunDir.log_path`; truncated on the first
attempt, appended to on restarts), then runs ``<argv_for_worker>`` (``-m MODULE ARGS`` or
``SCRIPT ARGS``) in the same interpreter under torch elastic's ``@record``, so an uncaught
exception reaches the launcher through the worker's error file.

A failed job raises :class:`WorkersFailed` (a :class:`~trainer.contract.errors.LaunchError`) with a
one-line message naming the root-cause rank and what happened to it (the exception, the
signal, or the exit code), e.g. ``rank 1 ran out of memory (OutOfMemoryError: CUDA out of
memory. Tried to allocate 2.00 GiB); also failed: rank 0 (stopped by the launcher, SIGTERM);
log: runs/x/logs/rank1.log``; the last lines of that rank's log are printed to stderr and kept in
the exception, and ``RUN_DIR/status.json`` gets ``state = "failed"``, that message as ``reason``,
``failed_rank`` and ``failed_log``. Survivors blocked in a collective are stopped by the launcher at once; a rank that
hangs is bounded by the collective timeout of its peers (``distributed.timeout_s``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
import os
import re
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from trainer.contract.errors import LaunchError
from trainer.contract.lifeline import stop_with_parent
from trainer.parallel.local_launch import LauncherSignalled, run_ranks
from trainer.parallel.ports import check_port_free, free_port
from trainer.contract.rundir import RunDir
from trainer.contract.textlines import CONSOLE_PREFIX_ENV
from trainer.contract.runstatus import DIVERGED, STATE_KEY, error_or_last_line, failed_fields, is_diverged, strip_rank_prefix

__all__ = ["RankFailure", "RanksStopped", "WorkersFailed", "launch_workers", "tail_lines"]

LOG_TAIL_LINES = 20  # lines of the failed rank's log printed and kept in the exception
SHUTDOWN_GRACE_S = 5  # seconds between SIGTERM and SIGKILL when the agent stops survivors
PORT_ATTEMPTS = 3  # one-node launches: starts of the ranks on a fresh port when rank 0 lost the one it got
# What rank 0 says when its rendezvous port was bound by another process first (torch's TCPStore).
_PORT_TAKEN_TEXT = ("EADDRINUSE", "address already in use", "Address already in use")

# Exceptions a rank raises because a peer died or stalled: a consequence, not a root cause.
_COLLATERAL_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError")
# ... and what gloo says (as a RuntimeError) when the peer's connection drops.
_COLLATERAL_TEXT = ("Connection closed by peer", "Connection reset by peer", "remote worker")
# What gloo and NCCL say when a collective waited longer than distributed.timeout_s for a peer.
_TIMEOUT_TEXT = ("Timed out waiting", "timed out waiting", "Watchdog caught collective operation timeout",
                 "collective operation timeout")
# Signals the agent itself sends to survivors when it stops a failed group.
_SHUTDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
# ... and the exit codes of a worker that caught one and exited by itself (128 + signal number).
_SHUTDOWN_EXIT_CODES = {128 + signal.SIGTERM: "SIGTERM", 128 + signal.SIGINT: "SIGINT", 128 + signal.SIGHUP: "SIGHUP"}
# The last line of a Python traceback: ``package.module.ErrorType: message``.
_TRACEBACK_LAST_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$")


@dataclasses.dataclass(frozen=True)
class RankFailure:
    """How one rank of a failed worker group ended.

    Attributes:
        rank: global rank.
        local_rank: rank on this node.
        exitcode: the process's exit status; negative = killed by signal ``-exitcode``.
        signal: signal name (``"SIGKILL"``) when killed by a signal, else None.
        error: ``"ExcType: message"`` of the exception it raised (from its error file, else
            the last traceback line of its log), or None.
        log_path: the rank's log, ``RUN_DIR/logs/rank<R>.log``.
        log_tail: the last :data:`LOG_TAIL_LINES` lines of that log ("" if there is none).
    """

    rank: int
    local_rank: int
    exitcode: int
    signal: str | None
    error: str | None
    log_path: Path
    log_tail: str

    def describe(self) -> str:
        """One phrase: ``rank 1 ran out of memory (OutOfMemoryError: ...)``,
        ``rank 1 was killed by SIGKILL``, ``rank 0 raised ValueError: ...``,
        ``rank 2 exited with code 3``."""
        if self.error is not None:
            short = _shorten(self.error)
            if "OutOfMemoryError" in self.error.split(":", 1)[0] or "out of memory" in self.error:
                return f"rank {self.rank} ran out of memory ({short})"
            return f"rank {self.rank} raised {short}"
        if self.signal is not None:
            return f"rank {self.rank} was killed by {self.signal} (exit code {self.exitcode})"
        last = error_or_last_line(self.log_tail)
        tail = f": {_shorten(last)}" if last else ""
        return f"rank {self.rank} exited with code {self.exitcode}{tail}"

    @property
    def timed_out(self) -> bool:
        """Whether the rank gave up waiting for a peer in a collective (``distributed.timeout_s``)."""
        return self.error is not None and any(t in self.error for t in _TIMEOUT_TEXT)

    @property
    def stopped_alive(self) -> bool:
        """Whether the rank was still running when the agent stopped the group (SIGTERM, or the
        SIGKILL after the grace period): it neither failed nor finished by itself."""
        return self.signal in _SHUTDOWN_SIGNALS or (self.signal == "SIGKILL" and self.error is None)

    def brief(self) -> str:
        """A few words: ``stopped by the launcher``, ``SIGKILL``, ``RuntimeError``, ``exit code 2``."""
        if self.signal in _SHUTDOWN_SIGNALS:
            return f"stopped by the launcher, {self.signal}"
        if self.signal is not None:
            return self.signal
        if self.error is not None:
            return self.error.split(":", 1)[0].rsplit(".", 1)[-1]
        return f"exit code {self.exitcode}"

    @property
    def _severity(self) -> int:
        """0 = a root cause, 1 = likely a consequence of another rank's failure (a lost peer, a
        collective timeout), 2 = stopped by the agent."""
        if self.signal in _SHUTDOWN_SIGNALS:
            return 2
        if self.error is not None:
            kind = self.error.split(":", 1)[0].rsplit(".", 1)[-1]
            if kind in _COLLATERAL_ERRORS or any(t in self.error for t in _COLLATERAL_TEXT) or self.timed_out:
                return 1
            return 0
        return 0 if self.signal is not None else 1


class RanksStopped(LaunchError):
    """SIGTERM or SIGHUP reached the launcher while the ranks trained; they were stopped (each
    rank's end is in its log).

    Attributes:
        signal_name: ``"SIGTERM"`` or ``"SIGHUP"``.
    """

    def __init__(self, signal_name: str, logs_dir: Path) -> None:
        super().__init__(f"the launcher received {signal_name}; workers in {logs_dir} were stopped")
        self.signal_name = signal_name


class WorkersFailed(LaunchError):
    """The worker group failed (after ``max_restarts`` restarts).

    Attributes:
        failures: every rank that did not exit cleanly, the root cause first (ranked: an
            exception or a signal of its own, before errors caused by a dead peer, before ranks
            the agent stopped; then by time and rank).
        root: ``failures[0]``.
    """

    def __init__(self, message: str, failures: tuple[RankFailure, ...]) -> None:
        super().__init__(message)
        self.failures = failures
        self.root = failures[0]


def tail_lines(path: Path, n: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last ``n`` lines of a text file (reading at most its last ``max_bytes``); "" if the
    file does not exist."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def _shorten(text: str) -> str:
    """The first non-empty line of ``text``, whole (an interface or file name at its end must
    survive into the failure message and a trial's recorded reason), blanks collapsed."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[0].split()) if lines else ""


def _error_from_log(tail: str) -> str | None:
    """The ``ExcType: message`` line a Python traceback ends with, if the log ends with one
    (torch.distributed's ``[rank<R>]:`` line prefix removed)."""
    lines = [strip_rank_prefix(line) for line in tail.splitlines()]
    if not any(line.startswith("Traceback (most recent call last)") for line in lines):
        return None
    for line in reversed(lines):
        m = _TRACEBACK_LAST_LINE.match(line.strip())
        if m:
            return m.group(1)
    return None


def _signal_name(exitcode: int) -> str | None:
    """``SIGKILL`` for a process killed by a signal (``exitcode`` < 0; ``signal N`` for one
    without a name), the shutdown signal a worker caught and exited with (128 + N), else None."""
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return _SHUTDOWN_EXIT_CODES.get(exitcode)


def _rank_failure(rank: int, local_rank: int, exitcode: int, recorded: str | None, run_dir: RunDir) -> RankFailure:
    """A :class:`RankFailure` from how the process ended: its exit status and the ``ExcType: text``
    its ``@record`` wrote to its error file (``recorded``; else the traceback at the end of its log)."""
    log_path = run_dir.log_path(rank)
    tail = tail_lines(log_path)
    error = recorded
    if error is None and exitcode > 0:
        error = _error_from_log(tail)
    return RankFailure(
        rank=rank,
        local_rank=local_rank,
        exitcode=exitcode,
        signal=_signal_name(exitcode),
        error=error,
        log_path=log_path,
        log_tail=tail,
    )


def _elastic_failure(rank: int, failure, run_dir: RunDir) -> RankFailure:
    """A :class:`RankFailure` from torch elastic's ``ProcessFailure``."""
    message = failure.message
    recorded = message["message"] if isinstance(message, dict) and isinstance(message.get("message"), str) else None
    return _rank_failure(rank, failure.local_rank, failure.exitcode, recorded, run_dir)


def _order_failures(failures: list[tuple[RankFailure, int]]) -> tuple[RankFailure, ...]:
    """Root cause first: by severity, then the worker's failure time (s), then rank.

    A collective timeout is a consequence too, of a rank that stopped answering: when the first
    failure is one and no rank failed by itself, the ranks that were still running when the agent
    stopped the group (hung, or stopped with SIGSTOP) come first.
    """
    ranked = [f for f, _ in sorted(failures, key=lambda ft: (ft[0]._severity, ft[1], ft[0].rank))]
    if ranked and ranked[0].timed_out and not any(f._severity == 0 and not f.stopped_alive for f in ranked):
        hung = [f for f in ranked if f.stopped_alive]
        ranked = hung + [f for f in ranked if not f.stopped_alive]
    return tuple(ranked)


def _failure_message(failures: tuple[RankFailure, ...], max_restarts: int) -> str:
    root = failures[0]
    parts = [root.describe()]
    waiting = [f for f in failures if f.timed_out]
    if root.stopped_alive and waiting:
        parts = [f"rank {root.rank} stopped responding (hung or stopped): rank {waiting[0].rank} timed out "
                 f"waiting for it in a collective (distributed.timeout_s; {_shorten(waiting[0].error or '')}); "
                 f"the launcher then stopped rank {root.rank} ({root.signal})"]
    others = [f"rank {f.rank} ({f.brief()})" for f in failures[1:5]]
    if others:
        more = f" and {len(failures) - 5} more" if len(failures) > 5 else ""
        parts.append(f"also failed: {', '.join(others)}{more}")
    if max_restarts:
        parts.append(f"after {max_restarts} restart{'s' if max_restarts > 1 else ''}")
    parts.append(f"log: {root.log_path}")
    return "; ".join(parts)


def _print_tail(failure: RankFailure) -> None:
    if not failure.log_tail:
        return
    rule = "-" * 20
    print(
        f"{rule} last lines of {failure.log_path} {rule}\n{failure.log_tail}\n{rule * 3}",
        file=sys.stderr,
        flush=True,
    )


def _record_failure(run_dir: RunDir, root: RankFailure, message: str) -> None:
    """Put the root cause into ``status.json``: what rank 0 wrote there says only how rank 0
    ended (often stopped by the launcher), not which rank failed first. A diverged job (rank 0
    said so, or the root cause is a ``DivergedError``) keeps the state ``diverged``."""
    status = run_dir.read_status() or {}
    diverged = is_diverged(status) or (root.error or "").startswith("DivergedError")
    status.update(failed_fields(message, failed_rank=root.rank, failed_log=str(root.log_path)))
    if diverged:
        status[STATE_KEY] = DIVERGED
    try:
        run_dir.write_json(run_dir.status_path, status)
    except OSError as exc:  # e.g. a full disk: the error the caller raises still names the rank
        print(f"warning: could not record the failure in {run_dir.status_path}: {exc}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Restore the caller's signal handlers afterwards: torch elastic installs its own for
    SIGTERM, SIGINT, SIGHUP and SIGQUIT and leaves them in place."""
    names = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    in_main = threading.current_thread() is threading.main_thread()
    saved = {n: signal.getsignal(getattr(signal, n)) for n in names if hasattr(signal, n)} if in_main else {}
    try:
        yield
    finally:
        for name, handler in saved.items():
            if handler is not None:
                signal.signal(getattr(signal, name), handler)


@contextlib.contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration (the workers inherit them); restore after,
    including variables torch elastic sets on its own (``TORCHELASTIC_SIGNALS_TO_HANDLE``)."""
    watched = set(updates) | {"TORCHELASTIC_SIGNALS_TO_HANDLE"}
    saved = {k: os.environ.get(k) for k in watched}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _check_worker_argv(argv: list[str]) -> None:
    if not argv:
        raise LaunchError("argv_for_worker: expected '-m MODULE ARGS...' or 'SCRIPT ARGS...', got []")
    if argv[0] == "-m":
        if len(argv) < 2 or not argv[1] or argv[1].startswith("-"):
            raise LaunchError(f"argv_for_worker: '-m' must be followed by a module name, got {argv[:2]}")
    elif argv[0].startswith("-"):
        raise LaunchError(
            f"argv_for_worker: expected '-m MODULE ARGS...' or 'SCRIPT ARGS...', got {argv[0]!r} first"
        )
    elif not Path(argv[0]).is_file():
        raise LaunchError(f"argv_for_worker: script {argv[0]!r} not found")


def _parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise LaunchError(f"rdzv_endpoint: expected HOST:PORT, got {endpoint!r}")
    return host.strip("[]"), int(port_text)


def _supported_launch_options(**options: object) -> dict[str, object]:
    """The subset of ``options`` this torch's ``LaunchConfig`` accepts (``shutdown_timeout``
    appeared after torch 2.11; older versions use their default grace period)."""
    from torch.distributed.launcher.api import LaunchConfig

    names = {f.name for f in dataclasses.fields(LaunchConfig)}
    return {k: v for k, v in options.items() if k in names}


def launch_workers(
    argv_for_worker: list[str],
    nproc_per_node: int,
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    max_restarts: int = 0,
    master_port: int = 0,
    timeout_s: float = 300,
    run_dir: Path,
    env_extra: dict[str, str] | None = None,
) -> int:
    """Run ``python <argv_for_worker>`` as ``nproc_per_node`` ranks on this node (torchrun).

    The workers find their rank with :func:`~trainer.parallel.dist_env.detect_dist_env` and
    join with :func:`~trainer.parallel.dist_env.init_distributed`. Their output goes to
    ``run_dir/logs/rank<R>.log``.

    Rendezvous: one node without restarts: rank 0 hosts the store (``env://``) on a port free
    when the ranks start (``master_port`` 0; started again on a new port, at most
    :data:`PORT_ATTEMPTS` times, when another process binds it before rank 0 does), this process
    loads no torch. Several nodes or restarts: torch elastic's c10d rendezvous, hosted in this
    process on node 0 (port 0 is bound by the kernel's choice); ``rdzv_endpoint`` ``HOST:PORT``
    names the store that node ``node_rank`` 0 hosts and the others join; global ranks are
    assigned by the rendezvous. A fixed port is checked first.

    Args:
        argv_for_worker: the interpreter arguments, ``["-m", "trainer", *args]`` or
            ``["script.py", *args]``.
        nproc_per_node: workers on this node (one per GPU).
        nnodes: nodes in the job.
        node_rank: this node's index; node 0 hosts the rendezvous store.
        rdzv_endpoint: ``HOST:PORT`` of the rendezvous store; required when ``nnodes`` > 1.
            Default for one node: ``127.0.0.1:<master_port>``.
        max_restarts: times the whole group is restarted after a failure (each restart
            re-runs the workers with ``TORCHELASTIC_RESTART_COUNT`` incremented; they resume
            from their newest checkpoint).
        master_port: ``distributed.master_port``; 0 = a free port chosen by the kernel.
        timeout_s: ``distributed.timeout_s``; bounds the rendezvous (s). The workers bound
            their collectives with the same value through ``init_distributed``.
        run_dir: the run directory (logs are written to ``logs/rank<R>.log``).
        env_extra: extra environment variables for the workers (e.g. ``NCCL_*`` settings
            under test). ``NCCL_NVLS_ENABLE=0`` and ``OMP_NUM_THREADS=1`` are added unless set.

    Returns:
        0 when every worker exited cleanly.

    Raises:
        LaunchError: a bad argument (naming it); the rendezvous port in use (before any worker
            starts); the rendezvous failing or timing out.
        WorkersFailed: a rank raised, was killed or exited non-zero and no restart was left;
            the message names the rank and the cause, its log tail is printed to stderr.
        RanksStopped: SIGTERM or SIGHUP reached this process; the ranks were stopped first.
        KeyboardInterrupt: SIGINT (Ctrl-C) reached this process; the ranks were stopped first.
    """
    argv = [str(a) for a in argv_for_worker]
    _check_worker_argv(argv)
    for name, value, lo in (("nproc_per_node", nproc_per_node, 1), ("nnodes", nnodes, 1),
                            ("node_rank", node_rank, 0), ("max_restarts", max_restarts, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise LaunchError(f"{name}: expected an integer >= {lo}, got {value!r}")
    if node_rank >= nnodes:
        raise LaunchError(f"node_rank: expected an integer < nnodes ({nnodes}), got {node_rank}")
    if not 0 <= master_port <= 65535:
        raise LaunchError(f"distributed.master_port: expected a port in [0, 65535], got {master_port}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) \
            or not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise LaunchError(f"distributed.timeout_s: expected a finite number of seconds > 0, got {timeout_s!r}")
    if rdzv_endpoint is None:
        if nnodes > 1:
            raise LaunchError(
                f"rdzv_endpoint: required with nnodes={nnodes} (HOST:PORT of node 0's rendezvous store)"
            )
        rdzv_endpoint = f"127.0.0.1:{master_port}"
    host, port = _parse_endpoint(rdzv_endpoint)
    is_host = node_rank == 0
    if is_host and port != 0:
        check_port_free(host, port)  # else c10d would silently join another job's store
    if nnodes > 1 and port == 0:
        raise LaunchError(
            f"rdzv_endpoint: a job of {nnodes} nodes needs a fixed port that every node knows, "
            f"got {rdzv_endpoint!r}"
        )

    rd = RunDir(run_dir).create()
    rd.logs_dir.mkdir(parents=True, exist_ok=True)
    worker_env = {"NCCL_NVLS_ENABLE": "0", "OMP_NUM_THREADS": "1"}
    worker_env = {k: v for k, v in worker_env.items() if k not in os.environ}
    worker_env.update(env_extra or {})
    entry_args = ["-u", "-m", "trainer.parallel.launch", "--run-dir", str(rd.root),
                  "--parent-pid", str(os.getpid()), "--", *argv]
    if nnodes == 1 and max_restarts == 0:
        _launch_local(entry_args, nproc_per_node, host=host, port=port, run_dir=rd, worker_env=worker_env)
    else:
        _launch_elastic(entry_args, nproc_per_node, nnodes=nnodes, is_host=is_host, host=host, port=port,
                        max_restarts=max_restarts, timeout_s=timeout_s, run_dir=rd, worker_env=worker_env)
    return 0


def _report_failures(found: list[tuple[RankFailure, float]], run_dir: RunDir, max_restarts: int) -> WorkersFailed:
    """The :class:`WorkersFailed` of a failed group (its message and order: module docstring), after
    printing the root cause's log tail and recording it in ``status.json``."""
    failures = _order_failures(found)
    _print_tail(failures[0])
    message = _failure_message(failures, max_restarts)
    _record_failure(run_dir, failures[0], message)
    return WorkersFailed(message, failures)


def _lost_the_port(failures: list[RankFailure]) -> bool:
    """Whether rank 0 failed because another process bound the rendezvous port first."""
    rank0 = [f for f in failures if f.rank == 0]
    if not rank0:
        return False
    text = f"{rank0[0].error or ''}\n{rank0[0].log_tail}"
    return any(t in text for t in _PORT_TAKEN_TEXT)


def _launch_local(entry_args: list[str], nproc_per_node: int, *, host: str, port: int, run_dir: RunDir,
                  worker_env: dict[str, str]) -> None:
    """One node, no restarts: the ranks as child processes of this one, which never imports torch
    (:func:`trainer.parallel.local_launch.run_ranks`). With ``port`` 0 a free port is picked; when
    another process binds it before rank 0 does, the ranks start again on a new one (at most
    :data:`PORT_ATTEMPTS` times)."""
    env = dict(os.environ)
    env.update(worker_env)
    run_id = uuid.uuid4().hex
    for attempt in range(1, PORT_ATTEMPTS + 1):
        master_port = port or free_port(host)
        try:
            exits = run_ranks([sys.executable, *entry_args], nproc_per_node, master_addr=host,
                              master_port=master_port, run_id=run_id, env=env, grace_s=SHUTDOWN_GRACE_S)
        except LauncherSignalled as exc:
            raise RanksStopped(exc.signal_name, run_dir.logs_dir) from None
        if not exits:
            return
        found = [(_rank_failure(e.rank, e.rank, e.exitcode, e.error, run_dir), e.time) for e in exits]
        if port == 0 and attempt < PORT_ATTEMPTS and _lost_the_port([f for f, _ in found]):
            print(f"warning: another process took port {master_port} before rank 0 could host the rendezvous "
                  f"there; starting the ranks again on another port", file=sys.stderr, flush=True)
            continue
        raise _report_failures(found, run_dir, 0) from None


def _launch_elastic(entry_args: list[str], nproc_per_node: int, *, nnodes: int, is_host: bool, host: str,
                    port: int, max_restarts: int, timeout_s: float, run_dir: RunDir,
                    worker_env: dict[str, str]) -> None:
    """Several nodes or restarts: torch elastic's agent in this process (module docstring)."""
    # Imported here: torch.distributed.elastic pulls in much of torch.distributed.
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, launch_agent

    rd = run_dir
    worker_env = dict(worker_env)
    if max_restarts > 0:
        # With the agent's store shared with the workers (torch's default), a restarted group
        # reads the previous attempt's gloo/NCCL addresses from it and fails to connect
        # (pytorch/pytorch#135712). Unshared, each rendezvous round gets a fresh store that
        # rank 0 hosts on a new port.
        worker_env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"

    timeout_int = max(1, int(round(timeout_s)))
    with (
        tempfile.TemporaryDirectory(prefix="ngptune-elastic-") as elastic_dir,
        _environ(worker_env),
        _signal_handlers_kept(),
    ):
        # torch elastic's per-attempt error files (how a worker's exception reaches us) live in
        # a temporary folder; the worker logs themselves go to the run directory.
        config = LaunchConfig(
            min_nodes=nnodes,
            max_nodes=nnodes,
            nproc_per_node=nproc_per_node,
            # every node of a job must name the same rendezvous; one node's job gets a fresh id
            run_id=f"ngptune-{host}-{port}" if nnodes > 1 else uuid.uuid4().hex,
            role="trainer",
            rdzv_endpoint=f"{host}:{port}",
            rdzv_backend="c10d",
            rdzv_configs={
                "timeout": timeout_int,  # the launcher's legacy key
                "join_timeout": timeout_int,  # what the c10d rendezvous handler reads
                "is_host": is_host,  # never fall back to joining a store we meant to host
                "read_timeout": max(60, timeout_int),
            },
            max_restarts=max_restarts,
            monitor_interval=0.1,
            start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=elastic_dir, redirects=Std.NONE, tee=Std.NONE),
            **_supported_launch_options(shutdown_timeout=SHUTDOWN_GRACE_S),
            local_addr=host if nnodes == 1 else None,  # None: this node's FQDN
        )
        try:
            launch_agent(config, sys.executable, entry_args)
        except ChildFailedError as exc:
            found = [
                (_elastic_failure(rank, failure, rd), failure.timestamp)
                for rank, failure in exc.failures.items()
            ]
            raise _report_failures(found, rd, max_restarts) from None
        except SignalException as exc:
            if exc.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None
            raise RanksStopped(exc.sigval.name, rd.logs_dir) from None
        except RendezvousError as exc:
            detail = _shorten(str(exc)) or (f"not all {nnodes} nodes joined (is every node started with the "
                                             f"same --rdzv-endpoint and --nnodes {nnodes}?)")
            raise LaunchError(
                f"rendezvous at {host}:{port} failed within {timeout_s:g} s "
                f"(distributed.timeout_s): {type(exc).__name__}: {detail}"
            ) from None


# --------------------------------------------------------------------------------------------
# The worker side: ``python -u -m trainer.parallel.launch --run-dir DIR [--parent-pid PID] -- ARGV``.
# --------------------------------------------------------------------------------------------


def _redirect_output(log_path: Path, restart_count: int) -> None:
    """Point file descriptors 1 and 2 (and so Python's sys.stdout / sys.stderr and any C/C++
    output) at ``log_path``: truncate on the first attempt, append on restarts."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if restart_count == 0 else 0)
    fd = os.open(log_path, flags, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _run_target(argv: list[str]) -> None:
    """Run ``-m MODULE ARGS`` or ``SCRIPT ARGS`` as ``__main__`` in this interpreter."""
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))
        runpy.run_path(argv[0], run_name="__main__")


def _worker_main(args: list[str]) -> int:
    parent_pid = None
    if len(args) >= 4 and args[2] == "--parent-pid" and args[3].isdigit():
        parent_pid = int(args[3])
        args = args[:2] + args[4:]
    if len(args) < 4 or args[0] != "--run-dir" or args[2] != "--":
        print("usage: python -m trainer.parallel.launch --run-dir DIR [--parent-pid PID] -- ARGV...", file=sys.stderr)
        return 2
    if "RANK" not in os.environ:
        print("trainer.parallel.launch: RANK is not set; start workers with launch_workers()", file=sys.stderr)
        return 2
    stop_with_parent(parent_pid)  # the launcher killed with SIGKILL leaves no orphaned ranks
    from trainer.parallel.dist_env import restart_count as elastic_restart_count

    rank = int(os.environ["RANK"])
    if rank != 0:  # only rank 0's lines are repeated, prefixed, on the launcher's console
        os.environ.pop(CONSOLE_PREFIX_ENV, None)
    restart_count = elastic_restart_count()
    _redirect_output(RunDir(Path(args[1])).log_path(rank), restart_count)
    print(
        f"=== rank {rank}/{os.environ.get('WORLD_SIZE')} local rank {os.environ.get('LOCAL_RANK')} "
        f"attempt {restart_count} pid {os.getpid()}: {' '.join(args[3:])}",
        flush=True,
    )
    from torch.distributed.elastic.multiprocessing.errors import record

    try:
        record(_run_target)(args[3:])
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    from trainer.parallel.dist_env import exit_without_teardown

    exit_without_teardown(0)  # finished: skip the teardown that can abort a gloo rank (see there)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))

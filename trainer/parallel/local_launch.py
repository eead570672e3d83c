"""Starting the ranks of a one-node job as plain child processes, without loading torch.

What torch elastic's agent does for one node and no restarts, in the standard library: start
``nproc_per_node`` processes with the variables ``torchrun`` gives its workers, watch them, and
when one fails stop the others (SIGTERM, then SIGKILL after a grace period). The launching
process never imports torch (importing it costs seconds, more on a loaded machine); the ranks
form their process group themselves: ``MASTER_ADDR`` / ``MASTER_PORT`` name the TCP store that
rank 0 hosts in ``init_process_group("env://")`` (``TORCHELASTIC_USE_AGENT_STORE=False``).

Each rank gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK=0``,
``GROUP_WORLD_SIZE=1``, ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``ROLE_NAME``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT=0``, ``TORCHELASTIC_MAX_RESTARTS=0``,
``TORCHELASTIC_RUN_ID`` and ``TORCHELASTIC_ERROR_FILE`` (where torch elastic's ``@record``
writes an uncaught exception, read back into :attr:`RankExit.error`). The ranks run in their own
session, as under torch elastic: a Ctrl-C on the terminal reaches the launcher, which passes it on
(SIGINT, so that each rank, rank 0's lines and ``status.json`` say interrupted, as after a Ctrl-C
of one process); SIGTERM or SIGHUP to the launcher stops them with SIGTERM (terminated).

:func:`trainer.parallel.launch.launch_workers` uses this for ``nnodes == 1`` and
``max_restarts == 0``, and reports the failures it returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = ["MONITOR_S", "LauncherSignalled", "RankExit", "rank_environment", "run_ranks"]

MONITOR_S = 0.1  # seconds between two looks at the ranks
_HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@dataclasses.dataclass(frozen=True)
class RankExit:
    """How one rank that did not exit cleanly ended.

    Attributes:
        rank: global (= local) rank.
        exitcode: the process's exit status; negative = killed by signal ``-exitcode``.
        error: ``"ExcType: message"`` of the uncaught exception its ``@record`` wrote to its
            error file, else None.
        time: wall-clock time (s since the epoch) it ended, or the error file's timestamp.
    """

    rank: int
    exitcode: int
    error: str | None
    time: float


class LauncherSignalled(Exception):
    """The launcher received SIGTERM or SIGHUP while the ranks ran; they were stopped.

    Attributes:
        signal_name: ``"SIGTERM"`` or ``"SIGHUP"``.
    """

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class _Stop(BaseException):
    """Raised in the main thread by the launcher's signal handlers."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def rank_environment(rank: int, world_size: int, *, master_addr: str, master_port: int, run_id: str,
                     error_file: Path) -> dict[str, str]:
    """The variables ``torchrun`` gives rank ``rank`` of a one-node job of ``world_size`` ranks
    (module docstring)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "trainer",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",  # rank 0 hosts the store
        "TORCHELASTIC_ERROR_FILE": str(error_file),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def _read_error(path: Path) -> tuple[str | None, float | None]:
    """(``"ExcType: message"``, timestamp) from a torch elastic error file, (None, None) without one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("message"), str):
        return None, None
    stamp = (message.get("extraInfo") or {}).get("timestamp")
    try:
        return message["message"], float(stamp)
    except (TypeError, ValueError):
        return message["message"], None


class _SignalsRaise:
    """In the main thread: SIGINT, SIGTERM and SIGHUP raise :class:`_Stop` while ``armed`` (once;
    later ones are ignored so that stopping the ranks finishes); the caller's handlers come back
    afterwards."""

    def __init__(self) -> None:
        self.saved: dict[int, object] = {}
        self.armed = False

    def __enter__(self) -> "_SignalsRaise":
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in _HANDLED_SIGNALS:
            if hasattr(signal, name):
                signum = getattr(signal, name)
                self.saved[signum] = signal.getsignal(signum)
                signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            raise _Stop(signum)

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self.saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def _stop(procs: Sequence[subprocess.Popen], grace_s: float,
          stop_signal: int = signal.SIGTERM) -> dict[int, float]:
    """``stop_signal`` (SIGTERM, or SIGINT after a Ctrl-C) to every rank still running, SIGKILL
    to those left after ``grace_s``; returns when each one ended (wall-clock s), by index."""
    ended: dict[int, float] = {}
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(stop_signal)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for i, p in enumerate(procs):
        p.wait()
        ended.setdefault(i, time.time())
    return ended


def _watch(procs: Sequence[subprocess.Popen], monitor_s: float) -> Iterator[tuple[int, int, float]]:
    """Yield (index, exit status, time) for each rank as it exits, until all have or one failed."""
    done: set[int] = set()
    while len(done) < len(procs):
        for i, p in enumerate(procs):
            if i not in done and p.poll() is not None:
                done.add(i)
                yield i, p.returncode, time.time()
                if p.returncode != 0:
                    return
        time.sleep(monitor_s)


def run_ranks(command: Sequence[str], nproc: int, *, master_addr: str, master_port: int, run_id: str,
              env: Mapping[str, str], grace_s: float, monitor_s: float = MONITOR_S) -> list[RankExit]:
    """Run ``command`` as ranks 0..``nproc`` - 1 of one node and wait for them.

    Args:
        command: the full command line of each rank (``[sys.executable, ...]``).
        nproc: ranks (>= 1).
        master_addr, master_port: where rank 0 hosts the rendezvous store.
        run_id: ``TORCHELASTIC_RUN_ID`` of the job.
        env: the ranks' base environment; the per-rank variables (:func:`rank_environment`) are
            added to it.
        grace_s: seconds between SIGTERM and SIGKILL when stopping ranks.
        monitor_s: seconds between two looks at the ranks.

    Returns:
        The ranks that did not exit cleanly, in rank order; [] when every rank exited with 0.
        When one rank fails the others are stopped (SIGTERM, then SIGKILL after ``grace_s``) and
        are in the list too, unless they had already finished cleanly.

    Raises:
        KeyboardInterrupt: SIGINT (Ctrl-C) reached the launcher; the ranks were stopped first
            (SIGINT passed on, then SIGKILL after ``grace_s``).
        LauncherSignalled: SIGTERM or SIGHUP reached the launcher; the ranks were stopped first
            (SIGTERM, then SIGKILL after ``grace_s``).
        OSError: a rank could not be started (those already started are stopped).
    """
    procs: list[subprocess.Popen] = []
    exits: dict[int, tuple[int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ngptune-ranks-") as error_dir, _SignalsRaise() as signals:
        error_files = [Path(error_dir) / f"rank{r}.json" for r in range(nproc)]
        try:
            try:
                signals.armed = True
                for rank in range(nproc):
                    rank_env = dict(env)
                    rank_env.update(rank_environment(rank, nproc, master_addr=master_addr, master_port=master_port,
                                                     run_id=run_id, error_file=error_files[rank]))
                    procs.append(subprocess.Popen(list(command), env=rank_env, stdin=subprocess.DEVNULL,
                                                  start_new_session=True))
                for i, code, when in _watch(procs, monitor_s):
                    exits[i] = (code, when)
            except _Stop as stop:
                signals.armed = False
                if stop.signum == signal.SIGINT:  # Ctrl-C: the ranks stop as interrupted, not terminated
                    _stop(procs, grace_s, signal.SIGINT)
                    raise KeyboardInterrupt from None
                _stop(procs, grace_s)
                raise LauncherSignalled(signal.Signals(stop.signum).name) from None
            except BaseException:
                signals.armed = False
                _stop(procs, grace_s)
                raise
            signals.armed = False
            if any(code != 0 for code, _ in exits.values()):
                for i, when in _stop(procs, grace_s).items():
                    if i not in exits:
                        exits[i] = (procs[i].returncode, when)
        finally:
            signals.armed = False
        failed = []
        for rank in sorted(exits):
            code, when = exits[rank]
            if code == 0:
                continue
            error, stamp = _read_error(error_files[rank])
            failed.append(RankExit(rank=rank, exitcode=code, error=error, time=stamp if stamp is not None else when))
        return failed

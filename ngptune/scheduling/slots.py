"""GPU slots shared by every job scheduler on one node: sweep trials and ``train-many`` jobs.

A *slot* is the set of GPUs one job runs on (``CUDA_VISIBLE_DEVICES`` of its process tree). Claims
live in a folder every scheduler process on the node sees (:func:`default_claims_dir`, or
``$NGPTUNE_GPU_CLAIMS_DIR``): one lock file per GPU *seat* — ``gpu<i>.seat<k>.json``, ``k <
trials_per_gpu`` — holding the pids (and their start times, so a reused pid never counts) of the
processes that keep it. A seat is busy while any of its processes lives (checked by process id in
``/proc``, never by name) and free when they are all gone, so the claim of a dead scheduler
releases itself. Every change of the folder happens under an exclusive ``flock`` of its
``claims.lock``, so two schedulers never take the same seat.

On a host without GPUs a slot is a set of processes with no devices: :class:`SlotPool` then only
limits how many jobs run at once (its ``capacity``).

Test-only: ``NGPTUNE_FAKE_GPUS=N`` makes :func:`visible_gpus` report GPUs ``0..N-1`` without CUDA,
so CPU tests can check that slots are disjoint, freed and reused. It changes nothing but the
device numbers handed out; do not set it outside tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from trainer.contract import ConfigError

__all__ = [
    "CLAIMS_DIR_ENV",
    "FAKE_GPUS_ENV",
    "Slot",
    "SlotPool",
    "default_claims_dir",
    "process_alive",
    "process_start_time",
    "slots_per_node",
    "visible_gpus",
]

FAKE_GPUS_ENV = "NGPTUNE_FAKE_GPUS"  # test-only: declare N GPUs without CUDA
CLAIMS_DIR_ENV = "NGPTUNE_GPU_CLAIMS_DIR"
POLL_S = 0.05  # seconds between looks for a free slot


def visible_gpus() -> list[int]:
    """Indices of the GPUs this process may use (``0..n-1`` of ``torch.cuda.device_count()``), or
    the test-only fake GPUs of ``$NGPTUNE_FAKE_GPUS``; empty on a host without GPUs.

    Counted by a trainer process (:func:`ngptune.processes.cuda_device_count`, without importing
    torch there on a CPU build), never by torch in this process.

    Raises:
        ConfigError: ``NGPTUNE_FAKE_GPUS`` is not an integer >= 0.
        LaunchError: the trainer's device tool failed.
    """
    fake = os.environ.get(FAKE_GPUS_ENV)
    if fake is not None:
        if not fake.strip().isdigit():
            raise ConfigError(f"{FAKE_GPUS_ENV}: expected an integer >= 0, got {fake!r}")
        return list(range(int(fake)))
    from ngptune.processes import cuda_device_count

    return list(range(cuda_device_count()))  # asked of a trainer process: the driver never loads torch


def default_claims_dir() -> Path:
    """``$NGPTUNE_GPU_CLAIMS_DIR``, else ``<tmp>/ngptune-gpu-claims-<uid>`` (one per user and node)."""
    found = os.environ.get(CLAIMS_DIR_ENV)
    return Path(found) if found else Path(tempfile.gettempdir()) / f"ngptune-gpu-claims-{os.getuid()}"


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field 22), or None
    when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode("ascii", errors="replace").rpartition(")")[2].split()
    except OSError:
        return None
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_alive(pid: int, start_time: int | None) -> bool:
    """Whether process ``pid`` lives and (when ``start_time`` is given) is the same process."""
    now = process_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


def slots_per_node(n_gpus: int, gpus_per_slot: int, per_gpu: int = 1) -> int:
    """How many slots of ``gpus_per_slot`` GPUs fit at once: ``n_gpus * per_gpu // gpus_per_slot``
    (1 on a host without GPUs)."""
    return max(1, n_gpus * per_gpu // gpus_per_slot) if n_gpus else 1


@dataclasses.dataclass
class Slot:
    """GPUs held by one job.

    Attributes:
        gpus: device indices (empty on a host without GPUs).
        seats: the lock files held, one per GPU.
    """

    gpus: list[int]
    seats: list[Path]

    @property
    def visible_devices(self) -> str:
        """The value of ``CUDA_VISIBLE_DEVICES`` for the job ("" when there are no GPUs)."""
        return ",".join(map(str, self.gpus))

    def env(self, base: dict[str, str] | os._Environ) -> dict[str, str]:
        """``base`` with ``CUDA_VISIBLE_DEVICES`` set to the slot's GPUs (unchanged without GPUs)."""
        env = dict(base)
        env.pop(FAKE_GPUS_ENV, None)  # the job sees only its own devices
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_devices
        return env


class SlotPool:
    """Claims slots of ``gpus_per_slot`` GPUs out of ``gpus`` (see the module docstring).

    Args:
        gpus: device indices to hand out (:func:`visible_gpus`); empty: process slots only.
        gpus_per_slot: GPUs per job (>= 1 when ``gpus`` is not empty).
        per_gpu: jobs that may share one GPU (>= 1).
        capacity: jobs this pool runs at once (default: :func:`slots_per_node`).
        claims_dir: the shared folder of lock files (default :func:`default_claims_dir`).

    Raises:
        ConfigError: ``gpus_per_slot`` is 0 or more than the GPUs (names ``--gpus-per-trial``-style
            ``flag``), or ``per_gpu`` < 1.
    """

    def __init__(self, gpus: Sequence[int], gpus_per_slot: int, *, per_gpu: int = 1, capacity: int | None = None,
                 claims_dir: Path | None = None, flag: str = "--gpus-per-job") -> None:
        if per_gpu < 1:
            raise ConfigError(f"--trials-per-gpu: expected an integer >= 1, got {per_gpu}")
        if gpus and not 1 <= gpus_per_slot <= len(gpus):
            raise ConfigError(f"{flag}: {gpus_per_slot} GPUs per job, but {len(gpus)} "
                              f"GPU{'s are' if len(gpus) != 1 else ' is'} visible (expected 1..{len(gpus)})")
        self.gpus = list(gpus)
        self.gpus_per_slot = gpus_per_slot if gpus else 0
        self.per_gpu = per_gpu
        self.capacity = capacity or slots_per_node(len(self.gpus), max(self.gpus_per_slot, 1), per_gpu)
        self.claims_dir = Path(claims_dir) if claims_dir is not None else default_claims_dir()
        self._running = 0
        self._cond = threading.Condition()

    # -------------------------------------------------------------------- the shared folder
    @contextlib.contextmanager
    def _folder_lock(self) -> Iterator[None]:
        self.claims_dir.mkdir(parents=True, exist_ok=True)
        with open(self.claims_dir / "claims.lock", "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _seat_path(self, gpu: int, seat: int) -> Path:
        return self.claims_dir / f"gpu{gpu}.seat{seat}.json"

    @staticmethod
    def _seat_busy(path: Path) -> bool:
        try:
            holders = json.loads(path.read_text())["holders"]
        except (OSError, ValueError, KeyError, TypeError):
            return False  # missing or unreadable (a writer died mid-write): free
        return any(process_alive(int(pid), start) for pid, start in holders)

    @staticmethod
    def _write_seat(path: Path, pids: Sequence[int]) -> None:
        holders = [[pid, process_start_time(pid)] for pid in pids]
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"holders": holders}))
        os.replace(tmp, path)

    def _try_claim(self, owner_pid: int) -> Slot | None:
        with self._folder_lock():
            free: dict[int, list[int]] = {}
            for gpu in self.gpus:
                seats = [k for k in range(self.per_gpu) if not self._seat_busy(self._seat_path(gpu, k))]
                if seats:
                    free[gpu] = seats
            if len(free) < self.gpus_per_slot:
                return None
            # the least shared GPUs first, lowest index on ties
            chosen = sorted(free, key=lambda g: (-len(free[g]), g))[: self.gpus_per_slot]
            seats = [self._seat_path(g, free[g][0]) for g in sorted(chosen)]
            for path in seats:
                self._write_seat(path, [owner_pid])
            return Slot(gpus=sorted(chosen), seats=seats)

    # -------------------------------------------------------------------- claims
    def claim(self, owner_pid: int | None = None, stop: threading.Event | None = None) -> Slot | None:
        """Wait for a free slot and claim it for ``owner_pid`` (default: this process).

        Returns:
            The :class:`Slot`, or None when ``stop`` was set while waiting.
        """
        owner_pid = owner_pid or os.getpid()
        with self._cond:
            while self._running >= self.capacity:
                if stop is not None and stop.is_set():
                    return None
                self._cond.wait(POLL_S)
            self._running += 1
        try:
            while True:
                slot = self._try_claim(owner_pid) if self.gpus else Slot(gpus=[], seats=[])
                if slot is not None:
                    return slot
                if stop is not None and stop.is_set():
                    self._give_back_capacity()
                    return None
                time.sleep(POLL_S)
        except BaseException:
            self._give_back_capacity()
            raise

    def _give_back_capacity(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def release(self, slot: Slot, leftover_pids: Sequence[int] = ()) -> None:
        """Free ``slot``; with ``leftover_pids`` (processes of the job still alive) its seats pass
        to them and stay busy until they are gone."""
        with self._folder_lock():
            for path in slot.seats:
                if leftover_pids:
                    self._write_seat(path, list(leftover_pids))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
        self._give_back_capacity()

    def busy_gpus(self) -> dict[int, int]:
        """GPU index → busy seats, as every scheduler on the node sees them now."""
        with self._folder_lock():
            return {g: sum(self._seat_busy(self._seat_path(g, k)) for k in range(self.per_gpu)) for g in self.gpus}

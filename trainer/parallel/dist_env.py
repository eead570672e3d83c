"""Where this process sits in a distributed job, and joining / leaving its process group.

:func:`detect_dist_env` reads what the launcher put in the environment, in this order:

1. torchrun / torch elastic (and :func:`trainer.parallel.launch.launch_workers`): ``RANK``,
   ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``.
2. SLURM ``srun``: ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``,
   ``SLURM_NTASKS_PER_NODE`` (else ``SLURM_TASKS_PER_NODE`` such as ``2(x3),1``), the master
   host from ``MASTER_ADDR``, else the first host of ``SLURM_STEP_NODELIST`` /
   ``SLURM_JOB_NODELIST`` (rank 0 runs there), else ``SLURM_LAUNCH_NODE_IPADDR``; the port from
   ``MASTER_PORT``, else ``distributed.master_port``, else a hash of ``SLURM_JOB_ID``
   (:func:`slurm_job_port`), so all tasks of one job agree on it without talking.
3. Neither: one process (world size 1).

The config's ``distributed`` block (``world_size``, ``master_addr``, ``master_port``,
``backend``) fills in what the launcher leaves out; a launcher's world size that contradicts
``distributed.world_size`` is a :class:`~trainer.contract.errors.ConfigError`.

Device: ``training.device`` ``auto``/``cuda`` → ``cuda:<local_rank>`` (``cuda:0`` when the
launcher shows each task a single GPU), ``cpu`` → ``cpu``. Backend ``auto`` → NCCL for a CUDA
device, gloo otherwise (DESIGN.md §3; :func:`~trainer.contract.backend.choose_backend`, the one place that rule lives;
:func:`~trainer.contract.backend.planned_backend` predicts it for a launcher before any rank starts).

Every wait in :func:`init_distributed` and in later collectives is bounded by
``distributed.timeout_s`` (the ``timeout`` of ``init_process_group``; gloo applies it to every
collective, NCCL's watchdog aborts a collective that exceeds it).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import zlib
from collections.abc import Mapping
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer.contract.config import TrainConfig
from trainer.contract.errors import ConfigError, LaunchError
from trainer.contract.backend import choose_backend, interconnect_env
from trainer.parallel.net_env import check_same_comm_env, check_socket_ifnames, comm_env
from trainer.parallel.ports import check_port_free, free_port

__all__ = [
    "DistEnv",
    "check_ranks_agree_on_comm_env",
    "visible_cuda_devices",
    "check_port_free",
    "detect_dist_env",
    "expand_hostlist",
    "expand_tasks_per_node",
    "find_launcher",
    "free_port",
    "init_distributed",
    "exit_without_teardown",
    "restart_count",
    "shutdown_distributed",
    "wait_for_peers",
    "slurm_job_port",
]


def visible_cuda_devices() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# Ports derived from SLURM_JOB_ID lie in [SLURM_PORT_BASE, SLURM_PORT_BASE + SLURM_PORT_SPAN):
# above the well-known and common service ports, below Linux's ephemeral range (32768-60999)
# so that no outgoing connection holds them by chance.
SLURM_PORT_BASE = 15000
SLURM_PORT_SPAN = 15000

# Environment variable NCCL reads at communicator creation; NVLink SHARP multicast stays off.
_NCCL_DEFAULTS = {"NCCL_NVLS_ENABLE": "0"}

@dataclasses.dataclass(frozen=True)
class DistEnv:
    """This process's place in the job.

    Attributes:
        rank: global rank in [0, world_size).
        local_rank: rank among the processes on this node, in [0, local_world_size).
        world_size: number of processes in the job (>= 1).
        local_world_size: number of processes on this node.
        master_addr: host of the rendezvous store (rank 0's node).
        master_port: TCP port of the rendezvous store (> 0 when world_size > 1).
        backend: ``"nccl"`` or ``"gloo"``.
        device: the device this rank computes on (``cuda:<i>`` or ``cpu``).
        launcher: who started the process: ``"torchrun"`` (torchrun / torch elastic, including
            :func:`~trainer.parallel.launch.launch_workers`), ``"slurm"`` or ``"none"``.
        emulate_interconnect: ``distributed.emulate_interconnect`` (NCCL variables set at
            :func:`init_distributed`).
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    backend: str
    device: torch.device
    launcher: str = "none"
    emulate_interconnect: str = "none"

    @property
    def is_distributed(self) -> bool:
        """True when there is more than one rank."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the rank that writes shared outputs)."""
        return self.rank == 0


# --------------------------------------------------------------------------------------------
# Reading the environment.
# --------------------------------------------------------------------------------------------


def find_launcher(environ: Mapping[str, str] | None = None) -> str:
    """Which launcher started this process, judged from its environment.

    Args:
        environ: the environment (default ``os.environ``).

    Returns:
        ``"torchrun"`` if ``RANK`` or ``WORLD_SIZE`` is set (torchrun, torch elastic,
        :func:`~trainer.parallel.launch.launch_workers`), else ``"slurm"`` if ``SLURM_PROCID``
        and ``SLURM_NTASKS`` are set (``srun``), else ``"none"``.
    """
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env:
        return "torchrun"
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return "slurm"
    return "none"


def _env_int(env: Mapping[str, str], name: str, *, lo: int) -> int:
    raw = env[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise LaunchError(f"environment variable {name}: expected an integer, got {raw!r}") from None
    if value < lo:
        raise LaunchError(f"environment variable {name}: expected an integer >= {lo}, got {value}")
    return value


def _env_port(env: Mapping[str, str], name: str) -> int:
    port = _env_int(env, name, lo=1)
    if port > 65535:
        raise LaunchError(f"environment variable {name}: expected a port in [1, 65535], got {port}")
    return port


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM host list such as ``node[01-03,07],gpu-a5``.

    Zero padding is kept (``n[08-10]`` → ``n08 n09 n10``); several bracket groups in one name
    expand as a product (``r[1-2]n[1-2]`` → ``r1n1 r1n2 r2n1 r2n2``), as ``scontrol show
    hostnames`` does.

    Args:
        hostlist: the compressed list (``SLURM_JOB_NODELIST``).

    Returns:
        The host names in order.

    Raises:
        LaunchError: for an empty list, an unbalanced bracket or a bad range, naming the list.
    """
    def bad(why: str) -> LaunchError:
        return LaunchError(f"SLURM host list {hostlist!r}: {why}")

    items, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise bad("nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise bad("']' without '['")
        elif ch == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    if depth != 0:
        raise bad("'[' without ']'")
    items.append(hostlist[start:])

    hosts: list[str] = []
    for item in items:
        item = item.strip()
        if not item:
            raise bad("empty host name")
        names = [""]
        for text, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            if not text and not group:
                continue
            choices = _expand_range_group(group, bad) if group else [""]
            names = [n + text + c for n in names for c in choices]
        hosts.extend(names)
    return hosts


def _expand_range_group(group: str, bad) -> list[str]:
    """``01-03,07`` → ``["01", "02", "03", "07"]`` (width of the lower bound kept)."""
    out = []
    for part in group.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise bad(f"bad range {part!r}")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise bad(f"range {part!r} runs backwards")
        out.extend(str(v).zfill(len(lo_text)) for v in range(lo, hi + 1))
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """Expand SLURM's tasks-per-node string, e.g. ``"2(x3),1"`` → ``[2, 2, 2, 1]``.

    Raises:
        LaunchError: if ``text`` is not of that form.
    """
    counts: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if m is None or int(m.group(1)) < 1:
            raise LaunchError(f"SLURM tasks per node {text!r}: cannot read {part!r}")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _first_host(hostlist: str) -> str:
    """The first host of a SLURM host list: ``scontrol show hostnames`` when available, else
    :func:`expand_hostlist`."""
    scontrol = shutil.which("scontrol")
    if scontrol is not None:
        try:
            done = subprocess.run(
                [scontrol, "show", "hostnames", hostlist],
                capture_output=True, text=True, timeout=10, check=True,
            )
            lines = done.stdout.split()
            if lines:
                return lines[0]
        except (OSError, subprocess.SubprocessError):
            pass  # fall back to our own parser
    return expand_hostlist(hostlist)[0]


def slurm_job_port(job_id: str) -> int:
    """The rendezvous port every task of SLURM job ``job_id`` derives on its own.

    ``SLURM_PORT_BASE + crc32(job_id) mod SLURM_PORT_SPAN``: stable across tasks and nodes,
    different for most concurrent jobs, below the ephemeral port range.

    Returns:
        A port in [15000, 30000).
    """
    return SLURM_PORT_BASE + zlib.crc32(job_id.encode("utf-8")) % SLURM_PORT_SPAN


def _from_torchrun(env: Mapping[str, str], cfg: TrainConfig) -> tuple[int, int, int, int, str, int]:
    rank = _env_int(env, "RANK", lo=0) if "RANK" in env else None
    world_size = _env_int(env, "WORLD_SIZE", lo=1) if "WORLD_SIZE" in env else None
    if rank is None:
        raise LaunchError("environment variable WORLD_SIZE is set but RANK is not")
    if world_size is None:
        world_size = cfg.distributed.world_size
        if world_size is None:
            raise LaunchError(
                "environment variable RANK is set but WORLD_SIZE is not, and "
                "distributed.world_size is null; set one of them"
            )
    local_rank = _env_int(env, "LOCAL_RANK", lo=0) if "LOCAL_RANK" in env else rank
    local_world_size = (
        _env_int(env, "LOCAL_WORLD_SIZE", lo=1) if "LOCAL_WORLD_SIZE" in env else world_size
    )
    addr = env.get("MASTER_ADDR", "").strip() or cfg.distributed.master_addr
    port = _env_port(env, "MASTER_PORT") if "MASTER_PORT" in env else cfg.distributed.master_port
    return rank, local_rank, world_size, local_world_size, addr, port


def _from_slurm(env: Mapping[str, str], cfg: TrainConfig) -> tuple[int, int, int, int, str, int]:
    rank = _env_int(env, "SLURM_PROCID", lo=0)
    world_size = _env_int(env, "SLURM_NTASKS", lo=1)
    local_rank = _env_int(env, "SLURM_LOCALID", lo=0) if "SLURM_LOCALID" in env else 0
    if "SLURM_NTASKS_PER_NODE" in env:
        local_world_size = _env_int(env, "SLURM_NTASKS_PER_NODE", lo=1)
    elif "SLURM_TASKS_PER_NODE" in env:
        per_node = expand_tasks_per_node(env["SLURM_TASKS_PER_NODE"])
        node = _env_int(env, "SLURM_NODEID", lo=0) if "SLURM_NODEID" in env else 0
        if node >= len(per_node):
            raise LaunchError(
                f"environment variable SLURM_NODEID: node {node} is not in "
                f"SLURM_TASKS_PER_NODE={env['SLURM_TASKS_PER_NODE']!r}"
            )
        local_world_size = per_node[node]
    else:
        local_world_size = world_size

    addr = env.get("MASTER_ADDR", "").strip()
    if not addr:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if nodelist:
            addr = _first_host(nodelist)
        else:
            addr = env.get("SLURM_LAUNCH_NODE_IPADDR", "").strip() or cfg.distributed.master_addr
    if "MASTER_PORT" in env:
        port = _env_port(env, "MASTER_PORT")
    elif cfg.distributed.master_port != 0:
        port = cfg.distributed.master_port
    elif env.get("SLURM_JOB_ID"):
        port = slurm_job_port(env["SLURM_JOB_ID"])
    else:
        port = 0
    return rank, local_rank, world_size, local_world_size, addr, port


def _resolve_device(cfg: TrainConfig, local_rank: int, local_world_size: int,
                    world_size: int, cuda_device_count: int) -> torch.device:
    name = cfg.training.device
    if name == "cpu" or (name == "auto" and cuda_device_count == 0):
        return torch.device("cpu")
    if cuda_device_count == 0:
        raise ConfigError(f"training.device: {name!r} requested but no CUDA device is available")
    if name.startswith("cuda:"):
        if world_size > 1:
            raise ConfigError(
                f"training.device: {name!r} would put every rank on one GPU; use 'cuda' or "
                f"'auto' (rank r then uses cuda:<local rank>)"
            )
        index = int(name.split(":")[1])
        if index >= cuda_device_count:
            raise ConfigError(
                f"training.device: {name!r} requested but only {cuda_device_count} CUDA "
                f"device(s) are visible"
            )
        return torch.device(name)
    # "auto" or "cuda": one GPU per local rank.
    if cuda_device_count >= local_world_size:
        return torch.device(f"cuda:{local_rank}")
    if cuda_device_count == 1:  # the launcher shows each task only its own GPU
        return torch.device("cuda:0")
    raise LaunchError(
        f"{local_world_size} processes on this node but only {cuda_device_count} CUDA devices "
        f"are visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
        f"start at most {cuda_device_count} processes per node"
    )


def _resolve_backend(cfg: TrainConfig, device: torch.device) -> str:
    backend = choose_backend(cfg.distributed.backend, on_cuda=device.type == "cuda")
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError(
            f"distributed.backend: 'nccl' needs CUDA tensors but training.device resolves to "
            f"{device.type!r}; use 'gloo' or 'auto'"
        )
    return backend


def detect_dist_env(
    cfg: TrainConfig,
    *,
    environ: Mapping[str, str] | None = None,
    cuda_device_count: int | None = None,
) -> DistEnv:
    """This process's rank, world size, rendezvous address, backend and device.

    Sources in order: torchrun / torch elastic variables, SLURM variables, else one process;
    the ``distributed`` block fills in what the launcher leaves out (see the module docstring).

    Args:
        cfg: the trainer config (``distributed`` and ``training.device`` are read).
        environ: the environment to read (default ``os.environ``; tests pass a dict).
        cuda_device_count: visible CUDA devices (default ``torch.cuda.device_count()``).

    Returns:
        The :class:`DistEnv`. Nothing is initialised; call :func:`init_distributed`.

    Raises:
        ConfigError: ``"distributed.world_size: config says 3 but the launcher started 2
            processes"``; ``training.device`` / ``distributed.backend`` that cannot work here.
        LaunchError: a launcher variable that is not an integer or is out of range (naming
            it); ``distributed.world_size`` > 1 without any launcher; world size > 1 with no
            rendezvous port (``distributed.master_port`` 0 needs a launcher to pick one).
    """
    env = os.environ if environ is None else environ
    if cuda_device_count is None:
        cuda_device_count = torch.cuda.device_count()
    launcher = find_launcher(env)
    configured = cfg.distributed.world_size

    if launcher == "torchrun":
        rank, local_rank, world_size, local_world_size, addr, port = _from_torchrun(env, cfg)
    elif launcher == "slurm":
        rank, local_rank, world_size, local_world_size, addr, port = _from_slurm(env, cfg)
    else:
        if configured is not None and configured > 1:
            raise LaunchError(
                f"distributed.world_size: config says {configured} but this process was not "
                f"started by a launcher (torchrun, srun or ngptune's launcher); start it with "
                f"one, or set distributed.world_size to null or 1"
            )
        rank, local_rank, world_size, local_world_size = 0, 0, 1, 1
        addr, port = cfg.distributed.master_addr, cfg.distributed.master_port

    if configured is not None and configured != world_size:
        raise ConfigError(
            f"distributed.world_size: config says {configured} but the launcher started "
            f"{world_size} process{'es' if world_size != 1 else ''}"
        )
    if rank >= world_size:
        raise LaunchError(f"rank {rank} is not below the world size {world_size} ({launcher})")
    if local_rank >= local_world_size:
        raise LaunchError(
            f"local rank {local_rank} is not below the local world size {local_world_size} "
            f"({launcher})"
        )
    if world_size > 1 and port == 0:
        raise LaunchError(
            "distributed.master_port: 0 (automatic) needs a launcher that picks the port; "
            "the launcher gave none, so set a port"
        )
    device = _resolve_device(cfg, local_rank, local_world_size, world_size, cuda_device_count)
    backend = _resolve_backend(cfg, device)
    interconnect_env(cfg.distributed.emulate_interconnect, backend)  # rejects emulation on gloo
    return DistEnv(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        master_addr=addr,
        master_port=port,
        backend=backend,
        device=device,
        launcher=launcher,
        emulate_interconnect=cfg.distributed.emulate_interconnect,
    )


# --------------------------------------------------------------------------------------------
# The process group.
# --------------------------------------------------------------------------------------------


def init_distributed(env: DistEnv, timeout_s: float) -> None:
    """Join the job's process group (no-op for world size 1).

    Uses the ``env://`` rendezvous at ``env.master_addr:env.master_port`` (under torch elastic
    it connects to the agent's store; otherwise rank 0 hosts the store). For NCCL the rank's
    GPU is made current and ``NCCL_NVLS_ENABLE=0`` is set unless already in the environment.

    Args:
        env: from :func:`detect_dist_env`.
        timeout_s: ``distributed.timeout_s``; bounds the rendezvous and every later collective
            (``init_process_group(timeout=...)``), so no rank waits longer for a dead peer.

    Raises:
        LaunchError: rank 0's port is taken (outside torch elastic, where the agent owns it),
            or the group could not be formed within ``timeout_s`` (names the address, rank and
            the cause).
    """
    assert timeout_s > 0, "timeout_s must be positive"
    if env.world_size == 1:
        return
    assert not dist.is_initialized(), "init_distributed called twice"
    os.environ["MASTER_ADDR"] = env.master_addr
    os.environ["MASTER_PORT"] = str(env.master_port)
    under_elastic = "TORCHELASTIC_RUN_ID" in os.environ
    if env.rank == 0 and not under_elastic:
        check_port_free(env.master_addr, env.master_port)
    device_id = None
    if env.backend == "nccl":
        for key, value in _NCCL_DEFAULTS.items():
            os.environ.setdefault(key, value)
        os.environ.update(interconnect_env(env.emulate_interconnect, env.backend))
        torch.cuda.set_device(env.device)
        device_id = env.device
    check_socket_ifnames(os.environ)  # this host's interfaces: before a rendezvous that would fail on them
    try:
        dist.init_process_group(
            backend=env.backend,
            init_method="env://",
            rank=env.rank,
            world_size=env.world_size,
            timeout=timedelta(seconds=timeout_s),
            device_id=device_id,
        )
    except (RuntimeError, TimeoutError, ValueError) as exc:  # DistError is a RuntimeError
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = ""
        if restart_count() > 0 and os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
            hint = ("; a restarted group that shares torchrun's store reads the previous attempt's "
                    "addresses (pytorch/pytorch#135712): set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for "
                    "torchrun --max-restarts, or use ngptune train --max-restarts, which does")
        raise LaunchError(
            f"rank {env.rank} of {env.world_size} could not join the {env.backend} process group "
            f"at {env.master_addr}:{env.master_port} within {timeout_s:g} s "
            f"(distributed.timeout_s): {type(exc).__name__}: {first}{hint}"
        ) from exc
    check_ranks_agree_on_comm_env()


def check_ranks_agree_on_comm_env() -> None:
    """Gather every rank's ``NCCL_*`` / ``GLOO_*`` variables (over gloo, not through NCCL, whose
    collectives are what a mismatch can hang) and refuse the job on a difference, before the
    training's first collective.

    Raises:
        LaunchError: naming the variable and the ranks (:func:`~trainer.parallel.net_env.check_same_comm_env`).
    """
    group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    gathered: list[dict[str, str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, comm_env(os.environ), group=group)
    check_same_comm_env([g or {} for g in gathered])


def restart_count() -> int:
    """How many times the elastic agent restarted this worker group (``TORCHELASTIC_RESTART_COUNT``;
    0 outside torch elastic and on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def wait_for_peers(what: str = "the end of the run") -> None:
    """Barrier of every rank of the joined group (no-op without one), bounded by the group's timeout.

    Use it on the success path before :func:`shutdown_distributed`: a gloo rank that tears its
    group down while its peers still use their connections to it can die at interpreter exit with
    "terminate called without an active exception" (SIGABRT; seen in 4 of 8 three-rank resume
    tests without the barrier, 0 of 8 with it), which a launcher reports as a failed worker. Do not
    use it after a failure, where a peer may be gone and the barrier would only wait out the timeout.

    Raises:
        LaunchError: a peer rank did not arrive (it failed, was killed or timed out), naming this
            rank and the collective's first error line.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
    except (RuntimeError, TimeoutError) as exc:  # DistBackendError/DistError are RuntimeErrors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LaunchError(
            f"rank {dist.get_rank()} of {dist.get_world_size()}: a peer rank did not reach {what} "
            f"(it failed, was killed or exceeded distributed.timeout_s): {type(exc).__name__}: {first}"
        ) from exc


def shutdown_distributed(barrier: bool = False) -> None:
    """Leave the process group if one was joined (safe to call more than once).

    Args:
        barrier: :func:`wait_for_peers` first (its LaunchError propagates after the group is left).
    """
    if dist.is_available() and dist.is_initialized():
        try:
            if barrier:
                wait_for_peers()
        finally:
            dist.destroy_process_group()


def exit_without_teardown(code: int = 0) -> None:
    """Flush stdout/stderr and end this process now with ``code`` (``os._exit``), skipping the
    interpreter's teardown.

    For a rank that finished and left its group. Even after :func:`wait_for_peers` and
    ``destroy_process_group``, C++ objects of torch.distributed destroyed during teardown can still
    abort the process with "terminate called without an active exception" (SIGABRT; 1 run in 19 of
    a two-rank job under fault injection), which the launcher then reports as a failed rank
    although every file was written. Everything worth keeping is on disk by then (results,
    checkpoints and status are written atomically), so nothing is lost by skipping the rest.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing more to say
            pass
    os._exit(code)

"""The rules that tie a config to the number of ranks of a job (the world size W).

One place for them, run once in each process that starts or joins a job: the sweep before it
launches a trial, the launcher before any rank starts, each rank before it joins the process group
(:func:`check_world_size`). The config file itself is checked against its own
``distributed.world_size`` when it is read (:class:`~trainer.contract.config.TrainConfig`), by the
same functions.

* ``distributed.world_size``, when set, is the number of ranks started.
* Subgrid mode needs at least one box per rank: ``parallel.num_subgrids`` K ≥ W
  (:func:`check_boxes_per_rank`).
* ``distributed.gpu_capabilities[i].rank`` and every ``faults.ranks`` entry name a rank < W
  (:func:`check_rank_entries`).
* The ranks a launcher starts on one host fit it (:func:`check_ranks_per_node`): a CPU run at
  most one rank per core, a CUDA run at most one rank per visible GPU.

Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trainer.contract.errors import ConfigError

if TYPE_CHECKING:
    from trainer.contract.config import TrainConfig

__all__ = ["check_boxes_per_rank", "check_rank_entries", "check_ranks_per_node", "check_world_size"]


def check_boxes_per_rank(num_subgrids: int, world_size: int) -> None:
    """Subgrid mode gives every rank at least one box.

    Raises:
        ConfigError: ``parallel.num_subgrids: expected at least one box per rank (>= world size W)
            in subgrid mode, got K`` when K < W.
    """
    if num_subgrids < world_size:
        raise ConfigError(f"parallel.num_subgrids: expected at least one box per rank (>= world size "
                          f"{world_size}) in subgrid mode, got {num_subgrids}")


def check_rank_entries(key: str, ranks: Iterable[int], world_size: int) -> None:
    """Every rank named by the config entry ``key`` is below ``world_size``.

    Args:
        key: the dotted key as the error should name it, ``"faults.ranks[{i}]"`` or
            ``"distributed.gpu_capabilities[{i}].rank"`` (``{i}``: the entry's index).
        ranks: the ranks named, in the entries' order.

    Raises:
        ConfigError: ``<key>: expected a rank < world size (W), got R`` for the first entry at or
            above ``world_size``.
    """
    for i, rank in enumerate(ranks):
        if rank >= world_size:
            raise ConfigError(f"{key.format(i=i)}: expected a rank < world size ({world_size}), got {rank}")


def check_world_size(cfg: TrainConfig, world_size: int) -> None:
    """Check every setting that depends on the number of ranks against a job of ``world_size``.

    Raises:
        ConfigError: ``distributed.world_size`` set and different from ``world_size``;
            ``parallel.num_subgrids`` below ``world_size`` in subgrid mode; a
            ``distributed.gpu_capabilities`` or ``faults.ranks`` entry >= ``world_size`` (each
            names the key and the value).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"distributed.world_size: expected an integer >= 1, got {world_size!r}")
    configured = cfg.distributed.world_size
    if configured is not None and configured != world_size:
        raise ConfigError(f"distributed.world_size: config says {configured} but {world_size} process"
                          f"{'es' if world_size != 1 else ''} were started")
    if cfg.parallel.mode == "subgrid":
        check_boxes_per_rank(cfg.parallel.num_subgrids, world_size)
    check_rank_entries("distributed.gpu_capabilities[{i}].rank", (c.rank for c in cfg.distributed.gpu_capabilities),
                       world_size)
    check_rank_entries("faults.ranks[{i}]", cfg.faults.ranks, world_size)


def check_ranks_per_node(nproc_per_node: int, *, on_cpu: bool, cpu_cores: int, cuda_devices: int) -> None:
    """``--nproc-per-node`` ranks fit this host: on a CPU run at most ``cpu_cores`` (more ranks than
    cores only wait for each other), on CUDA at most ``cuda_devices`` (one GPU per rank).

    Raises:
        ConfigError: one line naming ``--nproc-per-node``, its value and the host's cores or GPUs.
    """
    if on_cpu and nproc_per_node > cpu_cores:
        raise ConfigError(f"--nproc-per-node {nproc_per_node}: this CPU run would start {nproc_per_node} ranks on "
                          f"{cpu_cores} CPU core{'s' if cpu_cores != 1 else ''}; expected at most {cpu_cores} "
                          "(one rank per core)")
    if not on_cpu and nproc_per_node > cuda_devices:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(f"--nproc-per-node {nproc_per_node}: expected at most {cuda_devices}, the CUDA "
                          f"device{'s' if cuda_devices != 1 else ''} visible on this host (one rank per GPU"
                          + (f"; CUDA_VISIBLE_DEVICES={visible}" if visible is not None else "") + ")")

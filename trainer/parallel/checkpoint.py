"""Sharded checkpoints of distributed runs (DESIGN.md §3 "Checkpoints and faults").

One checkpoint is a folder ``RUN_DIR/checkpoints/step_<NNNNNNN>/`` (:meth:`RunDir.checkpoints_dir`)::

    .metadata, __<r>_0.distcp   tensors, written by torch.distributed.checkpoint (DCP) from all
                                ranks together; a key held by several ranks (replicated: the
                                data-parallel model) is stored once, keys held by one rank (a
                                subgrid box) are stored by that rank
    rank<R>.pt                  per-rank plain state (random generator states), torch.save
    meta.json                   step, world size, config, balancer and batch-size state (rank 0)
    .complete                   empty marker, written last by rank 0 after every rank finished

A checkpoint is written into ``step_<N>.partial`` and renamed to ``step_<N>`` once complete, so a
crash during a save never touches an earlier complete checkpoint, even one of the same step (a
resumed or restarted run saving the step it resumed from). A folder without ``.complete`` (a crash
during the save) is never taken as newest (:func:`latest_checkpoint`); a complete ``.partial`` or
``.replaced`` folder (a crash between the two renames that put a new checkpoint in place of one of
the same step) still counts. Tensors are stored by name, so a run may load them with another world
size: each rank asks DCP for the keys it needs (:func:`load_tensors`).

Every collective here (DCP's plan exchange, the barriers) runs on the default process group and is
bounded by its timeout (``distributed.timeout_s``). Without an initialised process group (one
process) everything works locally.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.contract.errors import SnapshotError
from trainer.contract.rundir import (  # the listing is the layout's, torch-free (the driver reads it too)
    CHECKPOINT_NAME, CHECKPOINT_REPLACED, CHECKPOINT_STAGING, COMPLETE_MARKER, RunDir, atomic_write, atomic_write_text,
    checkpoint_step, latest_checkpoint, list_checkpoints,
)
from trainer.train.snapshot import OTHER_CONFIG_HINT, short_message

__all__ = [
    "COMPLETE_MARKER",
    "checkpoint_dir",
    "checkpoint_keys",
    "checkpoint_step",
    "damaged_shards",
    "latest_checkpoint",
    "list_checkpoints",
    "load_meta",
    "load_rank_state",
    "load_tensors",
    "prune_checkpoints",
    "save_checkpoint",
    "skipped_incomplete",
]

# Entries of meta.json every reader relies on, and their JSON types.
META_KEYS: dict[str, type] = {"step": int, "world_size": int, "mode": str, "scaler": dict, "trainer_state": dict}
_STEP_DIR, _STAGING, _REPLACED = CHECKPOINT_NAME, CHECKPOINT_STAGING, CHECKPOINT_REPLACED


def _dcp():
    """torch.distributed.checkpoint, imported on first use (its import takes seconds)."""
    import torch.distributed.checkpoint as dcp

    return dcp


# One process without a process group is a supported case here, not a mistake worth a warning.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def checkpoint_dir(run_dir: RunDir, step: int) -> Path:
    """``RUN_DIR/checkpoints/step_<step:07d>``."""
    return run_dir.checkpoints_dir / f"step_{step:07d}"


def skipped_incomplete(folder: Path) -> list[Path]:
    """Half-written checkpoint folders (no :data:`COMPLETE_MARKER`) of steps after ``folder``'s,
    beside it, oldest first: what a resume from ``folder`` passes over (a run stopped while
    writing them). Empty when ``folder``'s name carries no step."""
    step = checkpoint_step(folder)
    if step is None or not folder.parent.is_dir():
        return []
    newer = []
    for p in folder.parent.iterdir():
        other = checkpoint_step(p)
        if other is not None and other > step and p.is_dir() and not (p / COMPLETE_MARKER).is_file():
            newer.append((other, p.name, p))
    return [p for _, _, p in sorted(newer)]


def prune_checkpoints(checkpoints_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints, and half-written folders older
    than the newest complete one. Run it on one rank only.

    Returns:
        The folders removed.
    """
    assert keep >= 1, keep
    complete = list_checkpoints(checkpoints_dir)
    kept = {p for _, p in complete[-keep:]}
    removed = []
    if complete:
        oldest_kept, newest = complete[-keep:][0][0], complete[-1][0]
        for p in Path(checkpoints_dir).iterdir():
            m = _STEP_DIR.match(p.name)
            if not m or p in kept:
                continue
            step = int(m.group(1))
            complete_here = (p / COMPLETE_MARKER).is_file()
            # older than what is kept; or a half-written/superseded folder older than the newest
            if step < oldest_kept or (step < newest and not complete_here) or (step <= newest and m.group(2)):
                removed.append(p)
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def save_checkpoint(
    folder: Path,
    tensors: dict[str, torch.Tensor],
    rank_state: dict[str, Any],
    meta: dict[str, Any],
    *,
    rank: int,
) -> Path:
    """Write one checkpoint; a collective when a process group is initialised (every rank calls it).

    Order: rank 0 clears a stale ``<folder>.partial`` (left by a crash) → barrier → DCP save of
    ``tensors`` into it (all ranks) → each rank writes ``rank<R>.pt`` atomically → barrier → rank 0
    writes ``meta.json`` and the ``.complete`` marker, then renames it to ``folder`` (an existing
    ``folder`` is first renamed to ``<folder>.replaced`` and deleted after). A crash at any point
    leaves the earlier complete checkpoints, and a complete one of this step, usable.

    Args:
        folder: the checkpoint folder (:func:`checkpoint_dir`).
        tensors: name → tensor of this rank. Identical names on several ranks must hold identical
            values (stored once).
        rank_state: this rank's plain state (tensors, numbers, strings; ``weights_only`` loadable).
        meta: JSON-serialisable run state, taken from rank 0.
        rank: this process's rank.

    Returns:
        ``folder``.
    """
    folder = Path(folder)
    staging = folder.with_name(folder.name + _STAGING)
    if rank == 0:
        _settle_leftovers(folder)
    _barrier()
    staging.mkdir(parents=True, exist_ok=True)
    _dcp().save(tensors, checkpoint_id=str(staging))
    atomic_write(staging / f"rank{rank}.pt", lambda f: torch.save(rank_state, f))
    _barrier()
    if rank == 0:
        world_size = dist.get_world_size() if _distributed() else 1
        missing = [r for r in range(world_size) if not (staging / f"rank{r}.pt").is_file()]
        if missing:
            raise SnapshotError(
                f"{staging}: the files of rank(s) {missing} are not in this folder: every node must write the "
                "same run directory (--out on a file system all nodes share); the checkpoint is left incomplete"
            )
        atomic_write_text(staging / "meta.json", json.dumps(meta, indent=2) + "\n")
        atomic_write_text(staging / COMPLETE_MARKER, "")
        replaced = folder.with_name(folder.name + _REPLACED)
        if folder.exists():
            if replaced.exists():
                shutil.rmtree(replaced)
            folder.rename(replaced)
        staging.rename(folder)
        shutil.rmtree(replaced, ignore_errors=True)
    return folder


def _settle_leftovers(folder: Path) -> None:
    """Before a save into ``folder``: a crash may have left ``<folder>.partial`` and
    ``<folder>.replaced``. A complete one of them is the step's checkpoint when ``folder`` is gone,
    so it is renamed into place (never deleted); the rest, incomplete or superseded, is removed."""
    for suffix in (_STAGING, _REPLACED):
        left = folder.with_name(folder.name + suffix)
        if not left.exists():
            continue
        if not folder.exists() and (left / COMPLETE_MARKER).is_file():
            left.rename(folder)
        else:
            shutil.rmtree(left)


def _require_complete(folder: Path) -> Path:
    folder = Path(folder)
    if not (folder / COMPLETE_MARKER).is_file():
        raise SnapshotError(f"{folder}: not a complete checkpoint (no {COMPLETE_MARKER} marker)")
    return folder


def load_meta(folder: Path) -> dict[str, Any]:
    """``meta.json`` of a complete checkpoint.

    Raises:
        SnapshotError: the folder is not a complete checkpoint or ``meta.json`` is unreadable.
    """
    folder = _require_complete(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{folder / 'meta.json'}: unreadable checkpoint metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise SnapshotError(f"{folder / 'meta.json'}: expected a JSON object, got {type(meta).__name__}")
    for key, kind in META_KEYS.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise SnapshotError(f"{folder / 'meta.json'}: entry '{key}' is missing or not a {kind.__name__}")
    if meta["step"] < 0 or meta["world_size"] < 1:
        raise SnapshotError(f"{folder / 'meta.json'}: step {meta['step']} / world_size {meta['world_size']} out of range")
    return meta


def checkpoint_keys(folder: Path) -> set[str]:
    """Names of the tensors stored in a checkpoint (read from DCP's ``.metadata``)."""
    return set(_stored_metadata(_require_complete(folder)))


def _read_index(folder: Path) -> Any:
    """DCP's index of a checkpoint (its ``.metadata`` file: ``state_dict_metadata`` per tensor,
    ``storage_data`` per stored item).

    Raises:
        SnapshotError: the file is missing, truncated or not DCP metadata (names it).
    """
    try:
        return _dcp().FileSystemReader(str(folder)).read_metadata()
    except Exception as exc:  # noqa: BLE001 - pickle/IO failures of any type mean the same here
        raise SnapshotError(f"{folder / '.metadata'}: unreadable checkpoint index "
                            f"({type(exc).__name__}: {short_message(exc)})") from None


def _stored_metadata(folder: Path) -> dict[str, Any]:
    """DCP's per-tensor metadata of a checkpoint (:func:`_read_index`)."""
    return dict(_read_index(folder).state_dict_metadata)


def load_tensors(folder: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Fill ``tensors`` (name → preallocated tensor of the right shape) in place from a checkpoint.

    A collective when a process group is initialised: every rank calls it, each with the names it
    needs (possibly different sets, e.g. the boxes it owns).

    Raises:
        SnapshotError: a name is not in the checkpoint, or a shape differs (names the entry).
    """
    folder = _require_complete(folder)
    stored = _stored_metadata(folder)
    for name, tensor in tensors.items():
        meta = stored.get(name)
        if meta is None:
            raise SnapshotError(f"{folder}: checkpoint has no entry '{name}' ({OTHER_CONFIG_HINT})")
        size = tuple(getattr(meta, "size", ()))
        if size != tuple(tensor.shape):
            raise SnapshotError(
                f"{folder}: entry '{name}' has shape {list(size)} in the checkpoint but "
                f"{list(tensor.shape)} in this config ({OTHER_CONFIG_HINT})"
            )
    try:
        _dcp().load(tensors, checkpoint_id=str(folder))
    except BaseException as exc:  # DCP's CheckpointException is a BaseException; a bad shard fails in many ways
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        cause = lines[-1] if lines else type(exc).__name__  # DCP's message ends with each rank's error
        damaged = damaged_shards(folder)
        if damaged:
            raise SnapshotError("; ".join(damaged) + f" ({short_message(cause)})") from None
        shards = ", ".join(sorted(p.name for p in folder.glob("*.distcp"))) or "none"
        raise SnapshotError(f"{folder}: could not read the tensor shards ({shards}): {short_message(cause)}") from None


def damaged_shards(folder: Path) -> list[str]:
    """One line per shard file of a checkpoint that is missing or shorter than its index says.

    DCP's ``.metadata`` records, for every stored item, the file it lies in and its byte range
    (``storage_data``: ``relative_path``, ``offset``, ``length``); a file that ends before the
    last range it should hold was truncated (a crash or a full disk while writing it).

    Returns:
        ``"<path>: missing"`` or ``"<path>: truncated (N bytes, the index needs M)"`` for each
        damaged file, sorted; empty when every file is long enough or the index lists no ranges.

    Raises:
        SnapshotError: ``.metadata`` itself is unreadable (names it).
    """
    storage = _read_index(folder).storage_data or {}
    needed_bytes: dict[str, int] = {}
    for info in storage.values():
        path, offset, length = (getattr(info, key, None) for key in ("relative_path", "offset", "length"))
        if isinstance(path, str) and isinstance(offset, int) and isinstance(length, int):
            needed_bytes[path] = max(needed_bytes.get(path, 0), offset + length)
    damaged = []
    for name, needed in sorted(needed_bytes.items()):
        path = folder / name
        if not path.is_file():
            damaged.append(f"{path}: missing")
        elif path.stat().st_size < needed:
            damaged.append(f"{path}: truncated ({path.stat().st_size} bytes, the index needs {needed})")
    return damaged


def load_rank_state(folder: Path, rank: int) -> dict[str, Any] | None:
    """``rank<R>.pt`` of a complete checkpoint, or None when that rank did not exist then.

    Raises:
        SnapshotError: the file of a rank that did exist (``meta.json`` world size) is missing
            or unreadable (names it).
    """
    path = _require_complete(folder) / f"rank{rank}.pt"
    if not path.is_file():
        saved_world_size = load_meta(folder)["world_size"]
        if rank < saved_world_size:
            raise SnapshotError(f"{path}: missing (the checkpoint was written by {saved_world_size} ranks; "
                                "its per-rank random states are needed)")
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a corrupt file
        raise SnapshotError(f"{path}: unreadable rank state ({type(exc).__name__}: {short_message(exc)})") from None

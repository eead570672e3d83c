"""Snapshots of a single-process run: written atomically, loaded with ``weights_only=True``.

A snapshot is a dict of plain data and tensors::

    {"format": "ngptune-snapshot", "version": 1, "step": int, "config": dict (resolved config),
     "model": state_dict, "occupancy": state_dict, "optimizer": state_dict,
     "scaler": state_dict, "rng": {name: uint8 tensor},
     "trainer_state": {str: int | float, "kept_pending": [[rays, kept samples], ...]}}

Writing goes to a temp file in the same folder, is fsynced, then renamed over the target, so a kill
during a save leaves the previous snapshot intact.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from trainer.contract.errors import SnapshotError
from trainer.contract.rundir import atomic_write
from trainer.train.divergence import check_state_dict

# What a shape or key mismatch on resume usually means, and the fix (snapshots and checkpoints).
OTHER_CONFIG_HINT = "written with another config or scene? resume with the run's config.json as --config, on the same scene"

SNAPSHOT_FORMAT = "ngptune-snapshot"
SNAPSHOT_VERSION = 1


def save_snapshot(path: Path, payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` (see module docstring) to ``path``; returns ``path``.

    Raises:
        DivergedError: the model holds a NaN or infinite tensor (nothing is written, so the last
            snapshot stays the run's model; :mod:`trainer.train.divergence`).
    """
    model, step = payload.get("model"), payload.get("step")
    if isinstance(model, dict):  # a payload without a model is the loader's to refuse, by name
        check_state_dict(model, step if isinstance(step, int) else -1)
    payload = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION, **payload}
    return atomic_write(Path(path), lambda f: torch.save(payload, f))


_REQUIRED_ENTRIES: dict[str, type] = {
    "step": int,
    "config": dict,
    "model": dict,
    "occupancy": dict,
    "optimizer": dict,
    "scaler": dict,
    "rng": dict,
    "trainer_state": dict,
}


def archive_problem(path: Path) -> str | None:
    """What is wrong with the zip archive of the snapshot file ``path`` (it does not open: a save
    killed before its end; a record fails its CRC-32 check), or None for a sound archive. Reads the
    whole file, unpickles nothing."""
    path = Path(path)
    if path.is_dir():
        return "a folder, not a snapshot file"
    if not path.exists():
        return "no such file (a link to nothing?)" if path.is_symlink() else "no such file"
    try:
        with zipfile.ZipFile(path) as archive:
            bad_record = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        return f"truncated or corrupt snapshot, or not an ngptune snapshot ({type(exc).__name__}: {short_message(exc)})"
    if bad_record is not None:
        return f"corrupt snapshot: record '{bad_record}' fails its CRC-32 check"
    return None


def load_snapshot(path: Path) -> dict[str, Any]:
    """Read a snapshot written by :func:`save_snapshot` (tensors land on the CPU).

    Checks, in order: the file is a zip archive whose records all pass their CRC-32 check (torch's
    reader does not verify them, so a flipped byte would otherwise load silently); it unpickles with
    ``weights_only=True``; it has the entries listed in the module docstring with the right types;
    the model's floating-point tensors are finite.

    Raises:
        SnapshotError: one line naming the file and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"{path}: snapshot file not found")
    problem = archive_problem(path)
    if problem is not None:
        raise SnapshotError(f"{path}: {problem}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types on foreign pickles; all mean the same here
        raise SnapshotError(f"{path}: truncated or corrupt snapshot ({type(exc).__name__}: {short_message(exc)})") from None
    if not isinstance(payload, dict) or payload.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"{path}: not an ngptune snapshot")
    if payload.get("version") != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{path}: snapshot version {payload.get('version')!r}, this trainer reads {SNAPSHOT_VERSION}"
        )
    for key, kind in _REQUIRED_ENTRIES.items():
        value = payload.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SnapshotError(f"{path}: snapshot entry '{key}' is missing or not a {kind.__name__}")
    if payload["step"] < 0:
        raise SnapshotError(f"{path}: snapshot entry 'step' is negative ({payload['step']})")
    for key, tensor in payload["model"].items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise SnapshotError(f"{path}: model entry '{key}' contains NaN or Infinity")
    return payload


def short_message(exc: BaseException, limit: int = 160) -> str:
    """First line of an exception message, cut to ``limit`` characters, without ANSI escapes."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def load_state_checked(module: torch.nn.Module, state: dict[str, Any], what: str, path: Path) -> None:
    """``module.load_state_dict(state)`` with shape/key mismatches reported as one SnapshotError.

    Raises:
        SnapshotError: naming the snapshot, the entry and both shapes, e.g.
            ``snap.pt: model entry 'encoding.table' has shape [524288, 2] in the snapshot but
            [32768, 2] in this config (written with another config or scene? ...)``.
    """
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise SnapshotError(
            f"{path}: {what} entries differ from this config "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]}); {OTHER_CONFIG_HINT}"
        )
    for key, value in own.items():
        theirs = state[key]
        if isinstance(theirs, torch.Tensor) and tuple(theirs.shape) != tuple(value.shape):
            raise SnapshotError(
                f"{path}: {what} entry '{key}' has shape {list(theirs.shape)} in the snapshot but "
                f"{list(value.shape)} in this config ({OTHER_CONFIG_HINT})"
            )
    module.load_state_dict(state)

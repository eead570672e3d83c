"""The run-directory layout: the only module that builds paths inside a run directory.

::

    RUN_DIR/
      config.json            resolved trainer config
      metrics.jsonl          rank 0 (single process: the only) metrics, schema in trainer.contract.metrics
      metrics.rank<R>.jsonl  metrics of rank R > 0
      eval.json              per-image and mean PSNR/SSIM of the last evaluation
      eval.step_<NNNNNNN>.json  an earlier run's evaluation, kept when a resumed run continues here
      renders/<split>_<NNN>.png
      snapshots/step_<NNNNNNN>.pt   single-process snapshots (newest = highest step); a finished
                             run keeps its final model here
      final.pt               a snapshot in the root (``--save-snapshot RUN/final.pt``, as train-many
                             wrote it): found when the run has no snapshots/ and no checkpoints/
      checkpoints/step_<NNNNNNN>/   sharded distributed checkpoints (complete when they hold the
                             ``.complete`` marker: :func:`list_checkpoints`, :func:`latest_checkpoint`)
      logs/rank<R>.log       text log of each rank
      traces/rank<R>.pt.trace.json  torch.profiler Chrome trace of rank R (profile.trace_steps)
      status.json            final state of the run (completed / failed + reason; keys in trainer.contract.runstatus)
      events.out.tfevents.*  rank 0's metrics and evaluations as TensorBoard scalars (training.tensorboard)
      view_<NNN>.json        cameras saved from the viewer (nerfstudio camera paths)

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

from trainer.contract.errors import ConfigError
from trainer.contract.runstatus import state_text

_SNAPSHOT_RE = re.compile(r"^step_(\d{7,})\.pt$")

COMPLETE_MARKER = ".complete"
"""The file whose presence makes a checkpoint folder complete (written last)."""
CHECKPOINT_NAME = re.compile(r"^step_(\d{7,})(\.partial|\.replaced)?$")
"""Name of a checkpoint folder: its step, and ``.partial`` (being written) or ``.replaced`` (being
replaced) while :func:`trainer.parallel.checkpoint.save_checkpoint` renames it into place."""
CHECKPOINT_STAGING, CHECKPOINT_REPLACED = ".partial", ".replaced"


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write a file atomically: ``write(f)`` fills a temp file in the same folder, which is
    fsynced and renamed over ``path``. A kill at any moment leaves either the old file or the new
    one, never a half-written ``path`` (temp files start with ``.`` and end with ``.tmp``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def prepare_output_file(path: Path, what: str) -> Path:
    """Check before a long run that ``path`` can be written as a file (creating its folder, and
    writing and removing a temporary file there).

    Raises:
        ConfigError: naming ``what`` and the path when it is a folder, its folder cannot be made,
            or no file can be written in it.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder, expected a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create its folder ({exc.strerror or exc})") from None
    try:  # a real write: access() says yes to root on read-only and pseudo file systems (/proc)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write a file in {path.parent} ({exc.strerror or exc})") from None
    return path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def free_path(name_of: Callable[[int], Path]) -> Path:
    """``name_of(k)`` for the first k = 1, 2, ... that does not exist: where an earlier attempt's
    files are moved aside, numbered."""
    k = 1
    while (path := name_of(k)).exists():
        k += 1
    return path


def view_name(split: str, index: int) -> str:
    """The file stem of view ``index`` (its position in the split) of ``split``: ``test_007``. The
    evaluation's renders and ``render --cameras test`` name their PNGs so."""
    return f"{split}_{index:03d}"


NULL_REASONS_KEY = "null_reasons"
"""Key of a run's JSON files (``eval.json``, ``status.json``) mapping the dotted path of each value
written as ``null`` (a NaN or an infinity: not JSON) to why it has no number."""


def _null_reason(path: str, value: float) -> str:
    if math.isnan(value):
        return "not a number (NaN): the value is undefined for this run"
    if path.rsplit(".", 1)[-1].endswith("_db") and value > 0:
        return "+inf: an exact match (zero error), which has no finite PSNR"
    return f"{'+' if value > 0 else '-'}inf: no finite value"


def json_ready(payload: Any) -> Any:
    """``payload`` as strict JSON can hold it: each NaN or infinite float (which ``json.dumps``
    would write as the bare ``NaN`` / ``Infinity`` that strict parsers reject) becomes ``None``,
    and a top-level dict gets :data:`NULL_REASONS_KEY` saying why (reasons already there are kept).

    Args:
        payload: dicts, lists, tuples, strings, numbers, booleans, None.

    Returns:
        The cleaned copy.
    """
    reasons: dict[str, str] = {}

    def clean(value: Any, path: str) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            reasons[path] = _null_reason(path, value)
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    cleaned = clean(payload, "")
    if reasons and isinstance(cleaned, dict):
        given = cleaned.get(NULL_REASONS_KEY)
        cleaned[NULL_REASONS_KEY] = {**reasons, **(given if isinstance(given, dict) else {})}
    return cleaned


def checkpoint_step(folder: Path) -> int | None:
    """The step in a checkpoint folder's name (``step_<N>``, ``.partial``/``.replaced`` too), else None."""
    m = CHECKPOINT_NAME.match(Path(folder).name)
    return int(m.group(1)) if m else None


def list_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints ``(step, folder)`` under ``checkpoints_dir``, oldest first.

    Folders without the :data:`COMPLETE_MARKER` (half-written) are left out. Of several complete
    folders of one step (``step_N``, and ``.partial``/``.replaced`` left by a crash between the
    renames of a save) the plain name wins, then the newer ``.partial``.
    """
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    preference = {None: 0, CHECKPOINT_STAGING: 1, CHECKPOINT_REPLACED: 2}
    best: dict[int, tuple[int, Path]] = {}
    for p in checkpoints_dir.iterdir():
        m = CHECKPOINT_NAME.match(p.name)
        if m and p.is_dir() and (p / COMPLETE_MARKER).is_file():
            step, rank = int(m.group(1)), preference[m.group(2)]
            if step not in best or rank < best[step][0]:
                best[step] = (rank, p)
    return sorted((step, p) for step, (_, p) in best.items())


def latest_checkpoint(path: Path) -> Path | None:
    """The newest complete checkpoint reachable from ``path``.

    Args:
        path: a checkpoint folder (returned if complete), a ``checkpoints`` folder, or a run
            directory.

    Returns:
        The folder, or None when there is no complete checkpoint.
    """
    path = Path(path)
    if (path / COMPLETE_MARKER).is_file():
        return path
    for folder in (path / "checkpoints", path):
        found = list_checkpoints(folder)
        if found:
            return found[-1][1]
    return None


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory (nothing is created until asked)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def create(self) -> "RunDir":
        """Make the folder (and parents).

        Raises:
            ConfigError: the path is a file or cannot be created (names the path).
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"run directory {self.root}: cannot create it ({exc.strerror or exc})") from None
        return self

    def remove_stale_temp_files(self) -> int:
        """Delete temp files that a killed snapshot/JSON write left behind; returns how many."""
        removed = 0
        for folder in (self.root, self.snapshots_dir):
            if folder.is_dir():
                for p in folder.glob(".*.tmp"):
                    p.unlink(missing_ok=True)
                    removed += 1
        return removed

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    def metrics_path(self, rank: int = 0) -> Path:
        return self.root / ("metrics.jsonl" if rank == 0 else f"metrics.rank{rank}.jsonl")

    def metrics_ranks(self) -> list[int]:
        """Ranks that wrote a metrics file, ascending."""
        ranks = [0] if self.metrics_path(0).is_file() else []
        for p in self.root.glob("metrics.rank*.jsonl"):
            m = re.fullmatch(r"metrics\.rank(\d+)\.jsonl", p.name)
            if m and int(m.group(1)) > 0:
                ranks.append(int(m.group(1)))
        return sorted(ranks)

    def existing_run(self) -> str | None:
        """What shows that this folder already holds a run (its ``status.json`` state, or the
        first run file found), or None for a missing or run-free folder."""
        status = self.read_status()
        if status is not None:
            return f"its status.json says {state_text(status)!r}"
        for path in (self.metrics_path(0), self.config_path):
            if path.is_file():
                return f"it has {path.name}"
        return None

    def read_status(self) -> dict[str, Any] | None:
        """``status.json`` as a dict, or None when it is missing or unreadable."""
        try:
            data = json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def eval_path(self) -> Path:
        return self.root / "eval.json"

    def archive_eval(self) -> Path | None:
        """Rename ``eval.json`` to ``eval.step_<N>.json`` (N: the step it evaluated), so a resumed
        run continuing in this folder never shows an earlier evaluation as its own. Returns the new
        path, or None when there was no ``eval.json``."""
        if not self.eval_path.is_file():
            return None
        try:
            step = json.loads(self.eval_path.read_text(encoding="utf-8")).get("step")
        except (OSError, ValueError, AttributeError):
            step = None
        name = f"eval.step_{step:07d}.json" if isinstance(step, int) and step >= 0 else "eval.previous.json"
        target = self.root / name
        os.replace(self.eval_path, target)
        return target

    @property
    def status_path(self) -> Path:
        return self.root / "status.json"

    def view_camera_path(self, number: int) -> Path:
        """A camera saved from the viewer: ``view_<NNN>.json``."""
        return self.root / f"view_{number:03d}.json"

    @property
    def tensorboard_dir(self) -> Path:
        """Where rank 0's TensorBoard event files go: the run folder itself, so that
        ``tensorboard --logdir runs/`` lists each run under its own name."""
        return self.root

    @property
    def renders_dir(self) -> Path:
        return self.root / "renders"

    def render_path(self, split: str, index: int) -> Path:
        return self.renders_dir / f"{view_name(split, index)}.png"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def snapshot_path(self, step: int) -> Path:
        return self.snapshots_dir / f"step_{step:07d}.pt"

    def snapshots(self) -> list[tuple[int, Path]]:
        """Complete snapshots (step, path), oldest first. Temp files of a killed save are ignored."""
        if not self.snapshots_dir.is_dir():
            return []
        steps = ((self.snapshot_step(p), p) for p in self.snapshots_dir.iterdir())
        return sorted((step, p) for step, p in steps if step is not None)

    @staticmethod
    def snapshot_step(path: Path) -> int | None:
        """The step in a snapshot file's name (``step_<N>.pt``), else None."""
        m = _SNAPSHOT_RE.match(Path(path).name)
        return int(m.group(1)) if m else None

    def latest_snapshot(self) -> Path | None:
        snaps = self.snapshots()
        return snaps[-1][1] if snaps else None

    @property
    def root_snapshot_path(self) -> Path:
        """``final.pt`` in the run's root: a snapshot that ``--save-snapshot RUN/final.pt`` put
        there (train-many's runs of earlier versions); read only when :meth:`snapshots` is empty."""
        return self.root / "final.pt"

    def model_snapshot(self) -> Path | None:
        """The snapshot holding the run's newest single-process model: the newest of
        ``snapshots/``, else ``final.pt`` in the root, else None."""
        newest = self.latest_snapshot()
        if newest is None and self.root_snapshot_path.is_file():
            return self.root_snapshot_path
        return newest

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def log_path(self, rank: int = 0) -> Path:
        return self.logs_dir / f"rank{rank}.log"

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    def trace_path(self, rank: int = 0) -> Path:
        """Chrome trace of ``profile.trace_steps`` written by ``rank``'s torch.profiler."""
        return self.traces_dir / f"rank{rank}.pt.trace.json"

    def write_json(self, path: Path, payload: Any) -> None:
        """Write strict JSON atomically to one of this run's paths (a NaN or an infinity is
        written as ``null`` with its reason, :func:`json_ready`)."""
        atomic_write_text(path, json.dumps(json_ready(payload), indent=2, sort_keys=False, allow_nan=False) + "\n")

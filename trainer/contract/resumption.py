"""What a stopped run says on how to continue it: its newest complete snapshot or checkpoint, and
the command line that resumes it into the same folder (:func:`resume_lines` as statements,
:func:`resume_block` as lines under 80 columns).

Printed by the trainer after Ctrl-C, by its launcher when it stops its ranks, and by ``ngptune
train`` when the trainer it started was killed by a signal it could not catch (SIGKILL).

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from trainer.contract.rundir import RunDir, checkpoint_step, latest_checkpoint
from trainer.contract.textlines import fit_lines

__all__ = ["newest_model", "resume_block", "resume_lines", "snapshot_every"]


def newest_model(run_dir: RunDir) -> Path | None:
    """The newest complete model of ``run_dir``: its newest complete checkpoint (a job of ranks
    keeps checkpoints), else its newest snapshot in ``snapshots/`` (one process); None when there
    is none."""
    return latest_checkpoint(run_dir.root) or run_dir.latest_snapshot()


def snapshot_every(run_dir: RunDir) -> int | None:
    """``training.snapshot_every`` of the run's ``config.json`` (``--snapshot-every`` or
    ``--checkpoint-every``): a positive number of steps, else None (not set, 0, or no readable
    config)."""
    try:
        saved = json.loads(run_dir.config_path.read_text())
        steps = saved["training"]["snapshot_every"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


def _model_parts(run_dir: RunDir, model: Path | None, nproc_per_node: int,
                 flags: Sequence[str]) -> tuple[list[str], str | None]:
    """The statement naming ``model`` (or that there is none) as parts for
    :func:`~trainer.contract.textlines.fit_lines`, and the command line that continues the run
    with ``flags`` after it (None without a model)."""
    flag = "--checkpoint-every" if nproc_per_node > 1 else "--snapshot-every"
    if model is None:
        steps = snapshot_every(run_dir)
        if steps:
            return ["no snapshot or checkpoint was kept in", str(run_dir.root),
                    f"(it stopped before {flag} {steps} kept one)"], None
        return ["no snapshot or checkpoint was kept in", str(run_dir.root), f"({flag} N keeps one along the way)"], None
    model = Path(model)
    if model.is_dir():
        kind, step, resume = "checkpoint", checkpoint_step(model), run_dir.root
    else:
        kind, resume = "snapshot", model
        step = next((s for s, path in run_dir.snapshots() if path == model), None)
    launch = f" --nproc-per-node {nproc_per_node}" if nproc_per_node > 1 else ""
    paths = (shlex.quote(str(path)) for path in (run_dir.config_path, resume, run_dir.root))  # pasted into a shell
    command = "ngptune train{} --config {} --resume {} --out {}".format(launch, *paths)
    command = " ".join([command, *(shlex.quote(flag) for flag in flags)])
    return [f"the newest complete {kind} is", str(model), *([f"(step {step})"] if step is not None else [])], command


def resume_lines(run_dir: RunDir, model: Path | None, nproc_per_node: int = 1,
                 flags: Sequence[str] = ()) -> list[str]:
    """What a stopped run says on how to continue it, one statement a string (for a one-line
    message; :func:`resume_block` for lines to print): the newest complete snapshot or checkpoint
    ``model`` of ``run_dir`` (None: there is none) with its step, and the command line that resumes
    it into the same folder with the run's own ``config.json`` (``nproc_per_node`` > 1: a launched
    job of that many ranks per node), followed by ``flags``: those of the stopped run that its
    ``config.json`` does not keep (:func:`~trainer.contract.commandline.resume_flags`).

    >>> resume_lines(RunDir(Path("runs/x")), None)
    ['no snapshot or checkpoint was kept in runs/x (--snapshot-every N keeps one along the way)']
    """
    parts, command = _model_parts(run_dir, model, nproc_per_node, flags)
    return [" ".join(parts), *([f"continue with: {command}"] if command else [])]


def resume_block(run_dir: RunDir, model: Path | None, nproc_per_node: int = 1, indent: str = "  ",
                 flags: Sequence[str] = ()) -> list[str]:
    """The statements of :func:`resume_lines` as lines to print under a heading, each starting
    with ``indent`` and under :func:`~trainer.contract.textlines.line_width` columns: the model's
    statement broken between its parts (a path stays whole, its lines after the first indented
    two more), then ``continue with:`` and on a line of its own the command line, whole (it is
    copied as it is).

    >>> resume_block(RunDir(Path("runs/x")), Path("runs/x/snapshots/step_0000060.pt"))[1:]
    ['  continue with:', '    ngptune train --config runs/x/config.json --resume runs/x/snapshots/step_0000060.pt --out runs/x']
    """
    parts, command = _model_parts(run_dir, model, nproc_per_node, flags)
    deeper = indent + "  "
    lines = fit_lines([indent + parts[0], *parts[1:]], indent=deeper)
    if command is not None:
        lines += [f"{indent}continue with:", deeper + command]
    return lines

"""What a stopped run says on how to continue it: its newest complete snapshot or checkpoint, and
the command line that resumes it into the same folder (:func:`resume_lines`).

Printed by the trainer after Ctrl-C, by its launcher when it stops its ranks, and by ``ngptune
train`` when the trainer it started was killed by a signal it could not catch (SIGKILL).

Stdlib only: both the trainer and the ngptune driver import it.
"""

from __future__ import annotations

from pathlib import Path

from trainer.contract.rundir import RunDir, checkpoint_step, latest_checkpoint

__all__ = ["newest_model", "resume_lines"]


def newest_model(run_dir: RunDir) -> Path | None:
    """The newest complete model of ``run_dir``: its newest complete checkpoint (a job of ranks
    keeps checkpoints), else its newest snapshot in ``snapshots/`` (one process); None when there
    is none."""
    return latest_checkpoint(run_dir.root) or run_dir.latest_snapshot()


def resume_lines(run_dir: RunDir, model: Path | None, nproc_per_node: int = 1) -> list[str]:
    """What a stopped run prints on how to continue it: the newest complete snapshot or checkpoint
    ``model`` of ``run_dir`` (None: there is none) with its step, and the command line that resumes
    it into the same folder with the run's own ``config.json`` (``nproc_per_node`` > 1: a launched
    job of that many ranks per node).

    >>> resume_lines(RunDir(Path("runs/x")), None)
    ['no snapshot or checkpoint was kept in runs/x (--snapshot-every N keeps one along the way)']
    """
    every = "--checkpoint-every N" if nproc_per_node > 1 else "--snapshot-every N"
    if model is None:
        return [f"no snapshot or checkpoint was kept in {run_dir.root} ({every} keeps one along the way)"]
    model = Path(model)
    if model.is_dir():
        kind, step, resume = "checkpoint", checkpoint_step(model), run_dir.root
    else:
        kind, resume = "snapshot", model
        step = next((s for s, path in run_dir.snapshots() if path == model), None)
    at = f" (step {step})" if step is not None else ""
    launch = f" --nproc-per-node {nproc_per_node}" if nproc_per_node > 1 else ""
    return [f"the newest complete {kind} is {model}{at}",
            f"continue with: ngptune train{launch} --config {run_dir.config_path} --resume {resume} --out {run_dir.root}"]

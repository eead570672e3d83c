"""The viewer of a training run (``ngptune train --view``): the page of ``ngptune view``, showing
the model as it trains, with the run's step, loss, PSNR and steps/s.

Frames are rendered by the training process itself, between two steps (:meth:`LiveView.on_step`,
the loop's per-step hook), with the trainer's current field and occupancy grid: no second copy of
the model, no lock around the training step. A browser only records what it wants and sets a
flag; a step with no browser waiting and no frame due reads that flag and one clock and returns,
so an idle viewer costs nothing measurable per step. When a frame is due, rendering stops after
about :data:`LIVE_BAND_S` (one band) and goes on after the next step. Rendering time is
not training time (``train_time_s``, ``--time-budget``), but it is wall time: the interval's
steps/s drops while a browser's camera moves.

One process serves it, or rank 0 of a data-parallel run (the other ranks wait for it at the next
collective while it renders). Rank 0 of a subgrid run holds only its own boxes and cannot render
the scene: ``--view`` is refused there (``ngptune view RUN`` shows its checkpoints).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from trainer.contract.errors import ConfigError
from trainer.contract.textlines import fit_lines

__all__ = ["LIVE_BAND_S", "LiveView", "start_live_view"]

LIVE_BAND_S = 0.05  # one band of rows between two steps: about this long (full frames' bands are sized so)



class LiveView:
    """The viewer of one training run (module docstring).

    Args:
        viewer: the :class:`~trainer.viewer.server.Viewer` of the run's trainer (``live=True``).
        message: where lines go (the run's progress output).
    """

    def __init__(self, viewer: Any, message: Callable[[str], None]) -> None:
        self.viewer = viewer
        self._message = message
        self._due_at = math.inf

    def on_step(self, step: int, train_time_s: float) -> None:
        """After every training step: render what browsers are waiting for, if anything
        (``step`` and ``train_time_s`` as the loop's ``on_step`` hook passes them)."""
        if not self.viewer.woken and time.monotonic() < self._due_at:
            return
        self.viewer.clear_wake()
        self._due_at = time.monotonic() + self.viewer.serve(LIVE_BAND_S)

    def on_log(self, record: dict[str, Any]) -> None:
        """After every metrics record: the page's status line (step, loss, PSNR, steps/s)."""
        n_steps = self.viewer.model.trainer.cfg.training.n_steps
        parts = [f"**training** · step {record['step']} of {n_steps}"]
        for key, label, fmt in (("loss", "loss", "{:.4g}"), ("train_psnr_db", "PSNR", "{:.2f} dB"),
                                ("steps_per_s", "", "{:.3g} steps/s")):
            value = record.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                parts.append(f"{label} {fmt.format(value)}".strip())
        self.viewer.set_status(" · ".join(parts))

    def hooks(self, on_log: Callable[[dict[str, Any]], None],
              on_step: Callable[[int, float], None]) -> tuple[Callable[[dict[str, Any]], None], Callable[[int, float], None]]:
        """``on_log`` and ``on_step`` hooks of the training loop that call the given ones, then this
        viewer's."""

        def log(record: dict[str, Any]) -> None:
            on_log(record)
            self.on_log(record)

        def step(step_: int, train_time_s: float) -> None:
            on_step(step_, train_time_s)
            self.on_step(step_, train_time_s)

        return log, step

    def close(self) -> None:
        run = self.viewer.save_hint
        self.viewer.close()
        self._message("\n".join(fit_lines(["viewer: stopped with the training;", f"ngptune view {run}",
                                            "shows the saved model"])))


def start_live_view(args: Any, trainer: Any, run_dir: Any, message: Callable[[str], None],
                    is_main: bool = True) -> LiveView | None:
    """The run's :class:`LiveView` when ``args.view`` is set and this process serves it (one
    process, or rank 0), else None. Its first line gives the address.

    Args:
        args: the training flags (``view``, ``view_host``, ``view_port``).
        trainer: the run's trainer, built (and resumed) but not yet trained.
        run_dir: the run's :class:`~trainer.contract.rundir.RunDir` ("Save camera" writes there).
        message: where lines go.
        is_main: whether this process is rank 0.

    Raises:
        ConfigError: viser is not installed, the port is in use, or a subgrid run of several
            ranks (names ``--view``).
    """
    if not getattr(args, "view", False) or not is_main:
        return None
    from trainer.inference.loading import LoadedModel
    from trainer.viewer.cli import require_viser
    from trainer.viewer.server import Viewer, ViewerSettings

    require_viser("--view")
    mode = getattr(trainer, "mode", "single")
    if mode == "subgrid" and getattr(trainer, "world_size", 1) > 1:
        raise ConfigError("--view: rank 0 of a subgrid run holds only its own boxes and cannot render the scene; "
                          "view the run's checkpoints with ngptune view RUN")
    model = LoadedModel(trainer=trainer, source=run_dir.root, step=int(trainer.step), mode=mode)
    background = (1.0, 1.0, 1.0) if trainer.scene.white_background else (0.0, 0.0, 0.0)
    title = f"**{trainer.scene.root.name}** · training on {trainer.device}  \n`{run_dir.root}`"
    viewer = Viewer(model, ViewerSettings(background=background), args.view_host, args.view_port, log=message,
                    live=True, title=title, save_dir=run_dir.root, save_hint=str(run_dir.root),
                    flags=("--view-host", "--view-port"), band_s=LIVE_BAND_S)
    message("\n".join(fit_lines([f"viewer: {viewer.url} —", "the model as it trains",
                                 "(frames rendered between steps)"])))
    return LiveView(viewer, message)

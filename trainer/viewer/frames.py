"""One viewer frame, rendered in bands of rows with the renderer of ``ngptune render``.

A frame is rendered a band of rows at a time (:func:`trainer.inference.render_views.render_camera`
on the band's own camera: the same intrinsics with the principal point moved up by the band's
first row), so a frame can stop between bands when the browser's camera moves, and a live view
can spread one frame over several training steps. Each pixel's ray is the ray a whole-frame
render casts, so the assembled frame equals ``render_camera`` of the whole camera (spp 1; with
jittered renders the offsets are drawn in another order).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from trainer.data.scene import Frame
from trainer.inference.outputs import depth_preview, to_uint8
from trainer.inference.render_views import render_camera
from trainer.contract.commandline import RENDER_MODES

__all__ = ["BandedFrame", "FrameRequest", "band_frame"]



@dataclasses.dataclass(frozen=True)
class FrameRequest:
    """What to render.

    Attributes:
        frame: the camera, at the frame's own size (``frame.intrinsics`` width × height).
        mode: one of :data:`~trainer.contract.commandline.RENDER_MODES`.
        background: RGB in [0, 1] behind the rays.
        spp: jittered renders averaged per pixel (>= 1).
        seed: the jitter's seed (spp > 1).
    """

    frame: Frame
    mode: str = "rgb"
    background: tuple[float, float, float] = (0.0, 0.0, 0.0)
    spp: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in RENDER_MODES:
            raise ValueError(f"FrameRequest.mode: expected one of {', '.join(RENDER_MODES)}, got {self.mode!r}")
        if self.spp < 1:
            raise ValueError(f"FrameRequest.spp: expected an integer >= 1, got {self.spp}")

    @property
    def rays(self) -> int:
        """Rays the frame casts: pixels × spp."""
        k = self.frame.intrinsics
        return k.width * k.height * self.spp


def band_frame(frame: Frame, first_row: int, rows: int) -> Frame:
    """The camera of rows ``first_row .. first_row + rows - 1`` of ``frame``'s image: the same
    pose and focal lengths, ``rows`` rows, the principal point ``first_row`` rows higher."""
    k = frame.intrinsics
    return dataclasses.replace(frame, intrinsics=dataclasses.replace(k, height=rows, cy=k.cy - first_row))


class BandedFrame:
    """A frame in the making (module docstring).

    Args:
        model: a :class:`~trainer.inference.loading.LoadedModel` (or one wrapping a training trainer).
        request: what to render.
        band_rays: rays per band (>= 1; at least one row per band).
    """

    def __init__(self, model: Any, request: FrameRequest, band_rays: int) -> None:
        self.model = model
        self.request = request
        k = request.frame.intrinsics
        self.width, self.height = k.width, k.height
        self.rows_per_band = max(1, int(band_rays) // (self.width * request.spp))
        self.rgb = np.zeros((self.height, self.width, 3), dtype=np.float32)
        self.opacity = np.zeros((self.height, self.width), dtype=np.float32)
        self.depth = np.zeros((self.height, self.width), dtype=np.float32)
        self.next_row = 0
        self.render_s = 0.0
        self._background = torch.tensor(request.background, dtype=torch.float32, device=model.device)
        self._generator = None
        if request.spp > 1:
            self._generator = torch.Generator(device=model.device)
            self._generator.manual_seed(request.seed)

    @property
    def done(self) -> bool:
        return self.next_row >= self.height

    def render_band(self) -> None:
        """Render the next band of rows (nothing when the frame is done)."""
        if self.done:
            return
        start = self.next_row
        rows = min(self.rows_per_band, self.height - start)
        t0 = time.perf_counter()
        trainer = self.model.trainer
        was_training = trainer.field.training
        trainer.field.eval()
        try:
            view = render_camera(self.model, band_frame(self.request.frame, start, rows), self._background,
                                 self.request.spp, self._generator, with_depth=self.request.mode == "depth")
        finally:
            trainer.field.train(was_training)
        self.rgb[start : start + rows] = view.rgb
        self.opacity[start : start + rows] = view.opacity
        self.depth[start : start + rows] = view.depth
        self.next_row = start + rows
        self.render_s += time.perf_counter() - t0

    def render_all(self) -> np.ndarray:
        """Render every remaining band; returns :meth:`image`."""
        while not self.done:
            self.render_band()
        return self.image()

    def image(self) -> np.ndarray:
        """[h, w, 3] uint8 RGB of the finished frame in its mode (depth: turbo colours over this
        frame's nearest to farthest surface, black where nothing is hit; opacity: grey levels).

        Raises:
            RuntimeError: bands are still missing.
        """
        if not self.done:
            raise RuntimeError(f"BandedFrame.image: rows {self.next_row}..{self.height - 1} are not rendered yet")
        if self.request.mode == "depth":
            return depth_preview(self.depth)
        if self.request.mode == "opacity":
            return np.repeat(to_uint8(self.opacity)[..., None], 3, axis=-1)
        return to_uint8(self.rgb)

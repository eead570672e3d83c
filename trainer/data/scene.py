"""The in-memory description of a scene, common to every on-disk format.

Conventions (DESIGN.md §1):

* ``c2w`` is camera-to-world, 4×4 float64, OpenGL/NeRF camera axes (x right, y up, the camera looks
  down −z).
* World coordinates are already mapped into instant-ngp's unit cube: a point ``p`` of the source
  ("NeRF") world becomes ``cycle(p · scale + offset)`` with ``cycle(x, y, z) = (y, z, x)``
  (instant-ngp ``nerf_matrix_to_ngp``; the camera columns are rotated the same way, but, unlike
  instant-ngp, not negated, because we keep OpenGL camera axes).
* The scene AABB is the unit cube scaled by ``aabb_scale`` around its centre (0.5, 0.5, 0.5).
* Pixel ``(u, v)`` has its centre at ``(u + 0.5, v + 0.5)``; ``v`` grows downwards.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from trainer.contract.formats import SPLITS  # noqa: F401  (the splits a scene may have)


@dataclasses.dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of one image with OpenCV distortion.

    Attributes:
        width, height: image size in pixels of the image as decoded (after any ``downscale``).
        fx, fy: focal lengths in pixels.
        cx, cy: principal point in pixels (image centre is ``width / 2``).
        k1, k2, k3, k4: radial distortion (OpenCV ``k1 k2 p1 p2 k3 k4`` order of the model
            ``r' = r (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r²)``; k4 is the first denominator term).
        p1, p2: tangential distortion.
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    k1: float = 0.0
    k2: float = 0.0
    p1: float = 0.0
    p2: float = 0.0
    k3: float = 0.0
    k4: float = 0.0

    @property
    def distortion(self) -> tuple[float, float, float, float, float, float]:
        """``(k1, k2, p1, p2, k3, k4)``."""
        return (self.k1, self.k2, self.p1, self.p2, self.k3, self.k4)

    @property
    def has_distortion(self) -> bool:
        return any(v != 0.0 for v in self.distortion)

    def scaled(self, factor: float) -> "Intrinsics":
        """Intrinsics of the same camera with the image resized by ``factor`` (0.5 = half size)."""
        return dataclasses.replace(
            self,
            width=int(round(self.width * factor)),
            height=int(round(self.height * factor)),
            fx=self.fx * factor,
            fy=self.fy * factor,
            cx=self.cx * factor,
            cy=self.cy * factor,
        )


@dataclasses.dataclass(frozen=True)
class Frame:
    """One posed image.

    Attributes:
        name: the frame's identifier as written in the source (``file_path`` or image name).
        image_path: absolute path of the image file.
        c2w: [4, 4] float64 camera-to-world, OpenGL axes, unit-cube world (see module docstring).
        intrinsics: :class:`Intrinsics` of the image as it will be decoded.
        sharpness: instant-ngp's per-frame sharpness, or None.
    """

    name: str
    image_path: Path
    c2w: np.ndarray
    intrinsics: Intrinsics
    sharpness: float | None = None


class SkippedFramesWarning(UserWarning):
    """Frames the scene lists are left out (their image files are missing); the frames are in
    :attr:`Scene.skipped`. A command that reloads the scene of a trained run leaves it unsaid when
    the run skipped as many (``status.json``'s ``skipped_frames``)."""


@dataclasses.dataclass(frozen=True)
class SkippedFrame:
    """A frame listed by the scene that is not used, and why."""

    frame: str
    reason: str


@dataclasses.dataclass
class Scene:
    """A loaded scene: posed frames per split, the scene box and loader notes.

    Attributes:
        format: one of ``"instant-ngp"``, ``"blender"``, ``"llff"``, ``"colmap"``.
        root: the folder (or file) the scene was loaded from.
        splits: split name (``train``/``val``/``test``) → list of :class:`Frame`, in order.
        aabb_scale: power of two in 1..128; the scene box is the unit cube scaled by it.
        white_background: True where evaluation composites against white (NeRF-synthetic).
        notes: human-readable remarks from the loader (for example the COLMAP model chosen).
        skipped: frames listed by the source but not used, with the reason.
        downscale: the integer factor images are shrunk by when decoded (1 = full size).
        world_scale, world_offset: the NeRF-world → unit-cube mapping the cameras went through
            (:func:`trainer.data.convention.nerf_to_unit_cube`; instant-ngp's 0.33 and 0.5 by default).
        pose_normalization: the colmap2nerf-style similarity applied before it
            (:class:`trainer.data.convention.PoseNormalization`), or None when the source world was
            used as the NeRF world.
        held_out_every: n when the loader made the ``test`` split by holding out every n-th
            listed frame (``data.holdout_every``); 0 when the splits are the source's own.
        ignored_formats: other formats found in the scene folder and not loaded.
        box_source: how the scene box was chosen (``"file"``: the scene's own ``aabb_scale`` or the
            default; ``"data"``: derived from sparse points or near/far bounds; ``"override"``:
            ``--aabb-scale``).
        size_rule: one line: the size the images are trained at, the factor and which rule chose
            it (:mod:`trainer.data.resolution`).
    """

    format: str
    root: Path
    splits: dict[str, list[Frame]]
    aabb_scale: int
    white_background: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    skipped: list[SkippedFrame] = dataclasses.field(default_factory=list)
    downscale: int = 1
    world_scale: float = 0.33
    world_offset: tuple[float, float, float] = (0.5, 0.5, 0.5)
    pose_normalization: Any = None
    held_out_every: int = 0
    ignored_formats: list[str] = dataclasses.field(default_factory=list)
    box_source: str = "file"
    size_rule: str = ""

    @property
    def aabb(self) -> np.ndarray:
        """[2, 3] float64: min and max corner of the scene box in unit-cube world coordinates."""
        half = 0.5 * self.aabb_scale
        return np.array([[0.5 - half] * 3, [0.5 + half] * 3], dtype=np.float64)

    def frames(self, split: str) -> list[Frame]:
        """Frames of one split (an empty list for a split the scene does not have)."""
        return self.splits.get(split, [])

    @property
    def split_counts(self) -> dict[str, int]:
        return {name: len(frames) for name, frames in self.splits.items()}

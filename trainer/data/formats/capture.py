"""The :class:`~trainer.data.scene.Scene` of a capture without authored splits or box (LLFF,
COLMAP): frames held out every ``opts.holdout_every``, the box and world mapping the loader
derived (:func:`trainer.data.scenebox.place_capture`), the image source it chose
(:func:`trainer.data.resolution.choose_image_source`) and the pose normalisation it applied.
"""

from __future__ import annotations

from pathlib import Path

from trainer.data.convention import PoseNormalization, holdout_splits
from trainer.data.options import SceneOptions
from trainer.data.resolution import ImageSource
from trainer.data.scene import Frame, Scene
from trainer.data.scenebox import Placement


def capture_scene(
    fmt: str,
    root: Path,
    frames: list[Frame],
    opts: SceneOptions,
    source: ImageSource,
    placement: Placement,
    normalization: PoseNormalization,
    notes: list[str],
) -> Scene:
    """Assemble the scene of a capture.

    Args:
        fmt: the format's name (``"llff"``, ``"colmap"``).
        root: the scene folder.
        frames: every frame in capture order (poses already placed by ``placement``).
        opts: the load options (``holdout_every`` decides the ``test`` split).
        source: the image folder and decode factor chosen.
        placement: the box and world mapping chosen.
        normalization: the pose normalisation applied before placement.
        notes: what the loader chose and why, shown by ``ngptune inspect``.
    """
    return Scene(
        format=fmt,
        root=root,
        splits=holdout_splits(frames, opts.holdout_every),
        aabb_scale=placement.aabb_scale,
        notes=notes,
        downscale=source.decode_downscale,
        box_source=placement.box_source,
        world_scale=placement.world_scale,
        world_offset=placement.world_offset,
        pose_normalization=normalization,
        held_out_every=opts.holdout_every,
        size_rule=source.note,
    )

"""NeRF-synthetic ("Blender") scenes: ``transforms_{train,val,test}.json`` (DESIGN.md §1).

Each split file has the top-level ``camera_angle_x`` (horizontal field of view, radians) and frames
with ``file_path`` like ``./train/r_0`` (no extension: ``.png`` is appended) and a NeRF-world
``transform_matrix`` (OpenGL camera axes). The focal length comes from the *real* image width,
``f = 0.5 · W / tan(0.5 · camera_angle_x)`` (Mildenhall et al. 2020, ``load_blender.py``), pixels are
square and the principal point is the image centre. Images are RGBA with straight alpha and are
evaluated against a white background.

The files are a subset of instant-ngp's format and are parsed by the same code
(:mod:`trainer.data.formats.ngp`), so intrinsics keys, ``aabb_scale``, ``scale`` and ``offset`` are
honoured where present (the world mapping and ``aabb_scale`` from ``transforms_train.json``, for
every split); without them instant-ngp's defaults apply (``aabb_scale`` 1, scale 0.33,
offset 0.5). Frames keep the file's order (the benchmark's image order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.data.camera_checks import warn_about_layout
from trainer.data.formats.ngp import (
    aabb_scale_of,
    build_frames,
    frame_entries,
    missing_images_error,
    read_json,
    world_transform,
)
from trainer.data.convention import holdout_splits
from trainer.data.options import SceneOptions
from trainer.data.scene import SPLITS, Frame, Scene
from trainer.contract.errors import SceneError


def scene_folder(path: Path) -> Path:
    """The folder of a Blender scene given the folder or one of its ``transforms_<split>.json``."""
    return path.parent if path.is_file() else path


def load(path: Path, opts: SceneOptions) -> Scene:
    """Load a NeRF-synthetic scene.

    Args:
        path: the scene folder or one of its ``transforms_<split>.json`` files.
        opts: loader options; ``downscale`` and ``aabb_scale`` apply; ``holdout_every`` only when
            the folder holds no val or test file (then every n-th training frame becomes ``test``).

    Returns:
        Scene with ``format="blender"``, one split per ``transforms_<split>.json`` present,
        ``white_background=True``.

    Raises:
        SceneError: ``transforms_train.json`` missing; any problem in a split file (naming the file,
            frame and key); image files missing (all listed in one message).
    """
    folder = scene_folder(Path(path))
    train_json = folder / "transforms_train.json"
    if not train_json.is_file():
        present = sorted(p.name for p in folder.glob("transforms_*.json"))
        found = f" (found {', '.join(present)})" if present else ""
        raise SceneError(f"{train_json}: not found; a Blender scene needs transforms_train.json{found}")

    # The world mapping (scale, offset) and aabb_scale come from the train file, so that every
    # split's cameras live in one world.
    train_data = read_json(train_json)
    aabb_scale = aabb_scale_of(train_data, opts, default=1, where=str(train_json))
    scale, offset = world_transform(train_data, str(train_json))
    splits: dict[str, list[Frame]] = {}
    notes: list[str] = []
    all_c2w = []
    for split in SPLITS:
        json_path = folder / f"transforms_{split}.json"
        if not json_path.is_file():
            continue
        data = train_data if split == "train" else read_json(json_path)
        entries = frame_entries(data, json_path, opts.camera_convention)
        all_c2w += [e.c2w_nerf for e in entries]
        missing = [e for e in entries if e.image_path is None]
        if missing:
            raise missing_images_error(json_path, missing)
        frames, n_resized = build_frames(data, entries, opts, scale, offset)
        if n_resized:
            notes.append(
                f"blender: {n_resized} image(s) in {json_path.name} differ from its w/h; intrinsics scaled"
            )
        splits[split] = frames
    held_out_every = 0
    if set(splits) == {"train"} and opts.holdout_every:
        # only transforms_train.json: hold out test frames as the instant-ngp loader path does
        held_out_every = opts.holdout_every
        splits = holdout_splits(splits["train"], held_out_every)
        notes.append(f"blender: no transforms_val.json or transforms_test.json: every {held_out_every}th "
                     "training frame held out for testing (data.holdout_every=0 keeps them all)")

    notes += warn_about_layout(np.stack(all_c2w), str(folder), opts.camera_convention)
    return Scene(
        format="blender",
        root=folder,
        splits=splits,
        aabb_scale=aabb_scale,
        box_source="override" if opts.aabb_scale is not None else "file",
        white_background=True,
        notes=notes,
        downscale=opts.fixed_downscale,
        world_scale=float(scale),
        world_offset=tuple(float(v) for v in offset),
        held_out_every=held_out_every,
    )

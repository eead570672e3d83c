"""Scene loading, the image pipeline and ray batches (DESIGN.md §1).

Entry point: :func:`load_scene`, which detects the format from the path.
"""

from __future__ import annotations

from pathlib import Path

from trainer.data.options import SceneOptions
from trainer.data.scene import SPLITS, Frame, Intrinsics, Scene, SkippedFrame
from trainer.errors import SceneError

__all__ = [
    "SPLITS",
    "Frame",
    "Intrinsics",
    "Scene",
    "SceneError",
    "SceneOptions",
    "SkippedFrame",
    "detect_format",
    "load_scene",
]


def detect_format(path: str | Path) -> str:
    """Name the scene format stored at ``path``.

    Returns one of ``"instant-ngp"`` (a ``transforms.json`` file or a folder holding one),
    ``"blender"`` (a folder with ``transforms_train.json``), ``"llff"`` (``poses_bounds.npy``),
    ``"colmap"`` (a ``sparse/`` folder, or a folder with ``cameras``/``images`` model files).

    Raises:
        SceneError: if the path does not exist or holds none of these.
    """
    p = Path(path)
    if not p.exists():
        raise SceneError(f"{p}: scene path does not exist")
    if p.is_file():
        if p.name == "poses_bounds.npy":
            return "llff"
        if p.suffix == ".json":
            if p.name.startswith("transforms_") and p.name[len("transforms_"):-5] in SPLITS:
                return "blender"
            return "instant-ngp"
        raise SceneError(f"{p}: not a scene file (expected transforms.json or poses_bounds.npy)")
    if any((p / f"transforms_{split}.json").is_file() for split in SPLITS):
        return "blender"
    if (p / "transforms.json").is_file():
        return "instant-ngp"
    if (p / "poses_bounds.npy").is_file():
        return "llff"
    if (p / "sparse").is_dir() or any((p / f"cameras{ext}").is_file() for ext in (".bin", ".txt")):
        return "colmap"
    raise SceneError(
        f"{p}: no scene found (looked for transforms.json, transforms_train.json, "
        "poses_bounds.npy, sparse/)"
    )


def load_scene(path: str | Path, **options: object) -> Scene:
    """Load the scene at ``path`` in whichever format it is stored.

    Args:
        path: a scene folder or its main file.
        **options: fields of :class:`SceneOptions` (``downscale``, ``holdout_every``,
            ``aabb_scale``).

    Returns:
        A :class:`Scene` with cameras in the trainer's convention (see :mod:`trainer.data.scene`).

    Raises:
        SceneError: for any problem with the input, naming the file, frame or key.
    """
    try:
        opts = SceneOptions(**options)  # type: ignore[arg-type]
    except TypeError as exc:
        raise SceneError(f"load_scene: {exc}") from None
    fmt = detect_format(path)
    if fmt == "instant-ngp":
        from trainer.data.formats import ngp as loader
    elif fmt == "blender":
        from trainer.data.formats import blender as loader
    elif fmt == "llff":
        from trainer.data.formats import llff as loader
    else:
        from trainer.data.formats import colmap as loader
    return loader.load(Path(path), opts)

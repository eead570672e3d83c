"""Scene loading, the image pipeline and ray batches (DESIGN.md §1).

Entry point: :func:`load_scene`, which detects the format from the path.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from trainer.contract.errors import SceneError
from trainer.contract.formats import SceneFormat, chosen_format
from trainer.contract.formats import detect_formats as detect_scene_formats
from trainer.data.options import SceneOptions
from trainer.data.resolution import factor_and_reason, size_rule_line
from trainer.data.scene import SPLITS, Frame, Intrinsics, Scene, SkippedFrame, SkippedFramesWarning

__all__ = [
    "SPLITS",
    "Frame",
    "Intrinsics",
    "Scene",
    "SceneError",
    "SceneOptions",
    "SkippedFrame",
    "SkippedFramesWarning",
    "detect_format",
    "detect_formats",
    "load_scene",
]


def detect_formats(path: str | Path) -> list[str]:
    """The names of every scene format stored at ``path``, most camera information first (the
    loading policy, ``docs/loading.md``; the table :data:`trainer.contract.formats.SCENE_FORMATS`).

    Raises:
        SceneError: if the path does not exist or holds none of these.
    """
    return [fmt.name for fmt in detect_scene_formats(path)]


def detect_format(path: str | Path, requested: str | None = None) -> str:
    """Name the scene format to load from ``path``: ``requested`` if given (it must be present),
    else the first of :func:`detect_formats`.

    Args:
        path: a scene folder or its main file.
        requested: a ``--format`` value (``"colmap"``, ``"llff"``, ``"blender"``, ``"ngp"``) or a
            format's name (``"instant-ngp"``), or None.

    Returns:
        A format's name (``"instant-ngp"``, ``"blender"``, ``"llff"``, ``"colmap"``).

    Raises:
        SceneError: nothing found, or the requested format is not stored there (naming those that are).
    """
    return chosen_format(path, detect_scene_formats(path), requested).name


def load_scene(path: str | Path, **options: object) -> Scene:
    """Load the scene at ``path`` in whichever format it is stored.

    When a folder holds several formats, the one :func:`detect_format` picks is loaded (or
    ``format``) and ``Scene.notes`` / ``Scene.ignored_formats`` name the others. When the picked
    one cannot be loaded (a COLMAP ``sparse/0`` without ``images.bin`` beside a good LLFF
    capture) and ``format`` was not given, the next that loads is used, with a note and a warning
    naming what failed.

    Args:
        path: a scene folder or its main file.
        **options: fields of :class:`SceneOptions` (``downscale``, ``holdout_every``,
            ``aabb_scale``, ``format``, ``camera_convention``).

    Returns:
        A :class:`Scene` with cameras in the trainer's convention (see :mod:`trainer.data.scene`).

    Raises:
        SceneError: for any problem with the input, naming the file, frame or key; when every
            format present fails, the first one's error, naming the others.
    """
    try:
        opts = SceneOptions(**options)  # type: ignore[arg-type]
    except TypeError as exc:
        raise SceneError(f"load_scene: {exc}") from None
    found = detect_scene_formats(path)
    fmt = chosen_format(path, found, opts.format)
    ignored = [f for f in found if f != fmt]
    try:
        scene = importlib.import_module(fmt.loader).load(Path(path), opts)
    except SceneError as exc:
        if not ignored or opts.format is not None:
            raise
        scene = _load_another(Path(path), opts, fmt, ignored, exc)  # its notes say why
        ignored = []
    if not scene.size_rule:  # instant-ngp and Blender: full size unless a factor is given
        scene.size_rule = _full_size_rule(scene, opts)
    if ignored:
        how = f"--format {fmt.flag}" if opts.format is not None else "most camera information"
        scene.ignored_formats = [f.name for f in ignored]
        scene.notes.insert(
            0,
            f"format: {fmt.name} chosen ({how}); also found and ignored: {', '.join(f.name for f in ignored)} "
            f"(--format {' / '.join(f.flag for f in ignored)} picks one)",
        )
    return scene


def _full_size_rule(scene: Scene, opts: SceneOptions) -> str:
    """:attr:`Scene.size_rule` of a format whose automatic size is full size (instant-ngp, Blender)."""
    frames = next((f for f in scene.splits.values() if f), [])
    if not frames:
        return ""
    k = frames[0].intrinsics
    factor, reason = factor_and_reason(k.width * scene.downscale, k.height * scene.downscale, opts.downscale,
                                       opts.min_downscale, automatic=False)
    return size_rule_line(scene.format, factor, reason, f"{k.width}x{k.height}",
                          "shrunk when decoded" if factor > 1 else "images at full size")


def _load_another(path: Path, opts: SceneOptions, failed: SceneFormat, others: list[SceneFormat],
                  error: SceneError) -> Scene:
    """The first of ``others`` that loads, its notes opening with why ``failed`` was passed over
    (also a warning); ``error`` (naming the others) when none loads."""
    import warnings

    for fmt in others:
        try:
            scene = importlib.import_module(fmt.loader).load(path, opts)
        except SceneError:
            continue
        note = (f"format: {fmt.name} loaded; {failed.name} was found first but cannot be loaded ({error}); "
                f"--format {failed.flag} shows that error alone")
        scene.notes.insert(0, note)
        scene.ignored_formats = [f.name for f in [failed, *others] if f != fmt]
        warnings.warn(note, stacklevel=3)
        return scene
    flags = " or ".join(f"--format {f.flag}" for f in others)
    raise SceneError(f"{error} (this folder also holds {', '.join(f.name for f in others)}: {flags} reads that "
                     "instead; it fails too)") from None

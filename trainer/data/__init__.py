"""Scene loading, the image pipeline and ray batches (DESIGN.md §1).

Entry point: :func:`load_scene`, which detects the format from the path.
"""

from __future__ import annotations

from pathlib import Path

from trainer.data.options import FORMAT_CHOICES, FORMAT_NAMES, SceneOptions
from trainer.data.resolution import factor_and_reason, size_rule_line
from trainer.data.scene import SPLITS, Frame, Intrinsics, Scene, SkippedFrame
from trainer.errors import SceneError

#: ``Scene.format`` → the ``--format`` value naming it.
FORMAT_FLAG = {"colmap": "colmap", "llff": "llff", "blender": "blender", "instant-ngp": "ngp"}

__all__ = [
    "SPLITS",
    "Frame",
    "Intrinsics",
    "Scene",
    "SceneError",
    "SceneOptions",
    "SkippedFrame",
    "detect_format",
    "detect_formats",
    "load_scene",
]


def detect_formats(path: str | Path) -> list[str]:
    """Every scene format stored at ``path``, most camera information first.

    The order is the loading policy (``docs/loading.md``): ``"colmap"`` (a ``sparse/`` folder or
    ``cameras``/``images`` model files: per-image intrinsics and distortion), ``"llff"``
    (``poses_bounds.npy``: one focal length, no distortion), ``"blender"``
    (``transforms_train.json``), ``"instant-ngp"`` (``transforms.json``). A file names its one format.

    Raises:
        SceneError: if the path does not exist or holds none of these.
    """
    p = Path(path)
    if not p.exists():
        raise SceneError(f"{p}: scene path does not exist")
    if p.is_file():
        if p.name == "poses_bounds.npy":
            return ["llff"]
        if p.suffix == ".json":
            if p.name.startswith("transforms_") and p.name[len("transforms_"):-5] in SPLITS:
                return ["blender"]
            return ["instant-ngp"]
        raise SceneError(f"{p}: not a scene file (expected transforms.json or poses_bounds.npy)")
    found = []
    if (p / "sparse").is_dir() or any((p / f"cameras{ext}").is_file() for ext in (".bin", ".txt")):
        found.append("colmap")
    if (p / "poses_bounds.npy").is_file():
        found.append("llff")
    if any((p / f"transforms_{split}.json").is_file() for split in SPLITS):
        found.append("blender")
    if (p / "transforms.json").is_file():
        found.append("instant-ngp")
    if not found:
        raise SceneError(
            f"{p}: no scene found (looked for transforms.json, transforms_train.json, "
            "poses_bounds.npy, sparse/)"
        )
    return found


def detect_format(path: str | Path, requested: str | None = None) -> str:
    """Name the scene format to load from ``path``: ``requested`` if given (it must be present),
    else the first of :func:`detect_formats`.

    Args:
        path: a scene folder or its main file.
        requested: ``"colmap"``, ``"llff"``, ``"blender"``, ``"ngp"``/``"instant-ngp"``, or None.

    Returns:
        One of ``"instant-ngp"``, ``"blender"``, ``"llff"``, ``"colmap"``.

    Raises:
        SceneError: nothing found, or the requested format is not stored there (naming those that are).
    """
    found = detect_formats(path)
    if requested is None:
        return found[0]
    wanted = FORMAT_NAMES.get(requested)
    if wanted is None:
        raise SceneError(f"--format {requested}: expected one of {', '.join(FORMAT_CHOICES)}")
    if wanted not in found:
        raise SceneError(f"{path}: --format {requested}: no {wanted} scene here (found: {', '.join(found)})")
    return wanted


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
    found = detect_formats(path)
    fmt = detect_format(path, opts.format)
    ignored = [f for f in found if f != fmt]
    try:
        scene = _loader(fmt).load(Path(path), opts)
    except SceneError as exc:
        if not ignored or opts.format is not None:
            raise
        scene = _load_another(Path(path), opts, fmt, ignored, exc)  # its notes say why
        fmt, ignored = scene.format, []
    if not scene.size_rule:  # instant-ngp and Blender: full size unless a factor is given
        scene.size_rule = _full_size_rule(scene, opts)
    if ignored:
        how = f"--format {FORMAT_FLAG[fmt]}" if opts.format is not None else "most camera information"
        scene.ignored_formats = ignored
        scene.notes.insert(
            0,
            f"format: {fmt} chosen ({how}); also found and ignored: {', '.join(ignored)} "
            f"(--format {' / '.join(FORMAT_FLAG[f] for f in ignored)} picks one)",
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


def _loader(fmt: str):
    """The module that loads ``fmt`` (``Scene.format``)."""
    if fmt == "instant-ngp":
        from trainer.data.formats import ngp as loader
    elif fmt == "blender":
        from trainer.data.formats import blender as loader
    elif fmt == "llff":
        from trainer.data.formats import llff as loader
    else:
        from trainer.data.formats import colmap as loader
    return loader


def _load_another(path: Path, opts: SceneOptions, failed: str, others: list[str], error: SceneError) -> Scene:
    """The first of ``others`` that loads, its notes opening with why ``failed`` was passed over
    (also a warning); ``error`` (naming the others) when none loads."""
    import warnings

    for fmt in others:
        try:
            scene = _loader(fmt).load(path, opts)
        except SceneError:
            continue
        note = (f"format: {fmt} loaded; {failed} was found first but cannot be loaded ({error}); "
                f"--format {FORMAT_FLAG[failed]} shows that error alone")
        scene.notes.insert(0, note)
        scene.ignored_formats = [f for f in [failed, *others] if f != fmt]
        warnings.warn(note, stacklevel=3)
        return scene
    flags = " or ".join(f"--format {FORMAT_FLAG[f]}" for f in others)
    raise SceneError(f"{error} (this folder also holds {', '.join(others)}: {flags} reads that instead; it fails "
                     "too)") from None

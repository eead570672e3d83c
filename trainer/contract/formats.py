"""The scene formats the trainer reads: one table that the loader, the ``--format`` flag, the
``data.format`` rule, ``inspect`` and the docs read (``docs/loading.md``).

Each :class:`SceneFormat` names its loader module (``load(path, options) -> Scene``, imported only
when a scene of that format is loaded) and how a folder or a file shows that it holds the format.
:data:`SCENE_FORMATS` lists them in the loading policy's order: when a folder holds several, the
first one found is loaded (most camera information first: COLMAP's per-image intrinsics and
distortion, LLFF's one focal length, then the two ``transforms*.json`` layouts).

Adding a format: its loader module under ``trainer/data/formats/``, one :class:`SceneFormat` line
in :data:`SCENE_FORMATS`, and a test that writes a tiny scene of it.

Stdlib only.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

from trainer.contract.errors import SceneError

__all__ = [
    "FORMAT_CHOICES",
    "SCENE_FORMATS",
    "SPLITS",
    "SceneFormat",
    "check_scene_found",
    "chosen_format",
    "detect_formats",
    "format_by_flag",
    "format_named",
    "held_scene",
    "shrunk_image_folders",
]

SPLITS = ("train", "val", "test")
"""The splits a scene may have, in order."""


@dataclasses.dataclass(frozen=True)
class SceneFormat:
    """One scene format.

    Attributes:
        name: the name a loaded scene carries (``Scene.format``) and messages use, e.g. ``"instant-ngp"``.
        flag: the value of ``--format`` and ``data.format`` that picks it, e.g. ``"ngp"``.
        loader: the module whose ``load(path, options)`` reads it, e.g. ``"trainer.data.formats.ngp"``.
        has_splits: the scene's own files say which frames are for training and which for testing
            (otherwise frames are held out by ``data.holdout_every``).
        markers: paths inside a folder whose presence shows the format (``"sparse/"``: a folder).
        file_pattern: a regular expression a file's name fully matches when the file alone is a
            scene of this format, or None.
        model_globs: glob patterns inside the folder of which one must match for the scene to be
            loadable (COLMAP: a ``cameras`` file in ``sparse/``, a ``sparse/<k>`` or the folder);
            empty: the markers suffice.
        model_hint: those patterns in words, for the error that finds none.
        image_folders: the images lie in an ``images/`` or ``images_N/`` folder of the scene root
            (LLFF, COLMAP; COLMAP's root for a model folder given alone: it, its parent or its
            grandparent).
    """

    name: str
    flag: str
    loader: str
    has_splits: bool
    markers: tuple[str, ...]
    file_pattern: str | None = None
    model_globs: tuple[str, ...] = ()
    model_hint: str = ""
    image_folders: bool = False

    def model_missing(self, folder: Path) -> bool:
        """Whether ``folder``, which shows this format's markers, lacks every :attr:`model_globs`."""
        return bool(self.model_globs) and not any(any(folder.glob(g)) for g in self.model_globs)

    def image_roots(self, folder: Path) -> list[Path]:
        """The folders whose ``images/`` or ``images_N/`` the loader reads for the scene
        ``folder`` (:attr:`image_folders`; empty for a format without them)."""
        if not self.image_folders:
            return []
        if (folder / "sparse").is_dir() or (folder / "poses_bounds.npy").is_file():
            return [folder]
        return [folder, folder.parent, folder.parent.parent]  # a COLMAP model folder given alone

    def images_missing(self, folder: Path) -> bool:
        """Whether ``folder``, which shows this format's markers, has no image folder where the
        loader looks (:meth:`image_roots`)."""
        roots = self.image_roots(folder)
        return bool(roots) and not any((root / "images").is_dir() or shrunk_image_folders(root) for root in roots)

    def in_folder(self, folder: Path) -> bool:
        """Whether ``folder`` holds a scene of this format (one of :attr:`markers` is there)."""
        for marker in self.markers:
            path = folder / marker.rstrip("/")
            if (path.is_dir() if marker.endswith("/") else path.is_file()):
                return True
        return False

    @property
    def with_article(self) -> str:
        """``"a blender scene"``, ``"an instant-ngp scene"``: the format in a sentence."""
        return f"{'an' if self.name[0] in 'aeiou' else 'a'} {self.name} scene"

    def is_file(self, path: Path) -> bool:
        """Whether the file ``path`` alone is a scene of this format."""
        return self.file_pattern is not None and re.fullmatch(self.file_pattern, path.name) is not None


SCENE_FORMATS: tuple[SceneFormat, ...] = (
    SceneFormat("colmap", "colmap", "trainer.data.formats.colmap", False, ("sparse/", "cameras.bin", "cameras.txt"),
                model_globs=tuple(f"{where}cameras.{ext}" for where in ("sparse/*/", "sparse/", "")
                                  for ext in ("bin", "txt")),
                model_hint="cameras.bin or cameras.txt in sparse/<k>/, in sparse/ or in the folder",
                image_folders=True),
    SceneFormat("llff", "llff", "trainer.data.formats.llff", False, ("poses_bounds.npy",), r"poses_bounds\.npy",
                image_folders=True),
    SceneFormat("blender", "blender", "trainer.data.formats.blender", True,
                tuple(f"transforms_{split}.json" for split in SPLITS), rf"transforms_({'|'.join(SPLITS)})\.json"),
    SceneFormat("instant-ngp", "ngp", "trainer.data.formats.ngp", False, ("transforms.json",), r".+\.json"),
)
"""Every format, in the loading policy's order (most camera information first)."""

PHOTO_SUFFIXES: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".exr", ".heic", ".webp")
"""Image files whose presence in a folder of no scene suggests raw photos (``ngptune prepare``'s input)."""

VIDEO_SUFFIXES: tuple[str, ...] = (".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v")
"""Video files, the other input of ``ngptune prepare``."""

FORMAT_CHOICES: tuple[str, ...] = tuple(f.flag for f in SCENE_FORMATS)
"""The values ``--format`` and ``data.format`` accept (besides ``data.format``'s ``"auto"``)."""


def shrunk_image_folders(root: Path) -> list[Path]:
    """The ``images_<N>/`` folders of ``root`` (copies of ``images/`` shrunk N times, read with
    ``--downscale N``), by name; an ``images_backup/`` is none of them."""
    return sorted(p for p in root.glob("images_*") if p.is_dir() and re.fullmatch(r"images_[0-9]+", p.name))


def format_named(name: str) -> SceneFormat:
    """The format whose :attr:`~SceneFormat.name` or :attr:`~SceneFormat.flag` is ``name``.

    Raises:
        KeyError: no format is called that.
    """
    for fmt in SCENE_FORMATS:
        if name in (fmt.name, fmt.flag):
            return fmt
    raise KeyError(name)


def format_by_flag(flag: str) -> SceneFormat:
    """The format ``--format flag`` asks for (its name is accepted too).

    Raises:
        SceneError: ``--format <flag>: expected one of colmap, llff, blender, ngp``.
    """
    try:
        return format_named(flag)
    except KeyError:
        raise SceneError(f"--format {flag}: expected one of {', '.join(FORMAT_CHOICES)}") from None


def detect_formats(path: str | Path) -> list[SceneFormat]:
    """Every scene format stored at ``path``, in :data:`SCENE_FORMATS` order (a file names its one
    format).

    Raises:
        SceneError: the path does not exist, or holds none of the formats (naming what was looked
            for, and the parent folder when it holds a scene, else ``ngptune prepare`` when the
            folder holds photos).
    """
    p = Path(path)
    if not p.exists():
        raise SceneError(f"{p}: scene path does not exist")
    if p.is_file():
        for fmt in SCENE_FORMATS:
            if fmt.is_file(p):
                return [fmt]
        files = ", ".join(fmt.markers[0] for fmt in SCENE_FORMATS if fmt.file_pattern is not None)
        hint = (f"; a video: `ngptune prepare {shlex.quote(str(p))} --out SCENE` makes a scene of its frames"
                if p.suffix.lower() in VIDEO_SUFFIXES else "")
        raise SceneError(f"{p}: not a scene file (expected one of {files}){hint}")
    found = [fmt for fmt in SCENE_FORMATS if fmt.in_folder(p)]
    if not found:
        parent = [fmt for fmt in SCENE_FORMATS if fmt.in_folder(p.parent)] if p.parent != p else []
        photos = any(f.suffix.lower() in PHOTO_SUFFIXES + VIDEO_SUFFIXES for f in p.iterdir() if f.is_file())
        hint = (f"; its parent folder {p.parent} holds {parent[0].with_article}" if parent else
                f"; a folder of photos: `ngptune prepare {shlex.quote(str(p))} --out SCENE` makes a scene of them"
                if photos else "")
        raise SceneError(f"{p}: no scene found (looked for {', '.join(fmt.markers[0] for fmt in SCENE_FORMATS)}){hint}")
    return found


def chosen_format(path: str | Path, found: list[SceneFormat], requested: str | None) -> SceneFormat:
    """Of the formats ``found`` at ``path`` (:func:`detect_formats`), the one a run loads:
    ``requested`` (a ``--format`` value or a format's name; None or ``"auto"``: the first found).

    Raises:
        SceneError: ``requested`` is not a format, or not one found (naming those that are).
    """
    if requested in (None, "auto"):
        return found[0]
    wanted = format_by_flag(requested)
    if wanted not in found:
        raise SceneError(f"{path}: --format {requested}: no {wanted.name} scene here "
                         f"(found: {', '.join(f.name for f in found)})")
    return wanted


def check_scene_found(path: str | Path, requested: str | None = None) -> SceneFormat:
    """The format a run will load from ``path`` (:func:`chosen_format`), from the folder's files
    alone, before anything is written: what the loader refuses first.

    Raises:
        SceneError: the path does not exist, holds no scene (:func:`detect_formats`), none of
            the requested format, or a folder of the format without its model (a COLMAP
            ``sparse/`` with no ``cameras`` file in it or its subfolders) or its image folder
            (LLFF, COLMAP: no ``images/`` or ``images_N/``).
    """
    fmt = chosen_format(path, detect_formats(path), requested)
    if Path(path).is_dir() and fmt.model_missing(Path(path)):
        raise SceneError(f"{path}: no {fmt.name} model (expected {fmt.model_hint})")
    folder = Path(path)
    if folder.is_dir() and fmt.images_missing(folder):
        roots = fmt.image_roots(folder)
        where = (f"{roots[0] / 'images'}: image folder not found" if len(roots) == 1 else
                 f"{folder}: no images/ folder in it, {roots[1]} or {roots[2]}")
        raise SceneError(f"{where} (a {fmt.name} scene keeps its images in images/, or images_N/ shrunk N times)")
    return fmt


def held_scene(path: str | Path) -> SceneFormat | None:
    """The format :func:`check_scene_found` finds at ``path``, or None where it finds no scene
    (for messages about a scene given where something else was expected)."""
    try:
        return check_scene_found(path)
    except SceneError:
        return None

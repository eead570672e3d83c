"""``ngptune prepare INPUT --out SCENE``: a posed scene from a folder of photos or a video.

Stages: ``frames`` (photos checked and copied, or video frames chosen; :mod:`.frames`),
``features``, ``matching``, ``mapping`` (pycolmap; :mod:`.sfm`), then ``transforms.json``
(:mod:`.transforms`) and the registration report (:mod:`.report`). Everything is written into a
temporary folder beside ``SCENE`` and renamed to ``SCENE`` when complete, so a failed or
interrupted run leaves nothing under that name::

    SCENE/transforms.json        instant-ngp cameras (ngptune train --scene SCENE)
    SCENE/images/                the photos, or the chosen video frames
    SCENE/colmap/sparse/0/       the kept COLMAP model (cameras.bin, images.bin, points3D.bin, ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ngptune.errors import PrepareError
from ngptune.prepare.frames import IMAGES_DIR, PHOTO_SUFFIXES
from ngptune.prepare.sfm import CAMERA_MODELS, MATCHERS

__all__ = ["DEFAULT_VIDEO_FRAMES", "PrepareResult", "prepare_scene", "register"]

#: Frames kept from a video when neither ``--frames`` nor ``--fps`` is given.
DEFAULT_VIDEO_FRAMES = 100
TRANSFORMS_NAME = "transforms.json"
SPARSE_DIR = Path("colmap") / "sparse" / "0"


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """A prepared scene: its folder, its ``transforms.json`` and the registration report
    (:class:`ngptune.prepare.report.RegistrationReport`)."""

    scene: Path
    transforms_path: Path
    report: object


def _check_out(out: Path, force: bool) -> None:
    if out.exists() and not force and not (out.is_dir() and not any(out.iterdir())):
        raise PrepareError(f"{out}: already exists; choose another --out, or add --force to replace it")


def _install(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``, replacing what ``out`` held."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
        os.replace(out, old / out.name)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def prepare_scene(source: Path, out: Path, *, n_frames: int | None = None, fps: float | None = None,
                  matcher: str = "auto", camera_model: str = "OPENCV", max_features: int = 8192,
                  force: bool = False, verbose: bool = False, quiet: bool = False) -> PrepareResult:
    """Make the scene ``out`` from the photos folder or video ``source`` (module docstring).

    Args:
        source: a folder of photos, or a video file.
        out: the scene folder to write; must not exist (an empty folder is fine) unless ``force``.
        n_frames, fps: video frames to keep (at most one; default :data:`DEFAULT_VIDEO_FRAMES`).
        matcher: ``auto`` (sequential for a video, exhaustive for photos), ``exhaustive`` or ``sequential``.
        camera_model: COLMAP camera model (:data:`ngptune.prepare.sfm.CAMERA_MODELS`).
        max_features: SIFT features per image at most.
        force: replace an existing ``out`` once the new scene is complete.
        verbose: keep COLMAP's own log lines.
        quiet: no progress bars or stage lines.

    Raises:
        PrepareError: bad input (no photos, an undecodable photo or video, mixed sizes), a stage
            failing, or fewer than 3 images registered; nothing is left under ``out``'s name.
        KeyboardInterrupt: likewise with nothing left.
    """
    from ngptune.prepare.frames import collect_photos, photo_files, select_video_frames
    from ngptune.prepare.progress import StageProgress
    from ngptune.prepare.report import registration_report
    from ngptune.prepare.sfm import SfmOptions, run_sfm
    from ngptune.prepare.transforms import write_transforms

    source, out = Path(source), Path(out)
    if not source.exists():
        raise PrepareError(f"{source}: no such file or folder")
    is_video = not source.is_dir()
    if is_video and source.suffix.lower() in PHOTO_SUFFIXES:
        raise PrepareError(f"{source}: one photo; give a folder of photos, or a video file")
    if not is_video and (n_frames is not None or fps is not None):
        raise PrepareError(f"{source}: --frames and --fps choose frames of a video; this is a folder of photos")
    if is_video and n_frames is None and fps is None:
        n_frames = DEFAULT_VIDEO_FRAMES
    if matcher == "auto":
        matcher = "sequential" if is_video else "exhaustive"
    options = SfmOptions(matcher=matcher, camera_model=camera_model, max_features=max_features, verbose=verbose)
    _check_out(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    progress = StageProgress(quiet=quiet)
    try:
        images_dir = tmp / IMAGES_DIR
        if is_video:
            with progress.stage("frames", 0, "video frames") as stage:
                images = select_video_frames(source, images_dir, n_frames=n_frames, fps=fps,
                                             on_start=stage.set_total, advance=stage.advance)
        else:
            photos = photo_files(source)
            with progress.stage("frames", len(photos), "photos") as stage:
                images = collect_photos(source, images_dir, advance=stage.advance)
        work = tmp / "colmap" / "work"
        sfm = run_sfm(images, work, options, progress)
        sparse = tmp / SPARSE_DIR
        sparse.mkdir(parents=True)
        sfm.reconstruction.write(str(sparse))
        shutil.rmtree(work)
        transforms = write_transforms(tmp / TRANSFORMS_NAME, sfm.reconstruction, images)
        progress.close()
        _check_out(out, force)
        _install(tmp, out)
    except BaseException:
        progress.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report = registration_report(sfm.reconstruction, sfm.n_models, images, transforms, progress.seconds, out)
    return PrepareResult(scene=out, transforms_path=out / TRANSFORMS_NAME, report=report)


def _positive(kind: type) -> Any:
    """argparse type: a finite ``kind`` (int or float) > 0."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number > 0, got {text!r}")
        return value

    return parse


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as after Ctrl-C (the partial folder removed), with exit status 143."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def prepare_command(args: argparse.Namespace) -> int:
    """``ngptune prepare``: exit status 0, 2 on bad input (raised as PrepareError), 130 on Ctrl-C,
    143 on SIGTERM (both leave nothing under ``--out`` and no partial folder beside it)."""
    import signal
    import sys

    from ngptune.console import make_console
    from ngptune.prepare.report import print_report

    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        result = prepare_scene(args.input, args.out, n_frames=args.frames, fps=args.fps, matcher=args.matcher,
                               camera_model=args.camera_model, force=args.force, verbose=args.verbose,
                               quiet=args.quiet)
    except KeyboardInterrupt as exc:
        how, code = ("stopped (SIGTERM)", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
        print(f"prepare: {how}; nothing was written to {args.out}", file=sys.stderr)
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_report(result.report, make_console())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ngptune prepare`` to the CLI."""
    p = subparsers.add_parser(
        "prepare",
        help="a posed scene from a folder of photos or a video: frames, COLMAP structure from motion, transforms.json",
        description="Choose frames (a video: the sharpest of each segment), run COLMAP through pycolmap (SIFT, "
                    "matching, incremental mapping, the largest model kept) and write an instant-ngp scene: "
                    "SCENE/transforms.json, SCENE/images/, SCENE/colmap/sparse/0/. Prints a registration report.",
    )
    p.add_argument("input", type=Path, help="a folder of photos (.jpg, .jpeg, .png; one size) or a video file")
    p.add_argument("--out", type=Path, required=True, help="the scene folder to write (must not exist, unless --force)")
    frames = p.add_mutually_exclusive_group()
    frames.add_argument("--frames", type=_positive(int), default=None, metavar="N",
                        help=f"a video: keep N frames, the sharpest of each of N equal segments (default {DEFAULT_VIDEO_FRAMES})")
    frames.add_argument("--fps", type=_positive(float), default=None,
                        help="a video: keep this many frames per second of video (the sharpest of each 1/FPS s)")
    p.add_argument("--matcher", choices=("auto",) + MATCHERS, default="auto",
                   help="image pairs to match: auto (sequential for a video, exhaustive for photos; default)")
    p.add_argument("--camera-model", choices=CAMERA_MODELS, default="OPENCV",
                   help="COLMAP camera model, one camera per device (default OPENCV: fx, fy, cx, cy, k1, k2, p1, p2)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists (once the new scene is complete)")
    p.add_argument("--verbose", action="store_true", help="show COLMAP's own log lines")
    p.add_argument("--quiet", action="store_true", help="no progress bars; only the report")
    p.set_defaults(func=prepare_command)

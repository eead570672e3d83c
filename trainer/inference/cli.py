"""``render`` and ``export`` command lines (``python -m trainer.inference``; ``ngptune render|export``
runs this process, with the same flags: :mod:`trainer.contract.commandline`).

Every flag is checked before the model is loaded; bad input ends with one ``error:`` statement
naming the flag, file or key (in lines under 80 columns; a rank of ``--nproc-per-node`` prints it
on one line for the launcher to read), exit status 2, and nothing is written. Ctrl-C ends with one
``interrupted:`` line (how far it got, what was kept), exit status 130.

On a CPU each rank takes the threads of the trainer's rule (:mod:`trainer.contract.threads`: the
run's ``training.cpu_threads``, or ``--cpu-threads N``; 0 = the cores other processes leave free //
ranks), and the first line, printed
before the scene is loaded, says what computes where: the model, its step, the device and the
threads, and for a render what the flags ask for. Once the cameras are built, a render's second
line gives the frames and their size where the first could not, and, for more than
:data:`ESTIMATE_MIN_RAYS` rays, a time measured on a sample of them (a warning when it is longer
than :data:`LONG_RENDER_S`). A mesh export's second line, before its density pass, gives that
pass's time measured on a sample of the lattice's points (a warning above the same bound), and
Ctrl-C during the pass says how many of its slices were done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence

from trainer.contract.commandline import (
    DEFAULT_FPS,
    DEFAULT_SECONDS,
    EXPORT_HELP,
    RENDER_HELP,
    add_export_arguments,
    add_render_arguments,
)
from trainer.contract.errors import ConfigError, TrainerError
from trainer.contract.metrics import si_number
from trainer.contract.runstatus import fitted_error_lines, fitted_warning, print_error
from trainer.contract.signals import handlers_replaced
from trainer.contract.textlines import counted, estimate_text, fit_lines, listed, seconds_text
from trainer.contract.usage import parse_command_line

__all__ = ["build_parser", "export_command", "frame_rate_text", "long_mesh_warning", "main",
           "mesh_estimate_lines", "mesh_result_lines", "pointcloud_result_lines", "render_command",
           "render_result_lines"]

ESTIMATE_MIN_RAYS = 200_000  # renders with fewer rays start without measuring their time first
LONG_RENDER_S = 600.0  # an estimated render longer than this gets a warning on how to shorten it
SPLITS = ("test", "train", "val")
RENDER_GROUP_TIMEOUT_S = 6 * 3600.0  # ranks that finish early wait this long at the final barrier
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports Ctrl-C
TERMINATED_EXIT = 143  # 128 + SIGTERM
MAX_SIDE_PX = 16384  # --width / --height: larger frames do not fit a device's memory or a video encoder
MAX_FRAMES = 100_000  # frames of one render (about 55 min at 30 fps)


def build_parser(prog: str = "python -m trainer.inference") -> argparse.ArgumentParser:
    """``render`` and ``export`` with the flags of :mod:`trainer.contract.commandline`."""
    parser = argparse.ArgumentParser(prog=prog, description="Render or export a trained instant-NGP model.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("render", help=RENDER_HELP)
    add_render_arguments(p)
    p.set_defaults(func=render_command)
    p = commands.add_parser("export", help=EXPORT_HELP)
    add_export_arguments(p)
    p.set_defaults(func=export_command)
    return parser


def _model_folder(model: Path) -> Path:
    return model.parent if model.is_file() else model


def check_device_flag(device: str | None) -> None:
    """Refuse a ``--device`` that is no torch device, or CUDA where there is none.

    Raises:
        ConfigError: one line naming ``--device``.
    """
    if device is None or device == "auto":
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {device}: expected cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {device}: no CUDA device is available on this machine; use --device cpu")
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s) (cuda:0 to cuda:{count - 1})")
    elif parsed.type != "cpu":
        raise ConfigError(f"--device {device}: expected cpu, cuda or cuda:N")


def check_cpu_threads_flag(cpu_threads: int | None) -> None:
    """Refuse a negative ``--cpu-threads``.

    Raises:
        ConfigError: one line naming ``--cpu-threads``.
    """
    if cpu_threads is not None and cpu_threads < 0:
        raise ConfigError(f"--cpu-threads {cpu_threads}: expected an integer >= 0 (0: cores // ranks)")


def _requested_threads(args: argparse.Namespace, cfg: Any) -> tuple[int, str]:
    """The thread count asked for and what asked for it: ``--cpu-threads``, else the run's
    ``training.cpu_threads``."""
    if args.cpu_threads is not None:
        return args.cpu_threads, "--cpu-threads"
    return cfg.training.cpu_threads, "the run's training.cpu_threads"


def device_words(args: argparse.Namespace, cfg: Any, device_type: str, local_ranks: int) -> str:
    """Where the first line says the work runs, with no bracket inside another: ``on cpu, 1 CPU
    thread per rank (--cpu-threads)`` (:func:`trainer.contract.threads.describe_cpu_threads` for
    ``local_ranks`` ranks on the host), or ``on cuda:0``."""
    from trainer.contract.threads import describe_cpu_threads

    if device_type != "cpu":
        return f"on {device_type}"
    requested, setting = _requested_threads(args, cfg)
    return f"on cpu, {describe_cpu_threads(requested, local_ranks, setting)}"


def apply_threads(args: argparse.Namespace, cfg: Any, device: Any, local_ranks: int) -> str:
    """Set this process's intra-op threads on a CPU (``--cpu-threads``, else the run's
    ``training.cpu_threads``, by :func:`trainer.cpu_threads.apply_cpu_threads` for ``local_ranks``
    ranks on the host) and return the words for the first line, those of the count it set
    (as :func:`device_words` writes them)."""
    from trainer.cpu_threads import apply_cpu_threads

    if device.type != "cpu":
        return f"on {device}"
    requested, setting = _requested_threads(args, cfg)
    return f"on cpu, {apply_cpu_threads(requested, local_ranks, setting).words}"


def _say_stopped(how: str, what: str) -> None:
    """``HOW: WHAT`` on stderr, broken after its semicolons into lines under 80 columns."""
    print("\n".join(fit_lines(listed(f"{how}: {what}".split("; "), ";"))), file=sys.stderr, flush=True)


def _interrupted(what: str) -> int:
    _say_stopped("interrupted", what)
    return INTERRUPTED_EXIT


def _camera_label(cameras: str) -> str:
    return Path(cameras).stem if cameras.endswith(".json") else cameras


# ---------------------------------------------------------------------------- render


def check_render_flags(args: argparse.Namespace) -> None:
    """Everything about the flags that can be refused before loading the model.

    Raises:
        ConfigError: one line naming the flag.
    """
    from trainer.inference.loading import check_model_path
    from trainer.inference.outputs import check_video_path, parse_background, prepare_output_dir

    check_model_path(args.model)
    check_device_flag(args.device)
    check_cpu_threads_flag(args.cpu_threads)
    for flag, value, minimum in (("--spp", args.spp, 1), ("--width", args.width, 1), ("--height", args.height, 1),
                                 ("--downscale", args.downscale, 1), ("--frames", args.frames, 1),
                                 ("--nproc-per-node", args.nproc_per_node, 1)):
        if value is not None and value < minimum:
            raise ConfigError(f"{flag} {value}: expected an integer >= {minimum}")
    for flag, value in (("--width", args.width), ("--height", args.height)):
        if value is not None and value > MAX_SIDE_PX:
            raise ConfigError(f"{flag} {value}: expected at most {MAX_SIDE_PX} pixels")
    for flag, value in (("--fps", args.fps), ("--seconds", args.seconds), ("--radius", args.radius)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{flag} {value:g}: expected a finite number > 0")
    if args.elevation is not None and not -90 <= args.elevation <= 90:
        raise ConfigError(f"--elevation {args.elevation:g}: expected degrees in [-90, 90]")
    if args.fov is not None and not 0 < args.fov < 180:
        raise ConfigError(f"--fov {args.fov:g}: expected degrees in (0, 180)")
    arc = getattr(args, "arc", None)
    if arc is not None and not 0 < arc <= 360:
        raise ConfigError(f"--arc {arc}: expected degrees in (0, 360]")
    if arc is not None and args.cameras != "orbit":
        raise ConfigError(f"--arc {arc:g}: only with --cameras orbit (the cameras are {args.cameras})")
    if args.frames is not None and args.seconds is not None and args.cameras not in SPLITS:
        raise ConfigError(f"--frames {args.frames} and --seconds {args.seconds:g}: give one of them (an orbit or path "
                          "of --seconds S has S × --fps frames; --frames N makes N frames, played at --fps)")
    asked = args.frames if args.frames is not None else (args.fps or DEFAULT_FPS) * (args.seconds or DEFAULT_SECONDS)
    if asked > MAX_FRAMES:
        how = f"--frames {args.frames}" if args.frames is not None else \
            f"--seconds {args.seconds or DEFAULT_SECONDS:g} at {args.fps or DEFAULT_FPS:g} fps: {asked:.3g} frames"
        raise ConfigError(f"{how}: expected at most {MAX_FRAMES} frames")
    if args.cameras not in ("test", "train", "val", "orbit") and not args.cameras.endswith(".json"):
        raise ConfigError(f"--cameras {args.cameras}: expected test, train, val, orbit or a camera-path .json file")
    if args.cameras.endswith(".json") and not Path(args.cameras).is_file():
        raise ConfigError(f"--cameras {args.cameras}: camera-path file not found")
    if args.background is not None:
        parse_background(args.background)
    if args.video is not None:
        check_video_path(args.video)
    if args.out is None and args.video is None:
        args.out = _model_folder(args.model) / f"render-{_camera_label(args.cameras)}"
    if args.depth and args.out is None:
        raise ConfigError("--depth: depth PNGs need a folder; give --out DIR as well as --video")
    if args.compare and (args.cameras not in SPLITS or args.width or args.height or args.downscale):
        raise ConfigError(f"--compare: needs the views of a split at their own size (--cameras test, train or val, "
                          f"without --width, --height, --downscale); got --cameras {args.cameras}"
                          + (" with a new size" if args.cameras in SPLITS else ""))
    if args.compare and args.out is None:
        raise ConfigError("--compare: the side-by-side images need a folder; give --out DIR as well as --video")
    if args.out is not None:
        from trainer.inference.loading import find_model_source

        find_model_source(args.model)  # no model there: said before an output folder is made
        prepare_output_dir(args.out)


def split_views(args: argparse.Namespace, model: Any) -> list[tuple[int, Any]]:
    """``(index in the split, frame)`` of the views ``--cameras test|train|val`` and ``--frames``
    ask for (evenly spaced, as evaluation chooses them)."""
    from trainer.inference import cameras as cams
    from trainer.train.evaluate import evaluation_frames

    return evaluation_frames(cams.split_cameras(model.scene, args.cameras), args.frames)


def build_cameras(args: argparse.Namespace, model: Any) -> tuple[list, str]:
    """The frames ``args`` ask for (see :mod:`trainer.inference.cameras`) and, for an orbit, what
    it sweeps (``orbit (a 92° arc)``, ``orbit (a full circle)``; else empty)."""
    from trainer.inference import cameras as cams
    from trainer.inference.worldframe import units_per_cube_unit

    scene = model.scene
    if args.cameras in SPLITS:
        frames = [f for _, f in split_views(args, model)]
        return cams.resize_cameras(frames, args.width, args.height, args.downscale), ""
    first = cams.resize_cameras(scene.frames("train")[:1], args.width, args.height, args.downscale)[0]
    if args.cameras == "orbit":
        n = args.frames or max(1, round((args.fps or DEFAULT_FPS) * (args.seconds or DEFAULT_SECONDS)))
        radius = None if args.radius is None else args.radius / units_per_cube_unit(scene)
        orbit = cams.scene_orbit(scene, radius=radius, elevation_deg=args.elevation, arc_deg=getattr(args, "arc", None))
        intrinsics = first.intrinsics
        if args.fov is not None:
            from trainer.data.scene import Intrinsics
            import math

            fy = 0.5 * intrinsics.height / math.tan(math.radians(args.fov) / 2)
            intrinsics = Intrinsics(width=intrinsics.width, height=intrinsics.height, fx=fy, fy=fy,
                                    cx=intrinsics.width / 2, cy=intrinsics.height / 2)
        return cams.orbit_cameras(orbit, n, intrinsics), f"orbit ({orbit.description})"
    path = cams.read_camera_path(Path(args.cameras), scene)
    width = args.width or path.width or first.intrinsics.width
    height = args.height or path.height or (first.intrinsics.height if not args.width else
                                            round(first.intrinsics.height * width / first.intrinsics.width))
    if args.downscale:  # after the size asked for, as for the other cameras
        width, height = max(1, round(width / args.downscale)), max(1, round(height / args.downscale))
    fps = args.fps or path.fps or DEFAULT_FPS
    n = args.frames or max(1, round(fps * (args.seconds or path.seconds or DEFAULT_SECONDS)))
    return cams.path_cameras(path, n, width, height), ""


def _render_job(args: argparse.Namespace, model: Any) -> Any:
    from trainer.inference.outputs import parse_background
    from trainer.inference.render_views import RenderJob

    background = args.background or ("white" if model.scene.white_background else "black")
    fps = args.fps
    if fps is None and args.cameras.endswith(".json"):
        from trainer.inference.cameras import read_camera_path

        fps = read_camera_path(Path(args.cameras), model.scene).fps
    names, own_size = None, False
    if args.cameras in SPLITS:
        from trainer.contract.rundir import view_name

        names = [view_name(args.cameras, index) for index, _ in split_views(args, model)]
        own_size = not (args.width or args.height or args.downscale)
    cameras, label = build_cameras(args, model)
    return RenderJob(cameras=cameras, spp=args.spp, background=parse_background(background),
                     depth=args.depth, out_dir=args.out, video=args.video, fps=fps or DEFAULT_FPS, seed=args.seed,
                     quiet=args.quiet, names=names, score=own_size,
                     compare=args.compare, label=label)


def render_estimate_s(model: Any, job: Any, cameras: list | None = None) -> float | None:
    """Seconds the render of ``cameras`` (default all of ``job``'s; a rank's share) at ``job.spp``
    will take, measured before the first frame on a small batch of rays of the first camera alone
    (:func:`trainer.inference.estimate.first_camera_seconds`: a few hundred rays, well under a
    second on a CPU, however large the frames or many the cameras) and scaled to all their rays;
    None for a small render (fewer than :data:`ESTIMATE_MIN_RAYS` rays) or a subgrid model
    (rendered by another path)."""
    from trainer.inference import estimate

    cameras = job.cameras if cameras is None else cameras
    sizes = [c.intrinsics.width * c.intrinsics.height for c in cameras]
    if not sizes or sum(sizes) * job.spp < ESTIMATE_MIN_RAYS:
        return None
    first = estimate.model_camera_seconds(model, cameras[0])
    return None if first is None else first * sum(sizes) / sizes[0] * job.spp


def _split_words(split: str, count: int | None) -> str:
    if count is None:
        return f"the {split} views"
    return f"{count} {split} view{'s' if count != 1 else ''}"


def _frame_words(count: int | None, label: str) -> str:
    if count is None:
        return f"the frames of {label}"
    return f"{count} frame{'s' if count != 1 else ''} of {label}"


def _output_words(args: argparse.Namespace) -> str:
    """What the flags add to each frame: ``, over #202020, with depth, beside the ground truth``."""
    words = []
    if getattr(args, "background", None) is not None:
        words.append(f"over {args.background}")
    if getattr(args, "depth", False):
        words.append("with depth")
    if getattr(args, "compare", False):
        words.append("beside the ground truth")
    return "".join(f", {w}" for w in words)


def planned_render_words(args: argparse.Namespace) -> str:
    """What ``args`` ask to render, in the words of :func:`render_words`, as far as the flags say it
    without the scene: ``300 frames of orbit of 1920x1080, spp 1``, ``the test views, spp 8``,
    ``1 test view, spp 1, over #202020, with depth``."""
    if args.cameras in SPLITS:
        what = _split_words(args.cameras, args.frames)
    elif args.cameras == "orbit":
        what = _frame_words(args.frames or max(1, round((args.fps or DEFAULT_FPS) * (args.seconds or DEFAULT_SECONDS))),
                            "orbit")
    else:
        what = _frame_words(args.frames, _camera_label(args.cameras))
    size = ""
    if args.width and args.height:  # --downscale shrinks after --width/--height (at least 1 pixel)
        shrink = args.downscale or 1
        size = f" of {max(1, round(args.width / shrink))}x{max(1, round(args.height / shrink))}"
    return f"{what}{size}, spp {args.spp}{_output_words(args)}"


def render_words(args: argparse.Namespace, job: Any) -> str:
    """What ``job`` renders: ``8 test views of 100x100, spp 8``, ``300 frames of orbit (a 92° arc)
    of 1920x1080, spp 1``."""
    k = job.cameras[0].intrinsics
    n = len(job.cameras)
    if args.cameras in SPLITS:
        what = _split_words(args.cameras, n)
    else:
        what = _frame_words(n, job.label or _camera_label(args.cameras))
    if args.cameras in SPLITS and args.frames is not None and args.frames > n:
        what += f" (all of them: --frames {args.frames} asks for more than the split has)"
    return f"{what} of {k.width}x{k.height}, spp {job.spp}{_output_words(args)}"


def render_opening_lines(args: argparse.Namespace, located: Any, where: str, ranks: int = 1) -> list[str]:
    """The first statement, printed before the scene is loaded: ``rendering MODEL (step N) on
    DEVICE (threads): WHAT`` (``WHAT``: :func:`planned_render_words`; ``with 2 ranks`` before
    ``on`` for ``ranks`` > 1), in lines under 80 columns
    (:func:`~trainer.contract.textlines.fit_lines`; :func:`~trainer.contract.textlines.joined`
    gives it back on one line)."""
    with_ranks = [f"with {counted(ranks, 'rank')}"] if ranks > 1 else []
    return fit_lines([f"rendering {located.source}", f"(step {located.step})", *with_ranks, f"{where}:",
                      planned_render_words(args)])


def export_opening_lines(what: str, located: Any, where: str) -> list[str]:
    """The first statement of an export, printed before the scene is loaded: ``exporting WHAT of
    MODEL (step N) on DEVICE (threads)``, in lines under 80 columns (as :func:`render_opening_lines`)."""
    return fit_lines([f"exporting {what} of", str(located.source), f"(step {located.step})", where])


def render_detail_lines(args: argparse.Namespace, job: Any, estimate: float | None) -> list[str]:
    """The second statement, once the cameras are built and the time measured: what is rendered
    (:func:`render_words`) and the estimate, in lines under 80 columns; none when it would add
    nothing to the first statement."""
    words = render_words(args, job)
    if estimate is None:
        return [] if words == planned_render_words(args) else fit_lines([words])
    return fit_lines([f"{words},", f"estimated {estimate_text(estimate)}", "(measured on a sample of its rays)"])


def long_render_warning(args: argparse.Namespace, estimate: float | None) -> str | None:
    """The warning for a render estimated above :data:`LONG_RENDER_S`, naming what shortens it."""
    if estimate is None or estimate <= LONG_RENDER_S:
        return None
    shorter = ["--frames N renders fewer" + (" views (evenly spaced)" if args.cameras in SPLITS else " frames")]
    if args.spp > 1:
        shorter.append(f"--spp 1 is {args.spp}x faster")
    shorter.append("--downscale N renders smaller images")
    return (f"this render is estimated at {estimate_text(estimate)}: {'; '.join(shorter)}; Ctrl-C keeps the "
            "frames written so far")


def frame_rate_text(frames_per_s: float) -> str:
    """A render's pace: frames per second from one a second up (``4.00 frames/s``), seconds per
    frame below (``18.7 s per frame``, not ``0.0535 frames/s``)."""
    if frames_per_s >= 1 or frames_per_s <= 0:
        return f"{si_number(frames_per_s)} frames/s"
    return f"{seconds_text(1.0 / frames_per_s)} per frame"


def render_result_lines(summary: dict[str, Any], job: Any, ranks: int = 1) -> list[str]:
    """The lines after a render (under 80 columns, :func:`~trainer.contract.textlines.fit_lines`):
    the frames, their size and spp, the time, the pace (:func:`frame_rate_text`) and rays/s (of
    ``ranks`` ranks together),
    where they went, and with scores the mean PSNR and SSIM against the ground truth."""
    k = job.cameras[0].intrinsics
    rays = f"{si_number(summary['rays_per_s'])} rays/s" + (f" ({ranks} ranks)" if ranks > 1 else "")
    parts = [f"rendered {counted(summary['frames'], 'frame')} of {k.width}x{k.height},", f"spp {job.spp},",
             f"in {seconds_text(summary['seconds'])}:", f"{frame_rate_text(summary['frames_per_s'])},", rays]
    where = [w for w in (summary.get("out_dir"), summary.get("video")) if w]
    if where:
        parts += listed([f"-> {where[0]}", *where[1:]])
    if summary.get("mean_psnr_db") is not None:
        scores = [f"PSNR {summary['mean_psnr_db']:.2f} dB"]
        if summary.get("mean_ssim") is not None and summary["mean_ssim"] == summary["mean_ssim"]:
            scores.append(f"SSIM {summary['mean_ssim']:.3f}")
        parts[-1] += ";"
        parts += ["against the ground truth:", *listed(scores)]
        parts += (["(mean over the views,", "per view in", f"{summary['scores_path']})"] if summary.get("scores_path")
                  else ["(mean over the views)"])
    return fit_lines(parts)


def _record_scores(summary: dict[str, Any], args: argparse.Namespace, model: Any, job: Any) -> None:
    """With ``job.score``: ``scores.json`` beside the frames, and the means into ``summary``."""
    from trainer.inference.render_views import scores_summary, write_scores

    if not job.score or not summary.get("scores"):
        return
    meta = {"split": args.cameras, "step": model.step, "spp": job.spp, "background": list(job.background)}
    scores = scores_summary(summary["scores"], meta)
    summary["mean_psnr_db"], summary["mean_ssim"] = scores["mean_psnr_db"], scores["mean_ssim"]
    if summary.get("out_dir"):
        summary["scores_path"] = str(write_scores(Path(summary["out_dir"]), scores))


class _Terminated(KeyboardInterrupt):
    """SIGTERM during a render: unwinds like Ctrl-C (the video's temporary file is removed)."""


@contextlib.contextmanager
def _stops_once() -> Iterator[list[int]]:
    """While the block runs (main thread), the first SIGTERM raises :class:`_Terminated` and the
    first Ctrl-C ``KeyboardInterrupt`` (where Python's own handler was in place); any signal
    after the first is only noted, so the unwinding and the line that says how far the command
    got are not cut short. The yielded list gets the numbers of the signals that came."""
    came: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        came.append(signum)
        if len(came) == 1:
            raise _Terminated(f"signal {signum}") if signum == signal.SIGTERM else KeyboardInterrupt

    stops = [signal.SIGTERM, *([signal.SIGINT] if signal.getsignal(signal.SIGINT) is signal.default_int_handler else [])]
    with handlers_replaced({signum: stop for signum in stops}):
        yield came


def render_command(args: argparse.Namespace) -> int:
    """``render``: one process, or ``--nproc-per-node N`` ranks through the elastic launcher.
    Returns the exit status (130 after Ctrl-C, 143 after SIGTERM, with one line saying how far it
    got; an unfinished video's temporary file is removed)."""
    from trainer.inference.render_views import RenderInterrupted

    with _stops_once() as came:
        try:
            return _render(args)
        except RenderInterrupted as exc:
            return _stopped(str(exc), came)
        except KeyboardInterrupt:
            video = "; no video written" if args.video is not None else ""
            return _stopped(f"render stopped before the first frame was rendered{video}", came)


def _stopped(what: str, came: list[int]) -> int:
    """Say how far a stopped command got (one line) and return its exit status: a SIGTERM among the
    signals that ``came`` (inside :func:`_stops_once`, a further signal is only noted) says so."""
    if signal.SIGTERM not in came:
        return _interrupted(what)
    _say_stopped("terminated (SIGTERM)", what)
    return TERMINATED_EXIT


def _render(args: argparse.Namespace) -> int:
    from trainer.inference.loading import inference_device, load_model, locate_model
    from trainer.inference.render_views import render_job

    check_render_flags(args)
    if args.nproc_per_node is not None and args.nproc_per_node > 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        return _launch_render(args)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return _render_worker(args)
    located = locate_model(args.model)
    where = apply_threads(args, located.cfg, inference_device(located.cfg, args.device), 1)
    print("\n".join(render_opening_lines(args, located, where)), flush=True)
    for note in located.notes:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr, flush=True)
    model = load_model(args.model, args.scene, args.device, located=located)
    try:
        job = _render_job(args, model)
        estimate = render_estimate_s(model, job)
        detail = render_detail_lines(args, job, estimate)
        if detail:
            print("\n".join(detail), flush=True)
        warning = long_render_warning(args, estimate)
        if warning:
            print(f"warning: {fitted_warning(warning)}", file=sys.stderr, flush=True)
        summary = render_job(model, job)
        _record_scores(summary, args, model, job)
    finally:
        model.close()
    for note in summary["notes"]:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr)
    print("\n".join(render_result_lines(summary, job)), flush=True)
    return 0


def _worker_argv(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc-per-node N`` (or ``=N``)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc-per-node":
            skip = True
        elif not item.startswith("--nproc-per-node="):
            out.append(item)
    return out


def _launch_render(args: argparse.Namespace) -> int:
    from trainer.inference.loading import locate_model
    from trainer.inference.opening import OPENING_ENV, OpeningRelay
    from trainer.contract.rundir import RunDir
    from trainer.parallel.launch import launch_workers
    from trainer.parallel.rank_log import RankLogFollower
    from trainer.train.build import resolve_device

    located = locate_model(args.model)
    device = resolve_device(args.device or located.cfg.training.device)
    where = device_words(args, located.cfg, device.type, args.nproc_per_node)
    print("\n".join(render_opening_lines(args, located, where, args.nproc_per_node)), flush=True)
    for note in located.notes:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr, flush=True)
    logs = Path(tempfile.mkdtemp(prefix="ngptune-render-"))
    argv = _worker_argv(args.render_argv) + (["--out", str(args.out)] if args.out is not None and "--out" not in args.render_argv else [])
    try:
        # rank 0's progress lines (plain, every few seconds) repeated here as "rank 0: ..."
        with OpeningRelay(logs / "opening.json"), RankLogFollower(RunDir(logs).log_path(0), None, 0, plain=True):
            launch_workers(["-m", "trainer.inference", "render", *argv], args.nproc_per_node, run_dir=logs,
                           timeout_s=300, env_extra={"NGPTUNE_RENDER_SUMMARY": str(logs / "summary.json"),
                                                     OPENING_ENV: str(logs / "opening.json")})
    except TrainerError as exc:
        said = f"{exc} (rank logs in {logs}/logs)"
        try:
            error = type(exc)(said)
        except TypeError:  # an error that carries more than its message (the launcher's WorkersFailed)
            error = TrainerError(said)
        raise error from None
    except KeyboardInterrupt:
        from trainer.inference.render_views import RenderInterrupted

        frames = len(list(args.out.glob("*.png"))) if args.out is not None and args.out.is_dir() else 0
        kept = f"; the {frames} PNG frames written so far are in {args.out}" if args.out is not None else ""
        video = "; no video written" if args.video is not None else ""
        raise RenderInterrupted(f"render stopped, the ranks were stopped{video}{kept} (rank logs in {logs}/logs)") from None
    summary = json.loads((logs / "summary.json").read_text(encoding="utf-8"))
    shutil.rmtree(logs, ignore_errors=True)
    for note in summary["notes"]:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr)
    print("\n".join(summary["lines"]), flush=True)
    return 0


def _render_worker(args: argparse.Namespace) -> int:
    """One rank of ``render --nproc-per-node``: load the model alone, then join the gloo group
    for the final barrier (a subgrid checkpoint is loaded as one rank holding every box)."""
    import torch.distributed as dist

    from trainer.contract.config import apply_overrides, load_config
    from trainer.inference.loading import load_model
    from trainer.inference.opening import OPENING_ENV
    from trainer.inference.render_views import render_job
    from trainer.parallel.dist_env import detect_dist_env, init_distributed

    probe = apply_overrides(load_config(None), {"distributed.backend": "gloo", "training.device": args.device or "auto"})
    env = detect_dist_env(probe)
    model = load_model(args.model, args.scene, str(env.device))
    try:
        apply_threads(args, model.trainer.cfg, model.device, env.local_world_size)
        job = _render_job(args, model)
        opening = os.environ.get(OPENING_ENV)
        if env.rank == 0 and opening:  # the launcher shows what a one-process render says second
            from trainer.inference.opening import write_opening

            share = job.cameras[0:len(job.cameras):env.world_size]
            estimate = render_estimate_s(model, job, share)
            write_opening(Path(opening), render_detail_lines(args, job, estimate), long_render_warning(args, estimate))
        init_distributed(env, RENDER_GROUP_TIMEOUT_S)
        summary = render_job(model, job, env.rank, env.world_size, barrier=dist.barrier if env.world_size > 1 else None)
        if env.rank == 0:
            _record_scores(summary, args, model, job)
    finally:
        model.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    target = os.environ.get("NGPTUNE_RENDER_SUMMARY")
    if env.rank == 0 and target:
        summary["frames_per_s"] = summary["frames"] / max(summary["seconds"], 1e-9)
        summary["rays_per_s"] *= env.world_size
        summary["lines"] = render_result_lines(summary, job, env.world_size)
        Path(target).write_text(json.dumps(summary), encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------- export


def export_command(args: argparse.Namespace) -> int:
    """``export mesh|pointcloud``. Returns the exit status (130 after Ctrl-C, 143 after SIGTERM,
    with one line saying how far it got: nothing is written, the files appear only when complete)."""
    from trainer.inference.loading import check_model_path

    check_model_path(args.model)
    check_device_flag(args.device)
    check_cpu_threads_flag(args.cpu_threads)
    out = args.out or _model_folder(args.model) / ("mesh.ply" if args.kind == "mesh" else "pointcloud.ply")
    from trainer.inference.mesh import DensityInterrupted
    from trainer.inference.pointcloud import PointsInterrupted

    with _stops_once() as came:
        try:
            return _export_mesh(args, out) if args.kind == "mesh" else _export_pointcloud(args, out)
        except (DensityInterrupted, PointsInterrupted) as exc:
            return _stopped(f"export {args.kind} stopped {exc}; {out} was not written", came)
        except KeyboardInterrupt:
            return _stopped(f"export {args.kind} stopped; {out} was not written", came)


def _from_model(args: argparse.Namespace, what: str, extract: Any) -> Any:
    """``extract(model)`` with the model of ``args`` loaded, closed afterwards; its threads are set
    and the first line, ``exporting WHAT of MODEL (step N) on DEVICE (threads)``, printed before the
    scene is loaded."""
    from trainer.inference.loading import inference_device, load_model, locate_model

    located = locate_model(args.model)
    where = apply_threads(args, located.cfg, inference_device(located.cfg, args.device), 1)
    print("\n".join(export_opening_lines(what, located, where)), flush=True)
    for note in located.notes:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr, flush=True)
    model = load_model(args.model, args.scene, args.device, located=located)
    try:
        return extract(model)
    finally:
        model.close()


def mesh_estimate_lines(resolution: int, estimate: float) -> list[str]:
    """The second statement of a mesh export, before its density pass: ``density of 512^3 points
    estimated 11.2 min (measured on a sample of them)``, in lines under 80 columns."""
    return fit_lines([f"density of {resolution}^3 points", f"estimated {estimate_text(estimate)}",
                      "(measured on a sample of them)"])


def long_mesh_warning(resolution: int, estimate: float) -> str | None:
    """The warning for a density pass estimated above :data:`LONG_RENDER_S` (as a render's),
    naming what shortens it: half the resolution is 8x faster."""
    if estimate <= LONG_RENDER_S:
        return None
    shorter = [f"--resolution {resolution // 2} is 8x faster"] if resolution >= 4 else []
    return "; ".join([f"this export's density pass is estimated at {estimate_text(estimate)}", *shorter,
                      "Ctrl-C writes nothing"])


def _mesh_of(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """The mesh ``args`` ask for, after the estimate of its density pass (and a warning when long)."""
    from trainer.inference.mesh import density_seconds_estimate, extract_mesh

    estimate = density_seconds_estimate(model.trainer, args.resolution)
    print("\n".join(mesh_estimate_lines(args.resolution, estimate)), flush=True)
    warning = long_mesh_warning(args.resolution, estimate)
    if warning:
        print("\n".join(fit_lines(listed(f"warning: {warning}".split("; "), ";"))), file=sys.stderr, flush=True)
    return extract_mesh(model, args.resolution, args.threshold, args.aabb, quiet=args.quiet, min_views=args.min_views)


def _export_mesh(args: argparse.Namespace, out: Path) -> int:
    from trainer.inference.mesh import check_mesh_request, write_mesh

    check_mesh_request(args.resolution, out, args.aabb, args.threshold, args.min_views)
    mesh = _from_model(args, f"a {args.resolution}^3 mesh", lambda model: _mesh_of(args, model))
    write_mesh(mesh, out)
    print("\n".join(mesh_result_lines(mesh, args, out)), flush=True)
    return 0


def mesh_result_lines(mesh: dict[str, Any], args: argparse.Namespace, out: Path) -> list[str]:
    """The lines after a mesh export (under 80 columns, no bracket inside another): vertices and
    triangles, the threshold, those left out for too little support, one statement of the time
    (the whole export, then its stages), the file."""
    parts = [f"mesh: {counted(len(mesh['vertices']), 'vertex', 'vertices')},",
             f"{counted(len(mesh['faces']), 'triangle')} at {args.resolution}^3,", f"threshold {args.threshold:g},"]
    if args.min_views > 0:
        parts += [f"{mesh['faces_unsupported']:,} left out", f"(on the surface of fewer than {args.min_views}",
                  "training views),"]
    stages = [f"density {seconds_text(mesh['density_s'])}", f"marching cubes {seconds_text(mesh['marching_s'])}"]
    if args.min_views > 0:
        stages.append(f"support {seconds_text(mesh['support_s'])}")
    parts += [f"in {seconds_text(mesh['seconds'])}", f"({stages[0]},", *listed(stages[1:])]
    parts[-1] += ")"
    parts.append(f"-> {out}")
    return fit_lines(parts)


def _export_pointcloud(args: argparse.Namespace, out: Path) -> int:
    from trainer.inference.pointcloud import (
        check_pointcloud_request, extract_pointcloud, shortfall_note, write_pointcloud,
    )

    check_pointcloud_request(args.n_points, args.min_opacity, out, args.min_views)
    cloud = _from_model(args, f"a point cloud of {counted(args.n_points, 'point')}", lambda model: extract_pointcloud(
        model, args.n_points, args.min_opacity, args.seed, quiet=args.quiet, min_views=args.min_views))
    write_pointcloud(cloud, out)
    note = shortfall_note(cloud, args.n_points, args.min_opacity)
    if note is not None:
        print(f"warning: {fitted_warning(note)}", file=sys.stderr)
    print("\n".join(pointcloud_result_lines(cloud, args, out)), flush=True)
    return 0


def pointcloud_result_lines(cloud: dict[str, Any], args: argparse.Namespace, out: Path) -> list[str]:
    """The lines after a point-cloud export (under 80 columns, no bracket inside another): points,
    the rays cast, the opacity bound, those left out for too little support, the file."""
    parts = [f"point cloud: {counted(len(cloud['points']), 'point')}", f"from {counted(cloud['rays'], 'ray')}",
             f"(opacity >= {args.min_opacity:g})" + ("," if args.min_views > 0 else "")]
    if args.min_views > 0:
        parts += [f"{cloud['unsupported']:,} left out", f"(on the surface of fewer than {args.min_views}",
                  "training views)"]
    parts.append(f"-> {out}")
    return fit_lines(parts)


def main(argv: Sequence[str] | None = None, prog: str = "python -m trainer.inference") -> int:
    from trainer.contract.runstatus import plain_warning_format

    plain_warning_format()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_command_line(build_parser(prog), raw)
    if args.command == "render":
        args.render_argv = raw[raw.index("render") + 1 :]
    try:
        return int(args.func(args))
    except TrainerError as exc:
        if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank: the launcher reads its one error line
            print_error(exc)
        else:
            print("\n".join(fitted_error_lines(exc)), file=sys.stderr)
        return 2

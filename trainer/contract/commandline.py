"""The trainer's command lines: the flags of each entry point and the builders of their argv.

Entry points (each prints ``error: <message>`` and exits 2 on bad input, :mod:`trainer.contract.runstatus`)::

    python -m trainer [launch flags] [training flags]     train (one process, or --nproc-per-node N ranks)
    python -m trainer.inference render|export ...          use a trained model
    python -m trainer.viewer MODEL ...                      a web viewer of a trained model
    python -m trainer.tools.<tool> ...                      devices, inspect, demo_scene, bench_comm

The flags are defined here once (:func:`add_trainer_arguments`, :func:`add_render_arguments`,
:func:`add_export_arguments`, :func:`add_view_arguments`, :func:`add_inspect_arguments`,
:func:`add_demo_scene_arguments`):
the trainer's parsers and the driver's sub-commands of the same name add the same flags, so
``ngptune train --help`` and ``python -m trainer --help`` agree and a bad flag is refused with
the same words before any process starts. Every command line the driver starts is built here
(:func:`trainer_argv`, :func:`inference_argv`, :func:`viewer_argv`, :func:`tool_argv`).

Flag choices are read from the tables they name: ``--format`` from
:data:`trainer.contract.formats.SCENE_FORMATS`, ``--precision`` from the ``training.precision``
rule, ``--emulate-interconnect`` from :data:`trainer.contract.backend.EMULATED_INTERCONNECT_ENV`.

Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contract.backend import EMULATED_INTERCONNECT_ENV
from trainer.contract.config import field_rule
from trainer.contract.formats import FORMAT_CHOICES

__all__ = [
    "BENCH_COMM_OPS",
    "BENCH_COMM_RESULT_FILE",
    "DEFAULT_FPS",
    "DEFAULT_MAX_RESOLUTION",
    "DEFAULT_MESH_THRESHOLD",
    "DEFAULT_MIN_VIEWS",
    "DEFAULT_SECONDS",
    "LAUNCH_FLAGS",
    "MAX_RAYS_PER_POINT",
    "RENDER_MODES",
    "TOOLS",
    "VIDEO_EXTENSIONS",
    "VIEW_HELP",
    "add_bench_comm_arguments",
    "add_demo_scene_arguments",
    "add_export_arguments",
    "add_inspect_arguments",
    "add_launch_arguments",
    "add_render_arguments",
    "add_scene_format_arguments",
    "add_train_arguments",
    "add_trainer_arguments",
    "add_view_arguments",
    "bench_comm_argv",
    "inference_argv",
    "integer_at_least",
    "nonnegative_int",
    "positive_int",
    "resume_flags",
    "scene_format_overrides",
    "tool_argv",
    "trainer_argv",
    "viewer_argv",
    "worker_argv",
]

LAUNCH_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--max-restarts")
"""The flags of the launching process, which the ranks' command line leaves out (each takes one value)."""

TOOLS = ("devices", "inspect", "demo_scene", "bench_comm")
"""The trainer's tools, ``python -m trainer.tools.<tool>`` (:mod:`trainer.tools`)."""

DEFAULT_FPS = 30.0
"""``render``: frames per second of an orbit or path without one of its own."""
DEFAULT_SECONDS = 4.0
"""``render``: length (s) of an orbit or path without one of its own."""
VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".avi")
"""``render --video``: containers both video writers fill with H.264 / MPEG-4."""
DEFAULT_MESH_THRESHOLD = 2.5
"""``export mesh --threshold``: density σ (1/unit-cube units) of the surface, instant-ngp's default."""
MAX_RAYS_PER_POINT = 20
"""``export pointcloud --n-points N`` casts at most this many training rays per point asked for
(and never more than the training images have pixels) before it writes what it has."""
DEFAULT_MIN_VIEWS = 3
"""``export mesh|pointcloud --min-views N``: keep only what lies on the rendered surface of at least N
training views (:mod:`trainer.inference.support`); two views triangulate a point, a third checks it.
0 keeps everything."""


def integer_at_least(text: str, minimum: int) -> int:
    """``text`` as an integer >= ``minimum``, for argparse types (ArgumentTypeError otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0 (ArgumentTypeError otherwise)."""
    return integer_at_least(text, 0)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (ArgumentTypeError otherwise)."""
    return integer_at_least(text, 1)


# ---------------------------------------------------------------------------- python -m trainer


def aabb_scale_value(text: str) -> int:
    """argparse type of ``--aabb-scale``: an integer that ``data.aabb_scale`` accepts (a power of
    two in [1, 128]; ArgumentTypeError otherwise, so every command names the flag alike)."""
    if not (text.isascii() and text.isdigit()):  # int() would take "1_6", "+8", " 4" and other scripts' digits
        raise argparse.ArgumentTypeError(f"expected a power of two in [1, 128], got {text!r}")
    value = int(text)
    if not field_rule("data.aabb_scale").accepts(value):
        raise argparse.ArgumentTypeError(f"expected a power of two in [1, 128], got {value}")
    return value


def add_scene_format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--camera-convention`` and ``--aabb-scale`` (config keys ``data.format``,
    ``data.camera_convention``, ``data.aabb_scale``)."""
    parser.add_argument("--format", dest="scene_format", choices=FORMAT_CHOICES, default=None,
                        help="read this format from a folder holding several (default: most camera information: "
                             f"{' > '.join(FORMAT_CHOICES)}; data.format)")
    parser.add_argument("--camera-convention", choices=field_rule("data.camera_convention").choices, default=None,
                        help="camera axes of transforms*.json poses (default opengl; data.camera_convention)")
    parser.add_argument("--aabb-scale", type=aabb_scale_value, default=None,
                        help="scene box: this power of two (1..128) instead of the scene's or the derived one (data.aabb_scale)")


def scene_format_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``data.*`` overrides that :func:`add_scene_format_arguments`' flags set."""
    flags = {"data.format": getattr(args, "scene_format", None),
             "data.camera_convention": getattr(args, "camera_convention", None),
             "data.aabb_scale": getattr(args, "aabb_scale", None)}
    return {k: v for k, v in flags.items() if v is not None}


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the training flags of one process to ``parser`` (:func:`add_launch_arguments` adds
    the launch flags)."""
    parser.add_argument("--scene", type=Path, default=None, help="scene folder or file (default: the built-in demo scene)")
    parser.add_argument("--config", "--network", dest="config", type=Path, default=None, help="trainer config (JSON with comments)")
    parser.add_argument("--n-steps", "--n_steps", dest="n_steps", type=int, default=None, help="training steps")
    parser.add_argument("--time-budget", dest="time_budget_s", type=float, default=None, help="training seconds (excludes evaluation)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--precision", choices=field_rule("training.precision").choices, default=None)
    parser.add_argument("--downscale", type=int, default=None,
                        help="shrink images by this integer factor (default: LLFF/COLMAP longest side to <= 1600 px)")
    add_scene_format_arguments(parser)
    parser.add_argument("--save-snapshot", "--save_snapshot", dest="save_snapshot", type=Path, default=None, help="write a snapshot here at the end")
    parser.add_argument("--resume", "--load_snapshot", dest="resume", type=Path, default=None, help="continue from this snapshot")
    parser.add_argument("--warm-start", dest="warm_start", type=Path, default=None, metavar="SNAPSHOT",
                        help="start from this snapshot's model and occupancy grid, with a fresh optimiser and step 0 "
                             "(e.g. the previous time step of a sequence; one process)")
    parser.add_argument("--snapshot-every", "--checkpoint-every", dest="snapshot_every", type=int, default=None,
                        help="write a snapshot (distributed: a sharded checkpoint) into the run directory every N steps")
    parser.add_argument("--keep-checkpoints", type=positive_int, default=3, help="distributed: keep the newest N checkpoints (default 3)")
    parser.add_argument("--eval-every", type=int, default=None, help="evaluate every N steps (0: only at the end)")
    parser.add_argument("--eval-max-images", type=int, default=None, metavar="N",
                        help="evaluate at most N views, evenly spaced, on any device (training.eval_max_images; "
                             "default: every view, the CPU preset 4)")
    parser.add_argument("--no-eval", action="store_true", help="skip the final evaluation")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<time>-<scene>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. --set training.log_every=10")
    parser.add_argument("--trace-steps", default=None, metavar="A:B",
                        help="record steps A..B-1 with torch.profiler; Chrome traces go to RUN/traces/ (profile.trace_steps)")
    parser.add_argument("--emulate-interconnect", choices=tuple(EMULATED_INTERCONNECT_ENV), default=None,
                        help="NCCL only: make one NVLink host's ranks talk like PCIe or sockets (distributed.emulate_interconnect)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--quiet", action="store_true", help="plain log lines, no progress bar")
    parser.add_argument("--cpu-threads", dest="cpu_threads", type=int, default=None, metavar="N",
                        help="intra-op threads of each rank on a CPU; 0: the cores other processes leave free // ranks on the "
                             "host (training.cpu_threads)")
    parser.add_argument("--view", action="store_true",
                        help="serve a web viewer of the model as it trains (one process, or rank 0); the first lines "
                             "give its address")
    parser.add_argument("--view-host", default="127.0.0.1",
                        help="--view: address to listen on (default 127.0.0.1, this machine only)")
    parser.add_argument("--view-port", type=int, default=0, help="--view: port to listen on (default: a free port)")


def resume_flags(argv: Sequence[str]) -> list[str]:
    """The flags of a training command line ``argv`` (``python -m trainer`` / ``ngptune train``
    flags) that its run's ``config.json`` does not keep, as the command that resumes the run must
    repeat them: ``--no-eval`` and ``--keep-checkpoints N``. Unknown flags are ignored.

    >>> resume_flags(["--scene", "s", "--no-eval", "--keep-checkpoints=5", "--set", "a.b=1"])
    ['--no-eval', '--keep-checkpoints', '5']
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument("--keep-checkpoints", default=None)
    known, _ = parser.parse_known_args(list(argv))
    flags = ["--no-eval"] if known.no_eval else []
    if known.keep_checkpoints is not None:
        value = known.keep_checkpoints.strip()
        flags += ["--keep-checkpoints", str(int(value)) if value.lstrip("+-").isdigit() else value]
    return flags


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Add :data:`LAUNCH_FLAGS` to ``parser``."""
    parser.add_argument("--nproc-per-node", type=int, default=None, help="start N ranks on this node (elastic launcher)")
    parser.add_argument("--nnodes", type=positive_int, default=1, help="nodes in the job")
    parser.add_argument("--node-rank", type=int, default=0, help="this node's index (node 0 hosts the rendezvous)")
    parser.add_argument("--rdzv-endpoint", default=None,
                        help="HOST:PORT of node 0's rendezvous store (several nodes; default: the config's "
                             "distributed.master_addr:master_port when the port is set)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="restart the worker group up to K times; workers resume from the newest checkpoint")
    parser.add_argument("--check-host", action="store_true",
                        help="only check this host for the run (the scene exists; the interfaces named in "
                             "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME exist), then exit 0; nothing is started or written")


def add_trainer_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``python -m trainer`` (``ngptune train``): training flags, then launch flags."""
    add_train_arguments(parser)
    add_launch_arguments(parser)


def worker_argv(train_argv: Sequence[str]) -> list[str]:
    """The flags of ``python -m trainer ...`` without :data:`LAUNCH_FLAGS` (each takes one value,
    as ``--flag V`` or ``--flag=V``), for the ranks' ``python -m trainer``."""
    out, skip = [], False
    for item in train_argv:
        if skip:
            skip = False
        elif item in LAUNCH_FLAGS:
            skip = True
        elif not item.startswith(tuple(f + "=" for f in LAUNCH_FLAGS)):
            out.append(item)
    return out


def _override_items(overrides: Mapping[str, Any] | Sequence[str]) -> list[str]:
    """``--set`` values: ``KEY=VALUE`` texts as given, a mapping's values as JSON (read back unchanged)."""
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return [str(item) for item in overrides]


def trainer_argv(
    *,
    config: Path | str | None = None,
    scene: Path | str | None = None,
    out: Path | str | None = None,
    nproc_per_node: int | None = None,
    n_steps: int | None = None,
    time_budget_s: float | None = None,
    evaluate: bool = True,
    eval_max_images: int | None = None,
    save_snapshot: Path | str | None = None,
    warm_start: Path | str | None = None,
    resume: Path | str | None = None,
    trace_steps: tuple[int, int] | None = None,
    emulate_interconnect: str | None = None,
    quiet: bool = False,
    check_host: bool = False,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """The command of one training run: ``[python, "-m", "trainer", flags...]``.

    Each keyword is the flag of the same name (:func:`add_trainer_arguments`); None and the
    defaults add nothing. ``evaluate=False`` is ``--no-eval``; ``trace_steps`` ``(A, B)`` is
    ``--trace-steps A:B``; ``check_host`` is ``--check-host`` (the host's checks only, nothing
    started); ``overrides`` are ``--set`` items (``"KEY=VALUE"`` texts, or a mapping of dotted keys
    to values); ``extra``: further flags as the user gave them, last.
    """
    argv = [sys.executable, "-m", "trainer"]
    if nproc_per_node is not None:
        argv += ["--nproc-per-node", str(nproc_per_node)]
    for flag, value in (("--config", config), ("--scene", scene), ("--out", out), ("--n-steps", n_steps),
                        ("--time-budget", time_budget_s), ("--eval-max-images", eval_max_images),
                        ("--save-snapshot", save_snapshot), ("--warm-start", warm_start), ("--resume", resume),
                        ("--emulate-interconnect", emulate_interconnect)):
        if value is not None:
            argv += [flag, str(value)]
    if trace_steps is not None:
        argv += ["--trace-steps", f"{trace_steps[0]}:{trace_steps[1]}"]
    if quiet:
        argv.append("--quiet")
    if check_host:
        argv.append("--check-host")
    if not evaluate:
        argv.append("--no-eval")
    for item in _override_items(overrides):
        argv += ["--set", item]
    return argv + list(extra)


# ---------------------------------------------------------------------------- python -m trainer.inference


def add_render_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``render`` (``python -m trainer.inference render``, ``ngptune render``)."""
    p.add_argument("model", type=Path, help="run folder, snapshot file or checkpoint folder")
    p.add_argument("--cameras", default="test",
                   help="test | train | val | orbit | PATH.json (instant-ngp base_cam.json or nerfstudio "
                        "camera_path.json) (default test)")
    p.add_argument("--spp", "--screenshot-spp", dest="spp", type=int, default=1,
                   help="jittered renders averaged per pixel (default 1)")
    p.add_argument("--width", type=int, default=None, help="image width in pixels (default: the cameras')")
    p.add_argument("--height", type=int, default=None, help="image height in pixels (default: the cameras')")
    p.add_argument("--downscale", type=int, default=None,
                   help="shrink the images by this factor (after --width/--height: --width 1920 --height 1080 "
                        "--downscale 8 renders 240x135)")
    p.add_argument("--frames", type=int, default=None,
                   help="frames of an orbit or path (default fps × seconds); for a split: this many views, evenly spaced")
    p.add_argument("--fps", type=float, default=None, help=f"frames per second (default: the path file's, else {DEFAULT_FPS:g})")
    p.add_argument("--seconds", type=float, default=None,
                   help=f"length of an orbit or path (default: the path file's, else {DEFAULT_SECONDS:g})")
    p.add_argument("--elevation", type=float, default=None, help="orbit elevation in degrees (default: the training cameras' mean)")
    p.add_argument("--arc", type=float, default=None,
                   help="azimuth the orbit sweeps in degrees, end to end below 360 (default: a full circle when "
                        "the training cameras surround the scene, else the arc they span)")
    p.add_argument("--radius", type=float, default=None, help="orbit radius in scene units (default: the training cameras' mean distance)")
    p.add_argument("--fov", type=float, default=None, help="orbit vertical field of view in degrees (default: the first training camera's)")
    p.add_argument("--video", type=Path, default=None,
                   help=f"write a video, H.264 (else MPEG-4 part 2): {', '.join(VIDEO_EXTENSIONS)}")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for PNG frames (default without --video: MODEL's folder/render-<cameras>)")
    p.add_argument("--depth", action="store_true", help="also write 16-bit depth PNGs and colourised previews")
    p.add_argument("--background", default=None, help="white | black | #RRGGBB (default: the scene's evaluation background)")
    p.add_argument("--nproc-per-node", type=int, default=None, help="split the frames across N ranks (gloo)")
    p.add_argument("--scene", type=Path, default=None, help="the scene, when it moved since training (default: the run's)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: the run's training.device)")
    p.add_argument("--compare", action="store_true",
                   help="test/train/val views: also write <view>_compare.png, the render beside the ground truth")
    p.add_argument("--seed", type=int, default=1337, help="seed of the jitter of --spp > 1 (default 1337)")
    _add_threads_and_quiet(p)


def _add_threads_and_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cpu-threads", type=int, default=None, metavar="N",
                   help="intra-op threads of each rank on a CPU (default: the run's training.cpu_threads; 0: the cores "
                        "other processes leave free // ranks)")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def _add_export_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=Path, help="run folder, snapshot file or checkpoint folder")
    p.add_argument("--scene", type=Path, default=None, help="the scene, when it moved since training (default: the run's)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: the run's training.device)")
    _add_threads_and_quiet(p)


def _add_min_views(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--min-views", type=int, default=DEFAULT_MIN_VIEWS,
                   help=f"keep only {what} on the rendered surface of at least N training views, leaving out floaters, "
                        f"haze and hidden or unseen density (default {DEFAULT_MIN_VIEWS}; 0 keeps everything)")


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """The kinds and flags of ``export`` (``python -m trainer.inference export``, ``ngptune export``)."""
    kinds = p.add_subparsers(dest="kind", required=True)
    mesh = kinds.add_parser("mesh", help="marching-cubes mesh with vertex colours, in the capture's world frame")
    _add_export_common(mesh)
    mesh.add_argument("--resolution", type=int, default=256, help="lattice points per axis (default 256)")
    mesh.add_argument("--threshold", type=float, default=DEFAULT_MESH_THRESHOLD,
                      help=f"density σ of the surface, a finite number >= 0 (default {DEFAULT_MESH_THRESHOLD:g}, "
                           "instant-ngp's)")
    mesh.add_argument("--aabb", type=float, nargs=6, default=None, metavar=("X0", "Y0", "Z0", "X1", "Y1", "Z1"),
                      help="box to mesh in scene units (default: the occupied part of the occupancy grid)")
    mesh.add_argument("--out", type=Path, default=None, help="FILE.ply | .obj | .glb (default: MODEL's folder/mesh.ply)")
    _add_min_views(mesh, "triangles")
    cloud = kinds.add_parser("pointcloud", help="coloured points at the expected depth of training rays (PLY)")
    _add_export_common(cloud)
    cloud.add_argument("--n-points", type=int, default=200_000,
                       help=f"points to write, one per training ray that reaches --min-opacity (default 200000); "
                            f"at most {MAX_RAYS_PER_POINT}·N rays are cast, then the points found are written")
    cloud.add_argument("--min-opacity", type=float, default=0.5, help="keep rays at least this opaque (default 0.5)")
    cloud.add_argument("--seed", type=int, default=0, help="seed of the ray choice (default 0)")
    cloud.add_argument("--out", type=Path, default=None, help="FILE.ply (default: MODEL's folder/pointcloud.ply)")
    _add_min_views(cloud, "points")


RENDER_HELP = "render views, orbits and camera paths of a trained model (PNG, video, depth)"
EXPORT_HELP = "export a trained model as a mesh or a point cloud"


def inference_argv(argv: Sequence[str]) -> list[str]:
    """``[python, "-m", "trainer.inference", *argv]`` (``argv`` starts with ``render`` or ``export``)."""
    return [sys.executable, "-m", "trainer.inference", *argv]


# ---------------------------------------------------------------------------- python -m trainer.viewer


RENDER_MODES = ("rgb", "depth", "opacity")
"""What the viewer's frames show: the colour, the expected depth (turbo colours, near red, far blue),
or the accumulated opacity (white = opaque)."""
DEFAULT_MAX_RESOLUTION = 1920
"""The viewer's longest side of a resting frame, pixels."""
VIEW_HELP = "a web viewer of a trained model (viser): rendered from the browser's camera"


def add_view_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the viewer (``python -m trainer.viewer``, ``ngptune view``)."""
    p.add_argument("model", type=Path, help="run folder, snapshot file or checkpoint folder")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port, printed)")
    p.add_argument("--max-resolution", type=int, default=DEFAULT_MAX_RESOLUTION,
                   help=f"longest side of a resting frame in pixels (default {DEFAULT_MAX_RESOLUTION}; the page can "
                        "lower it)")
    p.add_argument("--spp", type=int, default=1, help="jittered renders averaged per pixel of a resting frame (default 1)")
    p.add_argument("--mode", choices=RENDER_MODES, default="rgb", help="what the frames show first (default rgb)")
    p.add_argument("--background", default=None, help="white | black | #RRGGBB (default: the scene's evaluation background)")
    p.add_argument("--device", default=None,
                   help="cpu | cuda | cuda:N (default: the run's training.device; the CPU, with a note, when that "
                        "is CUDA and this machine has none)")
    p.add_argument("--scene", type=Path, default=None, help="the scene, when it moved since training (default: the run's)")
    p.add_argument("--cpu-threads", type=int, default=None, metavar="N",
                   help="intra-op threads on a CPU (default: the run's training.cpu_threads; 0: the cores other "
                        "processes leave free)")


def viewer_argv(argv: Sequence[str]) -> list[str]:
    """``[python, "-m", "trainer.viewer", *argv]`` (``argv``: the flags of :func:`add_view_arguments`)."""
    return [sys.executable, "-m", "trainer.viewer", *argv]


# ---------------------------------------------------------------------------- python -m trainer.tools.<tool>


def add_inspect_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``inspect`` (``python -m trainer.tools.inspect``, ``ngptune inspect``)."""
    p.add_argument("scene", type=Path, help="scene folder or file (transforms.json, a COLMAP or LLFF folder)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--downscale", type=positive_int, default=None,
                   help="describe the images as shrunk by this factor (as train --downscale; default: the automatic rule)")
    add_scene_format_arguments(p)
    p.add_argument("--holdout-every", type=int, default=0, help="for scenes without splits: hold out every N-th frame as test (0: list all as train)")
    p.add_argument("--timing", action="store_true", help="decode the training images twice (cold, then from the disk cache) and print both times")


def add_demo_scene_arguments(p: argparse.ArgumentParser, *, out_dir_required: bool = True) -> None:
    """The flags of ``demo-scene`` (``ngptune demo-scene``; ``python -m trainer.tools.demo_scene``,
    whose ``out_dir`` may be left out, ``out_dir_required=False``: the cached demo scene)."""
    if out_dir_required:
        p.add_argument("out_dir", type=Path)
    else:
        p.add_argument("out_dir", type=Path, nargs="?", default=None,
                       help="folder to write (default: the cached demo scene, written once and reused)")
    p.add_argument("--resolution", type=positive_int, default=64, help="width and height of the rendered views in pixels (default 64)")
    p.add_argument("--frames", type=positive_int, default=None, metavar="N",
                   help="write N time steps of the moving scene as OUT/0000, OUT/0001, ... (a sequence for train-many)")


BENCH_COMM_OPS = ("all_reduce", "all_gather")
"""The collectives ``bench_comm`` times (``--ops``)."""
BENCH_COMM_RESULT_FILE = "bench_comm.json"
"""The file ``bench_comm``'s rank 0 writes into ``--out``: one object per (op, size) measured."""


def add_bench_comm_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m trainer.tools.bench_comm`` (built by :func:`bench_comm_argv`)."""
    p.add_argument("--nproc-per-node", type=int, required=True, help="ranks to start")
    p.add_argument("--out", type=Path, required=True, help="folder of the ranks' logs and the result file")
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--sizes", required=True, help="sizes in bytes, comma-separated")
    p.add_argument("--ops", required=True, help=f"comma-separated: {', '.join(BENCH_COMM_OPS)}")
    p.add_argument("--iters", type=int, required=True, help="timed calls per size and op")
    p.add_argument("--warmup", type=int, required=True, help="untimed calls before them")
    p.add_argument("--emulate-interconnect", choices=tuple(EMULATED_INTERCONNECT_ENV), required=True)
    p.add_argument("--timeout-s", type=float, required=True, help="bound of the rendezvous and of every collective (s)")


def bench_comm_argv(*, nproc_per_node: int, out: Path | str, backend: str, sizes_bytes: Sequence[int],
                    ops: Sequence[str], iters: int, warmup: int, emulate_interconnect: str,
                    timeout_s: float) -> list[str]:
    """The command of one ``bench_comm`` measurement (:func:`add_bench_comm_arguments`)."""
    return tool_argv("bench_comm", [
        "--nproc-per-node", str(nproc_per_node), "--out", str(out), "--backend", backend,
        "--sizes", ",".join(map(str, sizes_bytes)), "--ops", ",".join(ops), "--iters", str(iters),
        "--warmup", str(warmup), "--emulate-interconnect", emulate_interconnect, "--timeout-s", str(timeout_s)])


def tool_argv(tool: str, argv: Sequence[str] = ()) -> list[str]:
    """``[python, "-m", "trainer.tools.<tool>", *argv]`` for a tool of :data:`TOOLS`.

    Raises:
        KeyError: ``tool`` is not one of :data:`TOOLS`.
    """
    if tool not in TOOLS:
        raise KeyError(f"no trainer tool {tool!r}; tools: {', '.join(TOOLS)}")
    return [sys.executable, "-m", f"trainer.tools.{tool}", *argv]

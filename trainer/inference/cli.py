"""``render`` and ``export`` command lines (``python -m trainer.inference``; ``ngptune render|export``
runs this process, with the same flags: :mod:`trainer.contract.commandline`).

Every flag is checked before the model is loaded; bad input ends with one ``error:`` line naming
the flag, file or key, exit status 2, and nothing is written. Ctrl-C ends with one
``interrupted:`` line (how far it got, what was kept), exit status 130.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
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
from trainer.contract.runstatus import print_error

__all__ = ["build_parser", "export_command", "main", "render_command"]

RENDER_GROUP_TIMEOUT_S = 6 * 3600.0  # ranks that finish early wait this long at the final barrier
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports Ctrl-C


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


def _interrupted(what: str) -> int:
    print(f"interrupted: {what}", file=sys.stderr, flush=True)
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
    for flag, value, minimum in (("--spp", args.spp, 1), ("--width", args.width, 1), ("--height", args.height, 1),
                                 ("--downscale", args.downscale, 1), ("--frames", args.frames, 1),
                                 ("--nproc-per-node", args.nproc_per_node, 1)):
        if value is not None and value < minimum:
            raise ConfigError(f"{flag} {value}: expected an integer >= {minimum}")
    for flag, value in (("--fps", args.fps), ("--seconds", args.seconds), ("--radius", args.radius)):
        if value is not None and not value > 0:
            raise ConfigError(f"{flag} {value:g}: expected a positive number")
    if args.fov is not None and not 0 < args.fov < 180:
        raise ConfigError(f"--fov {args.fov:g}: expected degrees in (0, 180)")
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
    if args.out is not None:
        prepare_output_dir(args.out)


def build_cameras(args: argparse.Namespace, model: Any) -> list:
    """The frames ``args`` ask for (see :mod:`trainer.inference.cameras`)."""
    from trainer.inference import cameras as cams
    from trainer.inference.worldframe import units_per_cube_unit
    from trainer.train.evaluate import evaluation_frames

    scene = model.scene
    if args.cameras in ("test", "train", "val"):
        frames = [f for _, f in evaluation_frames(cams.split_cameras(scene, args.cameras), args.frames)]
        return cams.resize_cameras(frames, args.width, args.height, args.downscale)
    first = cams.resize_cameras(scene.frames("train")[:1], args.width, args.height, args.downscale)[0]
    if args.cameras == "orbit":
        n = args.frames or max(1, round((args.fps or DEFAULT_FPS) * (args.seconds or DEFAULT_SECONDS)))
        radius = None if args.radius is None else args.radius / units_per_cube_unit(scene)
        orbit = cams.scene_orbit(scene, radius=radius, elevation_deg=args.elevation)
        intrinsics = first.intrinsics
        if args.fov is not None:
            from trainer.data.scene import Intrinsics
            import math

            fy = 0.5 * intrinsics.height / math.tan(math.radians(args.fov) / 2)
            intrinsics = Intrinsics(width=intrinsics.width, height=intrinsics.height, fx=fy, fy=fy,
                                    cx=intrinsics.width / 2, cy=intrinsics.height / 2)
        return cams.orbit_cameras(orbit, n, intrinsics)
    path = cams.read_camera_path(Path(args.cameras), scene)
    width = args.width or path.width or first.intrinsics.width
    height = args.height or path.height or (first.intrinsics.height if not args.width else
                                            round(first.intrinsics.height * width / first.intrinsics.width))
    fps = args.fps or path.fps or DEFAULT_FPS
    n = args.frames or max(1, round(fps * (args.seconds or path.seconds or DEFAULT_SECONDS)))
    return cams.path_cameras(path, n, width, height)


def _render_job(args: argparse.Namespace, model: Any) -> Any:
    from trainer.inference.outputs import parse_background
    from trainer.inference.render_views import RenderJob

    background = args.background or ("white" if model.scene.white_background else "black")
    fps = args.fps
    if fps is None and args.cameras.endswith(".json"):
        from trainer.inference.cameras import read_camera_path

        fps = read_camera_path(Path(args.cameras), model.scene).fps
    return RenderJob(cameras=build_cameras(args, model), spp=args.spp, background=parse_background(background),
                     depth=args.depth, out_dir=args.out, video=args.video, fps=fps or DEFAULT_FPS, seed=args.seed,
                     quiet=args.quiet)


def _summary_line(summary: dict[str, Any], job: Any) -> str:
    k = job.cameras[0].intrinsics
    where = [w for w in (summary.get("out_dir"), summary.get("video")) if w]
    return (f"rendered {summary['frames']} frame(s) of {k.width}x{k.height}, spp {job.spp}, in {summary['seconds']:.2f} s: "
            f"{summary['frames_per_s']:.3g} frames/s, {summary['rays_per_s']:.3g} rays/s"
            + (f" -> {', '.join(where)}" if where else ""))


def render_command(args: argparse.Namespace) -> int:
    """``render``: one process, or ``--nproc-per-node N`` ranks through the elastic launcher.
    Returns the exit status (130 after Ctrl-C, with one line saying how far it got)."""
    from trainer.inference.render_views import RenderInterrupted

    try:
        return _render(args)
    except RenderInterrupted as exc:
        return _interrupted(str(exc))
    except KeyboardInterrupt:
        video = "; no video written" if args.video is not None else ""
        return _interrupted(f"render stopped before the first frame was rendered{video}")


def _render(args: argparse.Namespace) -> int:
    from trainer.inference.loading import load_model
    from trainer.inference.render_views import render_job

    check_render_flags(args)
    if args.nproc_per_node is not None and args.nproc_per_node > 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        return _launch_render(args)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return _render_worker(args)
    model = load_model(args.model, args.scene, args.device)
    try:
        job = _render_job(args, model)
        summary = render_job(model, job)
    finally:
        model.close()
    for note in summary["notes"]:
        print(f"warning: {note}", file=sys.stderr)
    print(_summary_line(summary, job), flush=True)
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
    from trainer.parallel.launch import launch_workers

    logs = Path(tempfile.mkdtemp(prefix="ngptune-render-"))
    argv = _worker_argv(args.render_argv) + (["--out", str(args.out)] if args.out is not None and "--out" not in args.render_argv else [])
    try:
        launch_workers(["-m", "trainer.inference", "render", *argv], args.nproc_per_node, run_dir=logs,
                       timeout_s=300, env_extra={"NGPTUNE_RENDER_SUMMARY": str(logs / "summary.json")})
    except TrainerError as exc:
        raise type(exc)(f"{exc} (rank logs in {logs}/logs)") from None
    except KeyboardInterrupt:
        from trainer.inference.render_views import RenderInterrupted

        kept = f"; the PNG frames written so far are in {args.out}" if args.out is not None else ""
        video = "; no video written" if args.video is not None else ""
        raise RenderInterrupted(f"render stopped, the ranks were stopped{video}{kept} (rank logs in {logs}/logs)") from None
    summary = json.loads((logs / "summary.json").read_text(encoding="utf-8"))
    shutil.rmtree(logs, ignore_errors=True)
    for note in summary["notes"]:
        print(f"warning: {note}", file=sys.stderr)
    print(summary["line"], flush=True)
    return 0


def _render_worker(args: argparse.Namespace) -> int:
    """One rank of ``render --nproc-per-node``: load the model alone, then join the gloo group
    for the final barrier (a subgrid checkpoint is loaded as one rank holding every box)."""
    import torch.distributed as dist

    from trainer.contract.config import apply_overrides, load_config
    from trainer.inference.loading import load_model
    from trainer.inference.render_views import render_job
    from trainer.parallel.dist_env import detect_dist_env, init_distributed

    probe = apply_overrides(load_config(None), {"distributed.backend": "gloo", "training.device": args.device or "auto"})
    env = detect_dist_env(probe)
    model = load_model(args.model, args.scene, str(env.device))
    try:
        job = _render_job(args, model)
        init_distributed(env, RENDER_GROUP_TIMEOUT_S)
        summary = render_job(model, job, env.rank, env.world_size, barrier=dist.barrier if env.world_size > 1 else None)
    finally:
        model.close()
        if dist.is_initialized():
            dist.destroy_process_group()
    target = os.environ.get("NGPTUNE_RENDER_SUMMARY")
    if env.rank == 0 and target:
        summary["frames_per_s"] = summary["frames"] / max(summary["seconds"], 1e-9)
        summary["rays_per_s"] *= env.world_size
        summary["line"] = _summary_line(summary, job) + f" ({env.world_size} ranks)"
        Path(target).write_text(json.dumps(summary), encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------- export


def export_command(args: argparse.Namespace) -> int:
    """``export mesh|pointcloud``. Returns the exit status (130 after Ctrl-C: nothing is written,
    the files appear only when complete)."""
    from trainer.inference.loading import check_model_path

    check_model_path(args.model)
    check_device_flag(args.device)
    out = args.out or _model_folder(args.model) / ("mesh.ply" if args.kind == "mesh" else "pointcloud.ply")
    try:
        return _export_mesh(args, out) if args.kind == "mesh" else _export_pointcloud(args, out)
    except KeyboardInterrupt:
        return _interrupted(f"export {args.kind} stopped; {out} was not written")


def _from_model(args: argparse.Namespace, extract: Any) -> Any:
    """``extract(model)`` with the model of ``args`` loaded, closed afterwards."""
    from trainer.inference.loading import load_model

    model = load_model(args.model, args.scene, args.device)
    try:
        return extract(model)
    finally:
        model.close()


def _export_mesh(args: argparse.Namespace, out: Path) -> int:
    from trainer.inference.mesh import check_mesh_request, extract_mesh, write_mesh

    check_mesh_request(args.resolution, out, args.aabb, args.threshold)
    mesh = _from_model(args, lambda model: extract_mesh(model, args.resolution, args.threshold, args.aabb,
                                                        quiet=args.quiet))
    write_mesh(mesh, out)
    print(f"mesh: {len(mesh['vertices'])} vertices, {len(mesh['faces'])} triangles at {args.resolution}^3, "
          f"threshold {args.threshold:g} (density {mesh['density_s']:.2f} s, marching cubes {mesh['marching_s']:.2f} s) "
          f"-> {out}", flush=True)
    return 0


def _export_pointcloud(args: argparse.Namespace, out: Path) -> int:
    from trainer.inference.pointcloud import (
        check_pointcloud_request, extract_pointcloud, shortfall_note, write_pointcloud,
    )

    check_pointcloud_request(args.n_points, args.min_opacity, out)
    cloud = _from_model(args, lambda model: extract_pointcloud(model, args.n_points, args.min_opacity, args.seed,
                                                               quiet=args.quiet))
    write_pointcloud(cloud, out)
    note = shortfall_note(cloud, args.n_points, args.min_opacity)
    if note is not None:
        print(f"warning: {note}", file=sys.stderr)
    print(f"point cloud: {len(cloud['points'])} points from {cloud['rays']} rays (opacity >= {args.min_opacity:g}) "
          f"-> {out}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m trainer.inference") -> int:
    from trainer.contract.runstatus import plain_warning_format

    plain_warning_format()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(raw)
    if args.command == "render":
        args.render_argv = raw[raw.index("render") + 1 :]
    try:
        return int(args.func(args))
    except TrainerError as exc:
        print_error(exc)
        return 2

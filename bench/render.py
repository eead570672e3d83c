"""Rendering and export speed of a trained run: test views at spp 1 and 8, an orbit, a video, meshes.

Prints one table: frames/s of ``--test-views`` test views at each ``--spp``; frames/s of an orbit
of ``--orbit-frames`` frames at ``--orbit-width`` × ``--orbit-height``; the wall time of a video of
``--video-seconds`` × ``--fps`` frames at the same size (rendering and encoding); seconds (density
grid + marching cubes) and triangles of a mesh at each ``--mesh-resolutions``.

    python bench/render.py --run runs/demo                          # CPU, demo scene
    python bench/render.py --run runs/lego --mesh-resolutions 256 512
    python bench/render.py --run runs/fox --skip-test --orbit-width 1920 --orbit-height 1080 --video-seconds 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from _common import machine_description, print_table

from trainer.inference.cameras import orbit_cameras, resize_cameras, scene_orbit
from trainer.inference.loading import load_model
from trainer.inference.mesh import extract_mesh
from trainer.inference.render_views import RenderJob, render_job
from trainer.train.evaluate import evaluation_frames


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="run folder, snapshot or checkpoint folder")
    parser.add_argument("--scene", type=Path, default=None, help="the scene, if it moved since training")
    parser.add_argument("--device", default=None)
    parser.add_argument("--test-views", type=int, default=8, help="test views rendered per spp (evenly spaced)")
    parser.add_argument("--spp", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--skip-test", action="store_true", help="no test-view rows")
    parser.add_argument("--orbit-frames", type=int, default=8)
    parser.add_argument("--orbit-width", type=int, default=None, help="default: the training cameras' size")
    parser.add_argument("--orbit-height", type=int, default=None)
    parser.add_argument("--video-seconds", type=float, default=1.0)
    parser.add_argument("--no-video", action="store_true", help="no video row (no encoder needed)")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--mesh-resolutions", type=int, nargs="*", default=[256, 512])
    args = parser.parse_args()

    model = load_model(args.run, args.scene, args.device)
    scene, device = model.scene, model.device
    background = (1.0, 1.0, 1.0) if scene.white_background else (0.0, 0.0, 0.0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_test:
            views = [f for _, f in evaluation_frames(scene.frames("test") or scene.frames("train"), args.test_views)]
            for spp in args.spp:
                render_job(model, RenderJob(cameras=views[:1], spp=spp, background=background, quiet=True))  # warm-up
                _sync(device)
                summary = render_job(model, RenderJob(cameras=views, spp=spp, background=background, quiet=True))
                k = views[0].intrinsics
                rows.append([f"test views {k.width}x{k.height}, spp {spp}", len(views), f"{summary['frames_per_s']:.3g}",
                             f"{summary['rays_per_s']:.3g}", f"{summary['seconds']:.2f}", "-"])
        first = resize_cameras(scene.frames("train")[:1], args.orbit_width, args.orbit_height)[0]
        orbit = scene_orbit(scene)
        frames = orbit_cameras(orbit, args.orbit_frames, first.intrinsics)
        k = first.intrinsics
        summary = render_job(model, RenderJob(cameras=frames, background=background, quiet=True))
        rows.append([f"orbit {k.width}x{k.height}, spp 1", len(frames), f"{summary['frames_per_s']:.3g}",
                     f"{summary['rays_per_s']:.3g}", f"{summary['seconds']:.2f}", "-"])
        n_video = 0 if args.no_video else max(1, round(args.video_seconds * args.fps))
    with tempfile.TemporaryDirectory() as tmp:
        if n_video:
            t0 = time.perf_counter()
            video = Path(tmp) / "orbit.mp4"
            summary = render_job(model, RenderJob(cameras=orbit_cameras(orbit, n_video, first.intrinsics), background=background,
                                                  video=video, fps=args.fps, quiet=True))
            wall_s = time.perf_counter() - t0
            rows.append([f"video {args.video_seconds:g} s at {args.fps:g} fps, {k.width}x{k.height} ({summary['video_codec']})",
                         n_video, f"{n_video / wall_s:.3g}", f"{summary['rays_per_s']:.3g}", f"{wall_s:.2f}",
                         f"{video.stat().st_size / 2**20:.2f} MiB"])
    for resolution in args.mesh_resolutions:
        _sync(device)
        t0 = time.perf_counter()
        mesh = extract_mesh(model, resolution)
        seconds = time.perf_counter() - t0
        rows.append([f"mesh {resolution}^3 (density {mesh['density_s']:.2f} s, marching {mesh['marching_s']:.2f} s)",
                     1, "-", "-", f"{seconds:.2f}", f"{len(mesh['faces'])} triangles"])
    model.close()
    print_table(f"render/export of {args.run} (step {model.step}, {scene.root.name}) on {machine_description()}",
                ["what", "frames", "frames/s", "rays/s", "wall s", "result"], rows)


if __name__ == "__main__":
    main()

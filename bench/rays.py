"""Ray-batch sampling speed per placement, and the pixel-cache speed-up.

Usage:
    python bench/rays.py                       # synthetic table of fox's size (50 × 1080×1920)
    python bench/rays.py --scene ../shared/data/fox [--device cuda] [--n-rays 262144]

Prints one row per placement: placement, n_rays, median and p90 milliseconds per batch (CUDA
events on CUDA, wall clock on CPU). With ``--scene``, first loads the training images twice
through a fresh disk cache and prints the decode time, the cached load time (also with every
page of the table touched, since a cached table is memory-mapped) and their ratio.

Target: < 1 ms per 2^18-ray batch with ``device`` placement on one H200.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.data.images import PixelTable, load_pixel_table  # noqa: E402
from trainer.data.sampler import RaySampler  # noqa: E402
from trainer.data.scene import Frame, Intrinsics  # noqa: E402

# fox (instant-ngp data/nerf/fox/transforms.json): 50 images, 1080×1920, OpenCV distortion
FOX_INTRINSICS = Intrinsics(
    1080, 1920, fx=1375.52, fy=1374.49, cx=554.558, cy=965.268,
    k1=0.0578, k2=-0.0805, p1=-0.0004, p2=0.0003,
)
FOX_IMAGES = 50


def synthetic_scene(device: torch.device) -> tuple[list[Frame], PixelTable]:
    """Fox-sized table of random pixels, cameras on a circle around the unit cube's centre."""
    frames = []
    for i in range(FOX_IMAGES):
        angle = 2 * np.pi * i / FOX_IMAGES
        eye = 0.5 + np.array([np.cos(angle), np.sin(angle), 0.3])
        forward = (0.5 - eye) / np.linalg.norm(0.5 - eye)
        right = np.cross(forward, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        c2w = np.eye(4)
        c2w[:3, :3] = np.stack([right, np.cross(right, forward), -forward], axis=1)
        c2w[:3, 3] = eye
        frames.append(Frame(f"{i:04d}", Path(f"{i:04d}.jpg"), c2w, FOX_INTRINSICS))
    n = FOX_IMAGES * FOX_INTRINSICS.width * FOX_INTRINSICS.height
    pixels = torch.randint(0, 256, (n, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    widths = torch.full((FOX_IMAGES,), FOX_INTRINSICS.width, dtype=torch.int64)
    heights = torch.full((FOX_IMAGES,), FOX_INTRINSICS.height, dtype=torch.int64)
    offsets = torch.zeros(FOX_IMAGES + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(widths * heights, 0)
    return frames, PixelTable(pixels, offsets, widths, heights, has_alpha=False)


def cache_speedup(frames: list[Frame], downscale: int) -> None:
    with tempfile.TemporaryDirectory() as cache_dir:
        first = load_pixel_table(frames, downscale=downscale, cache_dir=Path(cache_dir))
        second = load_pixel_table(frames, downscale=downscale, cache_dir=Path(cache_dir))
        start = time.perf_counter()
        second.pixels[::1024].sum()  # touch every 4 KiB page of the memory-mapped table
        touched_s = second.load_time_s + time.perf_counter() - start
        assert torch.equal(first.pixels, second.pixels), "cached table differs from the decoded one"
    print(f"pixel table: {first.n_images} images, {first.nbytes / 2**20:.0f} MiB {first.pixels.dtype}")
    print(f"  decode + cache write      {first.load_time_s * 1e3:9.1f} ms")
    for label, seconds in (("cached load", second.load_time_s), ("cached load, pages read", touched_s)):
        print(f"  {label:<25} {seconds * 1e3:9.1f} ms  ({first.load_time_s / seconds:.1f}x)")


def time_batches(sampler: RaySampler, n_rays: int, steps: int, warmup: int) -> list[float]:
    cuda = sampler.device.type == "cuda"
    for _ in range(warmup):
        sampler.sample(n_rays)
    times_ms = []
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sampler.sample(n_rays)
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            sampler.sample(n_rays)
            times_ms.append((time.perf_counter() - t0) * 1e3)
    return times_ms


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scene", type=Path, help="scene to load (default: synthetic, fox-sized)")
    parser.add_argument("--downscale", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n-rays", type=int, default=1 << 18)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--placements", default="device,pinned", help="comma-separated")
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    if args.scene is not None:
        from trainer.data import load_scene

        frames = load_scene(args.scene, downscale=args.downscale).frames("train")
        cache_speedup(frames, args.downscale)
        table = load_pixel_table(frames, downscale=args.downscale)
        source = str(args.scene)
    else:
        if "stream" in args.placements.split(","):
            parser.error("the stream placement decodes image files: give --scene")
        frames, table = synthetic_scene(device)
        source = "synthetic, fox-sized"
    size = f"{table.n_images} images, {table.nbytes / 2**20:.0f} MiB"
    print(f"\nray batches from {source} ({size}) on {device}")
    print(f"{'placement':<10} {'n_rays':>8} {'median ms':>10} {'p90 ms':>8}")
    for placement in args.placements.split(","):
        with RaySampler(frames, table, placement, device, seed=0, downscale=args.downscale) as sampler:
            times_ms = sorted(time_batches(sampler, args.n_rays, args.steps, args.warmup))
        p90 = times_ms[min(len(times_ms) - 1, int(0.9 * len(times_ms)))]
        print(f"{placement:<10} {args.n_rays:>8} {statistics.median(times_ms):>10.3f} {p90:>8.3f}")


if __name__ == "__main__":
    main()

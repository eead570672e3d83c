"""Meshes and point clouds of a trained run with and without the support rule (``--min-views``):
triangles or points kept, left out, the bounding box in the scene's world, and the time the rule takes.

    python bench/mesh_support.py --run runs/lego --resolution 256 --min-views 0 1 3 5

On lego the object spans about [-0.66, 0.65] × [-1.15, 1.24] × [-0.47, 1.0] in its world; without
the rule the mesh's box fills the scene box (±1.5).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_description, print_table  # noqa: E402


def _box(points: np.ndarray) -> str:
    if len(points) == 0:
        return "-"
    lo, hi = points.min(axis=0), points.max(axis=0)
    return " × ".join(f"[{a:.2f}, {b:.2f}]" for a, b in zip(lo, hi))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="run folder, snapshot or checkpoint folder")
    parser.add_argument("--resolution", type=int, default=256, help="mesh lattice points per axis (default 256)")
    parser.add_argument("--min-views", type=int, nargs="+", default=[0, 1, 3, 5], help="values compared (default 0 1 3 5)")
    parser.add_argument("--n-points", type=int, default=200_000, help="point-cloud points (0: no point clouds)")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: the run's)")
    args = parser.parse_args()

    from trainer.inference.loading import load_model
    from trainer.inference.mesh import extract_mesh
    from trainer.inference.pointcloud import extract_pointcloud

    model = load_model(args.run, device=args.device)
    rows = []
    try:
        for min_views in args.min_views:
            start = time.perf_counter()
            mesh = extract_mesh(model, args.resolution, min_views=min_views)
            rows.append([f"mesh {args.resolution}^3", min_views, len(mesh["faces"]), mesh["faces_unsupported"],
                         _box(mesh["vertices"]), mesh["support_s"], time.perf_counter() - start])
            if args.n_points > 0:
                start = time.perf_counter()
                cloud = extract_pointcloud(model, args.n_points, min_views=min_views)
                rows.append([f"points {args.n_points}", min_views, len(cloud["points"]), cloud["unsupported"],
                             _box(cloud["points"]), float("nan"), time.perf_counter() - start])
    finally:
        model.close()
    print(f"machine: {machine_description()}")
    print_table(f"support rule on {args.run}", ["export", "min views", "kept", "left out", "box (scene world)",
                                                   "support s", "total s"], rows)


if __name__ == "__main__":
    main()

"""A PNG picture of a mesh file (vertex colours, flat Lambert shading, painter's algorithm).

    python scripts/mesh_preview.py runs/demo/mesh.ply docs/mesh_demo.png --size 360

Triangles are projected orthographically along a view direction (azimuth/elevation about the
z axis, the NeRF world's up), sorted far to near and filled with Pillow.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import trimesh
from PIL import Image, ImageDraw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mesh", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--size", type=int, default=360, help="image width and height in pixels")
    parser.add_argument("--azimuth", type=float, default=35.0, help="degrees about z")
    parser.add_argument("--elevation", type=float, default=25.0, help="degrees above the xy plane")
    args = parser.parse_args()

    mesh = trimesh.load(str(args.mesh), process=False)
    verts = np.asarray(mesh.vertices, dtype=np.float64)
    faces = np.asarray(mesh.faces)
    colours = np.asarray(mesh.visual.vertex_colors)[:, :3].astype(np.float64) / 255.0
    az, el = math.radians(args.azimuth), math.radians(args.elevation)
    view = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])  # towards the eye
    right = np.cross([0.0, 0.0, 1.0], view)
    right /= np.linalg.norm(right)
    up = np.cross(view, right)
    centre = (verts.min(0) + verts.max(0)) / 2
    x, y, depth = (verts - centre) @ right, (verts - centre) @ up, (verts - centre) @ view
    half = max(np.abs(x).max(), np.abs(y).max()) * 1.05
    px = (x / half * 0.5 + 0.5) * args.size
    py = (0.5 - y / half * 0.5) * args.size
    tri = verts[faces]
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    light = view * 0.6 + up * 0.6
    light /= np.linalg.norm(light)
    shade = 0.35 + 0.65 * np.abs(normals @ light)
    face_colour = np.clip(colours[faces].mean(axis=1) * shade[:, None], 0, 1)
    image = Image.new("RGB", (args.size, args.size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for f in np.argsort(depth[faces].mean(axis=1)):  # far first
        a, b, c = faces[f]
        draw.polygon([(px[a], py[a]), (px[b], py[b]), (px[c], py[c])],
                     fill=tuple(int(v * 255 + 0.5) for v in face_colour[f]))
    args.png.parent.mkdir(parents=True, exist_ok=True)
    image.save(args.png, optimize=True)
    print(f"{args.png}: {len(faces)} triangles, {args.png.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()

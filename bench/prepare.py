"""``ngptune prepare`` on fox's images: seconds per stage, registered images, and the recovered
cameras against fox's own ``transforms.json`` after a similarity alignment (Umeyama).

    python bench/prepare.py                          # 20 images shrunk by 4, photos and video
    python bench/prepare.py --n-images 50 --shrink 2 --inputs photos

Photos: every ``--step``-th fox image (the first ``--n-images``), shrunk by ``--shrink`` (area
averaging), JPEG quality 95. Video: the same images as an mp4v video, each image one sharp frame
between two blurred copies, ``--frames`` = the number of images. Position errors are in the units of
fox's ``transforms.json`` and as a percentage of the cameras' mean distance from fox's origin.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, machine_description, print_table  # noqa: E402
from tests.support.fox import write_blurred_video  # noqa: E402  (the tests' video, one writer)

FOX = REPO.parent / "shared" / "data" / "fox"


def fox_images(n_images: int, step: int, shrink: int) -> list[tuple[str, np.ndarray]]:
    import cv2

    out = []
    for path in sorted((FOX / "images").glob("*.jpg"))[::step][:n_images]:
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        size = (image.shape[1] // shrink, image.shape[0] // shrink)
        out.append((path.name, cv2.resize(image, size, interpolation=cv2.INTER_AREA) if shrink > 1 else image))
    return out


def write_photos(images: list[tuple[str, np.ndarray]], folder: Path) -> dict[str, str]:
    import cv2

    folder.mkdir(parents=True)
    for name, image in images:
        cv2.imwrite(str(folder / name), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return {name: name for name, _ in images}


def nerf_c2w(transforms: Path) -> dict[str, np.ndarray]:
    data = json.loads(transforms.read_text())
    return {Path(f["file_path"]).name: np.array(f["transform_matrix"], dtype=np.float64) for f in data["frames"]}


def measure(source: Path, scene: Path, names_to_fox: dict[str, str], n_frames: int | None) -> list[object]:
    from ngptune.prepare import pose_errors, prepare_scene
    from trainer.data import load_scene

    start = time.perf_counter()
    result = prepare_scene(source, scene, n_frames=n_frames, quiet=True)
    total_s = time.perf_counter() - start
    load_scene(scene)  # the trainer's loader reads the result
    estimated = nerf_c2w(result.transforms_path)
    reference = nerf_c2w(FOX / "transforms.json")
    names = sorted(estimated)
    ref = np.stack([reference[names_to_fox[n]] for n in names])
    errors = pose_errors(np.stack([estimated[n] for n in names]), ref)
    distance = float(np.mean(np.linalg.norm(ref[:, :3, 3], axis=1)))
    report = result.report
    seconds = report.stage_seconds
    return [
        f"{report.registered}/{report.total}", f"{report.mean_reprojection_error_px:.3f}",
        seconds["frames"], seconds["features"], seconds["matching"], seconds["mapping"], total_s,
        f"{np.median(errors.rotation_deg):.3f}", f"{errors.rotation_deg.max():.3f}",
        f"{np.median(errors.position):.4f}", f"{100 * np.median(errors.position) / distance:.3f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-images", type=int, default=20, help="fox images used (default 20; fox has 50)")
    parser.add_argument("--step", type=int, default=2, help="every STEP-th fox image (default 2)")
    parser.add_argument("--shrink", type=int, default=4, help="divide width and height by this (default 4: 270x480)")
    parser.add_argument("--inputs", default="photos,video", help="comma-separated: photos, video (default both)")
    args = parser.parse_args()
    images = fox_images(args.n_images, args.step, args.shrink)
    height, width = images[0][1].shape[:2]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.inputs.split(","):
            work = Path(tmp) / kind
            if kind == "photos":
                names = write_photos(images, work / "photos")
                row = measure(work / "photos", work / "scene", names, None)
            elif kind == "video":
                work.mkdir()
                names = write_blurred_video(images, work / "fox.mp4")
                row = measure(work / "fox.mp4", work / "scene", names, len(images))
            else:
                raise SystemExit(f"--inputs: expected photos or video, got {kind!r}")
            rows.append([kind, f"{len(images)} x {width}x{height}"] + row)
    print(f"machine: {machine_description()}")
    print_table(
        "ngptune prepare on fox (errors against fox's transforms.json after Umeyama alignment)",
        ["input", "images", "registered", "reproj px", "frames s", "features s", "matching s", "mapping s",
         "total s", "rot median deg", "rot max deg", "pos median (fox units)", "pos median % of distance"],
        rows,
    )


if __name__ == "__main__":
    main()

"""The web viewer's speed: frames per second at rest, and what ``--view`` costs a training run.

``frames``: a resting browser's full frame (spp 1) of a trained model at each ``--sizes`` canvas,
rendered as the viewer renders it (:class:`trainer.viewer.frames.BandedFrame`, in bands of about
:data:`trainer.viewer.server.FULL_BAND_S` at the rays/s of the two warm-up frames) from the first
training camera, then JPEG-encoded at the viewer's quality as viser sends it. Frames per second of
the render alone and with the encoding, ``--frames`` frames after the warm-up.

``training``: the same training run (``python -m trainer``, ``--n-steps`` steps, no evaluation)
without ``--view``, with ``--view`` and no browser (the viewer idle), and, with ``--browser``, with
``--view`` and one headless Chromium page open at rest (its first frames, then the live view's
refreshes of at most 2 % of the time). The variants alternate, ``--rounds`` times. Steps per
second are wall-clock: the steps after the first metrics record over the time of their intervals
(rendering between steps included; ``train_time_s`` leaves it out).

    python bench/viewer.py frames --run runs/lego
    python bench/viewer.py training --scene ../shared/data/nerf_synthetic_lego_400 \\
        --config configs/nerf_synthetic_400.json --n-steps 3000 --browser
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import REPO, machine_description, print_table


def _size(text: str) -> tuple[int, int]:
    width, height = text.lower().split("x")
    return int(width), int(height)


def bench_frames(args: argparse.Namespace) -> None:
    import cv2
    import torch

    from trainer.inference.loading import load_model
    from trainer.viewer.camera import ViewCamera, view_camera_of_frame
    from trainer.viewer.frames import BandedFrame, FrameRequest
    from trainer.viewer.server import FULL_BAND_S, JPEG_QUALITY

    model = load_model(args.run, args.scene, args.device)
    background = (1.0, 1.0, 1.0) if model.scene.white_background else (0.0, 0.0, 0.0)
    wxyz, position, fov_y = view_camera_of_frame(model.scene.frames("train")[0])
    rows = []
    for width, height in map(_size, args.sizes):
        view = ViewCamera(wxyz=tuple(wxyz), position=tuple(position), fov_y=fov_y, width=width, height=height)
        request = FrameRequest(frame=view.frame(), background=background, spp=1)
        render_s, encode_s = [], []
        band_rays = request.rays
        for i in range(args.frames + 2):
            if model.device.type == "cuda":
                torch.cuda.synchronize(model.device)
            t0 = time.perf_counter()
            image = BandedFrame(model, request, band_rays=band_rays).render_all()
            if model.device.type == "cuda":
                torch.cuda.synchronize(model.device)
            t1 = time.perf_counter()
            if i == 1:  # the viewer's band size from the rate of the second warm-up frame
                band_rays = max(1, int(request.rays / (t1 - t0) * FULL_BAND_S))
            ok, _ = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            t2 = time.perf_counter()
            assert ok
            if i >= 2:
                render_s.append(t1 - t0)
                encode_s.append(t2 - t1)
        render, total = sum(render_s) / len(render_s), (sum(render_s) + sum(encode_s)) / len(render_s)
        rows.append([f"{width}x{height}", 1.0 / render, 1.0 / total, render * 1e3, total * 1e3,
                     width * height / render])
    model.close()
    print_table(f"Viewer frames at rest, spp 1, {args.frames} frames each ({machine_description()}; {args.run})",
                ["canvas", "frames/s render", "frames/s render+jpeg", "render ms", "render+jpeg ms", "rays/s"], rows)


def _wall_steps_per_s(metrics: Path) -> float:
    """Steps after the first record over the wall time of their intervals."""
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    later = records[1:]
    steps = later[-1]["step"] - records[0]["step"]
    seconds = sum(r["step_time_ms"] / 1e3 * (r["step"] - p["step"]) for p, r in zip(records, later))
    return steps / seconds


def _browse(url: str, stop: threading.Event, chromium: str) -> None:
    """One headless page at ``url``, open and at rest until ``stop``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(url)
        stop.wait()
        browser.close()


def _train(args: argparse.Namespace, variant: str, out: Path) -> float:
    argv = [sys.executable, "-m", "trainer", "--scene", str(args.scene), "--n-steps", str(args.n_steps), "--no-eval",
            "--quiet", "--out", str(out), *(["--config", str(args.config)] if args.config else []),
            *[a for s in args.set for a in ("--set", s)]]
    if variant != "without --view":
        argv.append("--view")
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stop, browsing = threading.Event(), None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = re.search(r"viewer: (http://\S+)", line)
        if match and variant.endswith("browser at rest"):
            browsing = threading.Thread(target=_browse, args=(match.group(1), stop, args.chromium))
            browsing.start()
    proc.wait()
    stop.set()
    if browsing is not None:
        browsing.join(60)
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: training failed (exit {proc.returncode}):\n" + "".join(lines[-20:]))
    return _wall_steps_per_s(out / "metrics.jsonl")


def bench_training(args: argparse.Namespace) -> None:
    variants = ["without --view", "--view, no browser"]
    if args.browser:
        args.chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
        if args.chromium is None:
            raise SystemExit("--browser: no Chromium found (apt-get install chromium, or --chromium PATH)")
        variants.append("--view, one browser at rest")
    results: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                out = Path(tmp) / f"round{round_}_variant{variants.index(variant)}"
                results[variant].append(_train(args, variant, out))
    base = sorted(results[variants[0]])[len(results[variants[0]]) // 2]
    rows = []
    for variant, values in results.items():
        median = sorted(values)[len(values) // 2]
        rows.append([variant, " ".join(f"{v:.1f}" for v in values), median, f"{100 * (median / base - 1):+.1f} %"])
    print_table(f"Training steps/s with and without --view, {args.n_steps} steps, {args.rounds} alternating rounds "
                f"({machine_description()}; {args.scene})", ["run", "steps/s per round", "median", "vs without"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    frames = sub.add_parser("frames", help="frames per second of resting frames")
    frames.add_argument("--run", type=Path, required=True, help="run folder, snapshot or checkpoint folder")
    frames.add_argument("--scene", type=Path, default=None, help="the scene, if it moved since training")
    frames.add_argument("--device", default=None)
    frames.add_argument("--sizes", nargs="+", default=["1280x720", "1920x1080"], help="canvas sizes WxH")
    frames.add_argument("--frames", type=int, default=20)
    training = sub.add_parser("training", help="steps/s of training with and without --view")
    training.add_argument("--scene", type=Path, required=True)
    training.add_argument("--config", type=Path, default=None)
    training.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    training.add_argument("--n-steps", type=int, default=3000)
    training.add_argument("--rounds", type=int, default=2)
    training.add_argument("--browser", action="store_true", help="also: one headless Chromium page at rest")
    training.add_argument("--chromium", default=None, help="the Chromium binary (default: chromium on PATH)")
    args = parser.parse_args()
    bench_frames(args) if args.part == "frames" else bench_training(args)


if __name__ == "__main__":
    main()

"""``ngptune view`` as a user meets it: the command serves a tiny trained model, headless Chromium
opens the page, a rendered frame arrives and matches ``ngptune render`` of the same camera (saved
from the page), the camera is moved through viser's camera API (the page's "Next" training-camera
button) and a new frame follows; a second browser comes and goes while the first is served;
Ctrl-C stops the viewer with one line."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest

from tests.support.browser import CHROMIUM_ARGS, chromium_path
from tests.support.cli import first_statement
from tests.support.served import Served

pytest.importorskip("viser")

MAX_RESOLUTION = 48  # pixels on the longest side: a full frame renders in seconds on a CPU
VIEWPORT = {"width": 960, "height": 360}  # a canvas of about 16:9 beside the docked panel
FRAME_TIMEOUT_MS = 240_000
# A frame in the page against render's PNG of the same camera: the page shows a JPEG (quality 90)
# magnified by the browser; reduced back to the frame's size, the mean absolute difference per
# channel was 0.012 in [0, 1]; the frame of another training camera differs by 0.07.
MATCH_TOLERANCE = 0.03
GIZMO_PX = 80  # the axes widget in the canvas's lower left corner is left out of the comparison


def _last_frame(page) -> tuple[int, int, int, str]:
    """(number, width, height, kind) of the newest frame the page's panel reports."""
    found = re.findall(r"Frame (\d+): (\d+)×(\d+) \((\w+)\)", page.evaluate("() => document.body.innerText"))
    number, width, height, kind = found[-1]
    return int(number), int(width), int(height), kind


def _wait_full_frame(page, after: int) -> tuple[int, int, int, str]:
    page.wait_for_function(
        "after => { const m = [...document.body.innerText.matchAll(/Frame (\\d+): \\d+×\\d+ \\(full\\)/g)];"
        " return m.length > 0 && +m[m.length - 1][1] > after; }", arg=after, timeout=FRAME_TIMEOUT_MS)
    page.wait_for_timeout(1000)  # the frame's texture reaches the canvas
    return _last_frame(page)


def _canvas(page) -> np.ndarray:
    """The 3-D canvas as the page shows it: [h, w, 3] float32 RGB in [0, 1]."""
    x, y, width, height = page.evaluate(
        "() => { const c = [...document.querySelectorAll('canvas')].sort((a, b) => "
        "b.clientWidth * b.clientHeight - a.clientWidth * a.clientHeight)[0];"
        " const r = c.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }")
    png = page.screenshot(clip={"x": x, "y": y, "width": width, "height": height})
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    return image[..., ::-1].astype(np.float32) / 255.0


def _compared(canvas: np.ndarray, render: np.ndarray) -> np.ndarray:
    """Absolute differences of the canvas reduced to the render's size, the axes widget left out."""
    h, w = render.shape[:2]
    reduced = cv2.resize(canvas, (w, h), interpolation=cv2.INTER_AREA)
    keep = np.ones((h, w), dtype=bool)
    keep[h - int(np.ceil(GIZMO_PX * h / canvas.shape[0])):, : int(np.ceil(GIZMO_PX * w / canvas.shape[1]))] = False
    return np.abs(reduced - render)[keep]


def _render_saved_camera(served: Served, page, run, out, start: int) -> np.ndarray:
    """Click "Save camera", render the saved camera path with ``ngptune render``; its PNG."""
    from ngptune.cli import main

    page.get_by_role("button", name="Save camera").click()
    path = served.wait_for(r"camera saved to (\S+); render it with ngptune render", start=start).group(1)
    assert main(["render", str(run), "--cameras", path, "--out", str(out), "--quiet"]) == 0
    return cv2.imread(str(out / "00000.png"), cv2.IMREAD_COLOR)[..., ::-1].astype(np.float32) / 255.0


@pytest.mark.slow
def test_view_serves_frames_that_match_render_and_follow_the_camera(trained_run, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_path()
    run = trained_run["run"]
    with Served(["ngptune", "view", run, "--max-resolution", MAX_RESOLUTION, "--cpu-threads", "1"]) as served:
        url = served.url()
        served.wait_for("Ctrl-C stops it$")
        assert first_statement("\n".join(served.lines))[0] == (
            f"viewer: {url} — scene, step 80 from {run}/snapshots/step_0000080.pt, on cpu, 1 CPU thread per rank "
            "(--cpu-threads); Ctrl-C stops it")
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=executable, args=[*CHROMIUM_ARGS, "--headless"])
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.set_default_timeout(FRAME_TIMEOUT_MS)  # software WebGL on a busy CPU is slow to answer
                page.goto(url)
                served.wait_for(r"viewer: browser 1 connected \(1 connected\)")
                page.get_by_label("Training cameras").uncheck()  # overlays drawn over the frame
                page.get_by_label("Scene box").uncheck()
                for close in page.locator(".mantine-Notification-closeButton").all():
                    close.click()  # "software WebGL" (no GPU in the browser)
                number, width, height, _ = _wait_full_frame(page, after=0)
                assert max(width, height) == MAX_RESOLUTION
                first = _canvas(page)
                assert first.shape[1] / first.shape[0] == pytest.approx(width / height, rel=0.05)
                not_background = np.abs(first - 1.0).max(axis=-1) > 0.2  # the demo scene's background is white
                assert 0.02 < not_background.mean() < 0.9, "the frame is blank"
                render = _render_saved_camera(served, page, run, tmp_path / "first", len(served.lines))
                assert render.shape[:2] == (height, width)
                assert _compared(first, render).mean() < MATCH_TOLERANCE

                other = browser.new_page(viewport=VIEWPORT)  # a second browser comes and goes
                other.set_default_timeout(FRAME_TIMEOUT_MS)
                other.goto(url)
                served.wait_for(r"viewer: browser 2 connected \(2 connected\)")
                other.close()
                served.wait_for(r"viewer: browser 2 disconnected \(1 still connected\)")

                page.get_by_role("button", name="Next").click()  # viser's camera API moves the view
                later, *_ = _wait_full_frame(page, after=number)
                second = _canvas(page)
                moved = _render_saved_camera(served, page, run, tmp_path / "second", len(served.lines))
                assert _compared(second, moved).mean() < MATCH_TOLERANCE
                assert _compared(second, render).mean() > 2 * MATCH_TOLERANCE  # a new view, not the old frame
            finally:
                browser.close()
        assert served.interrupt() == 130
    assert served.lines[-2:] == ["viewer: browser 1 disconnected (0 still connected)", "viewer stopped"]
    assert not any("failed" in line for line in served.lines)

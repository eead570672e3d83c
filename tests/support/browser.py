"""Open a report in a real headless browser (Debian's Chromium driven by Playwright) and tell what it shows.

Used by the profile- and study-report tests. Chromium is installed by ``.ci/run`` (``apt-get install
chromium``); outside CI a machine without it skips these tests, under CI (``CI=true``) its absence fails.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Path of the Chromium binary; skips (or fails under CI) when there is none."""
    path = os.environ.get("NGPTUNE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is not installed (.ci/run installs Debian's chromium package)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return path


@dataclasses.dataclass
class PageView:
    """What the browser saw: page errors, failed requests, the visible text, rendered plots."""

    errors: list[str]
    failed_requests: list[str]
    text: str
    plots_rendered: int
    plots_total: int
    tables: int
    probe: object = None  # what the ``probe`` expression returned


def view_in_browser(page_path: Path, *, timeout_ms: int = 30000, screenshot: Path | None = None,
                    probe: str | None = None, width: int = 1280) -> PageView:
    """Load ``page_path`` from disk with the network blocked in a window ``width`` pixels wide,
    wait for plotly, and report; with ``screenshot``, save a full-page PNG there; with ``probe``, a
    JavaScript function expression evaluated on the page (its JSON-able result in ``probe``)."""
    playwright = pytest.importorskip("playwright.sync_api")
    executable = chromium_path()
    errors: list[str] = []
    failed: list[str] = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": width, "height": 900})
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("requestfailed", lambda req: failed.append(req.url))
            page.goto(Path(page_path).resolve().as_uri(), wait_until="load", timeout=timeout_ms)
            plots_total = page.locator("div.plotly-graph-div").count()
            if plots_total:
                page.wait_for_function(
                    "() => [...document.querySelectorAll('div.plotly-graph-div')].every(d => d._fullLayout)",
                    timeout=timeout_ms,
                )
            plots_rendered = page.evaluate(
                "() => [...document.querySelectorAll('div.plotly-graph-div')]"
                ".filter(d => d._fullLayout && d.querySelector('svg.main-svg')).length"
            )
            text = page.inner_text("body")
            tables = page.locator("table").count()
            probed = page.evaluate(probe) if probe is not None else None
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return PageView(errors, failed, text, plots_rendered, plots_total, tables, probed)

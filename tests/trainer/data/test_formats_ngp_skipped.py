"""The warning about frames skipped for missing image files: three names, then a count, in
lines under 80 columns."""

from __future__ import annotations

from pathlib import Path

from trainer.contract.runstatus import WARNING_PREFIX
from trainer.contract.textlines import LINE_WIDTH, joined
from trainer.data.formats.ngp import skipped_frames_warning


def test_the_skipped_frames_warning_names_three_files_and_fits_80_columns():
    names = [f"images/{i:04d}.jpg" for i in range(5, 22)]
    text = skipped_frames_warning(Path("/data/scenes/fox/transforms.json"), names)
    lines = (WARNING_PREFIX + text).splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines
    assert joined(lines) == ("warning: /data/scenes/fox/transforms.json: skipping 17 frames whose image file is "
                             "missing: images/0005.jpg, images/0006.jpg, images/0007.jpg and 14 more")


def test_one_skipped_frame_is_named_alone():
    text = skipped_frames_warning(Path("t.json"), ["images/0005.jpg"])
    assert joined(text.splitlines()) == "t.json: skipping 1 frame whose image file is missing: images/0005.jpg"

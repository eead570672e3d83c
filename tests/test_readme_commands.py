"""The README's command block: a run folder that render, export or view read is one a train line
writes (``--out``), and a camera file it names is one the README says where to get."""

from __future__ import annotations

import re

from tests.support.paths import REPO


def _commands() -> list[str]:
    return [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("ngptune ")]


def test_every_run_folder_read_is_written_by_a_train_line():
    commands = _commands()
    written = {m.group(1) for line in commands if line.startswith("ngptune train ")
               for m in [re.search(r"--out (\S+)", line.split("#")[0])] if m}
    read = {m.group(1) for line in commands
            for m in [re.match(r"ngptune (?:render|view|export \w+) (runs/[^\s/]+)", line)] if m}
    assert read and read <= written, sorted(read - written)


def test_the_camera_path_file_says_where_it_comes_from():
    line = next(line for line in _commands() if "--cameras base_cam.json" in line)
    assert "instant-ngp's GUI" in line and '"Save camera"' in line

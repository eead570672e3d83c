"""Which size rule wins, said in the first lines: on a forward-facing capture of 4032 px photos
with ``images_4/``, the CPU preset (``data.min_downscale`` 2) trains at the automatic rule's
1008x756, as ``inspect`` shows; an explicit factor wins as given, and the line says what the
automatic rule would have chosen."""

from __future__ import annotations

from itertools import takewhile
from pathlib import Path

import numpy as np

from tests.support.scene_formats import ring_c2w, write_image, write_llff
from trainer.contract.textlines import CONTINUATION, LINE_WIDTH, joined
from trainer.data import load_scene

PHONE_4032 = ("llff: trained at 1008x756 (downscale 4: the automatic rule: longest side 4032 px → 1008 px ≤ 1600 px; "
              "data.min_downscale 2 asks for no more); images from images_4/ as they are")


def _phone_capture(folder: Path) -> Path:
    """An LLFF capture calibrated for 4032x3024 photos, with images/ (a uniform resize standing in
    for the originals) and images_4/."""
    write_llff(folder, ring_c2w())
    npy = folder / "poses_bounds.npy"
    rows = np.load(npy)
    rows[:, [4, 9, 14]] = (3024.0, 4032.0, 3200.0)  # hwf
    np.save(npy, rows)
    for i in range(8):
        write_image(folder / "images" / f"IMG_{i:04d}.JPG", 80, 60)
        write_image(folder / "images_4" / f"IMG_{i:04d}.png", 40, 30)
    return folder


def test_the_presets_floor_never_overrides_the_captures_size_rule(tmp_path):
    scene_path = _phone_capture(tmp_path / "capture")
    preset = load_scene(scene_path, min_downscale=2)  # what `ngptune train` takes on a CPU without --config
    inspected = load_scene(scene_path)  # what `ngptune inspect` shows
    assert preset.size_rule == PHONE_4032
    assert preset.frames("train")[0].image_path.parent.name == "images_4"
    assert inspected.size_rule == PHONE_4032.replace("; data.min_downscale 2 asks for no more", "")

    explicit = load_scene(scene_path, downscale=2, min_downscale=2)  # --downscale 2: as given
    assert explicit.size_rule == (
        "llff: trained at 2016x1512 (downscale 2: data.downscale / --downscale 2, as given; the automatic rule would "
        "pick 4: longest side 4032 px → 1008 px ≤ 1600 px); images from images/, shrunk by 2 when decoded")


def test_a_blender_scene_takes_the_floor_and_says_so(tmp_path):
    from trainer.data.demo import write_demo_scene

    scene_path = write_demo_scene(tmp_path / "demo", resolution=32, n_train=2, n_val=1, n_test=1)
    assert load_scene(scene_path, min_downscale=2).size_rule == (
        "blender: trained at 16x16 (downscale 2: data.min_downscale 2, a floor above the automatic factor; the "
        "automatic rule keeps this format at full size); shrunk when decoded")
    assert load_scene(scene_path).size_rule == (
        "blender: trained at 32x32 (downscale 1: the automatic rule keeps this format at full size); images at full size")


def test_training_on_a_cpu_says_which_size_rule_won_in_its_first_lines(tmp_path, capsys):
    from trainer.cli import build_parser, train_command

    scene_path = _phone_capture(tmp_path / "capture")
    run = tmp_path / "run"
    args = build_parser().parse_args(["--scene", str(scene_path), "--device", "cpu", "--n-steps", "1", "--no-eval",
                                      "--quiet", "--out", str(run)])
    assert train_command(args) == 0
    lines = capsys.readouterr().out.splitlines()
    opening = 1 + sum(1 for _ in takewhile(lambda line: line.startswith(CONTINUATION), lines[1:]))
    assert "the CPU preset" in joined(lines[:opening])
    size_rule = next(i for i, line in enumerate(lines) if line.startswith("llff: trained at "))
    assert opening <= size_rule <= opening + 1  # right after the opening lines (or the CPU preset's warning)
    statement = lines[size_rule:size_rule + 1] + list(takewhile(lambda line: line.startswith(CONTINUATION),
                                                                lines[size_rule + 1:]))
    assert joined(statement) == PHONE_4032 and all(len(line) <= LINE_WIDTH for line in statement), statement


def test_no_size_rule_nests_brackets():
    from trainer.data.resolution import factor_and_reason, size_rule_line

    for requested, minimum, automatic in ((8, 1, False), (2, 1, True), (None, 4, True), (None, 2, False),
                                          (None, 1, True)):
        factor, reason = factor_and_reason(4032, 3024, requested, minimum, automatic=automatic)
        line = size_rule_line("llff", factor, reason, "100x75", "shrunk when decoded")
        depth = 0
        for char in line:
            depth += {"(": 1, ")": -1}.get(char, 0)
            assert 0 <= depth <= 1, line
        assert depth == 0, line

"""training.scene_model: auto picks by the capture's kind, a setting overrides it, bad values are
one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.contract.config import apply_overrides, load_config
from trainer.contract.errors import ConfigError
from trainer.data.capture_kind import CaptureKind
from trainer.render.scene_model import choose_scene_model, field_box

OBJECT = CaptureKind("object", "the images carry alpha", 0.7, 90.0)
FORWARD = CaptureKind("forward-facing", "no alpha; every view within 12°", 0.0, 12.0)
AROUND = CaptureKind("360", "no alpha; views spread to 52°", 0.0, 52.0)


def test_auto_picks_the_box_for_objects_and_the_unbounded_model_for_captures_with_background():
    assert choose_scene_model("auto", OBJECT).model == "box"
    assert choose_scene_model("auto", FORWARD).model == "unbounded"
    choice = choose_scene_model("auto", AROUND)
    assert choice.model == "unbounded" and choice.unbounded and choice.setting == "auto"
    assert choice.line() == ("scene model: unbounded (training.scene_model auto); capture: a 360° capture with "
                             "background (no alpha; views spread to 52°)")


def test_a_setting_overrides_the_capture():
    assert choose_scene_model("box", AROUND).model == "box"
    choice = choose_scene_model("unbounded", OBJECT)
    assert choice.model == "unbounded" and choice.line().startswith("scene model: unbounded (training.scene_model unbounded)")


def test_subgrid_mode_trains_the_box():
    assert choose_scene_model("auto", AROUND, "subgrid").model == "box"
    assert "subgrid" in choose_scene_model("auto", AROUND, "subgrid").line()
    with pytest.raises(ConfigError, match=r"^training\.scene_model: 'unbounded' cannot train in parallel\.mode 'subgrid'"):
        choose_scene_model("unbounded", AROUND, "subgrid")


def test_bad_values_are_one_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"training\.scene_model: expected one of auto, box, unbounded, got 'sphere'"):
        apply_overrides(load_config(None), {"training.scene_model": "sphere"})
    with pytest.raises(ConfigError, match=r"training\.background_steps: expected an integer in \[2, 4096\], got 1"):
        apply_overrides(load_config(None), {"training.background_steps": 1})
    with pytest.raises(ConfigError, match=r"^training\.scene_model: expected one of"):
        choose_scene_model("contracted", AROUND)
    assert load_config(None).training.scene_model == "auto"


def test_the_field_spans_the_box_or_the_contracted_cube():
    box, side = field_box(4, "box")
    np.testing.assert_array_equal(box, [[-1.5] * 3, [2.5] * 3])
    assert side == 4
    cube, side = field_box(4, "unbounded")
    np.testing.assert_array_equal(cube, [[-3.5] * 3, [4.5] * 3])
    assert side == 8

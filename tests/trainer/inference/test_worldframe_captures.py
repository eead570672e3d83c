"""Camera centres of LLFF and COLMAP captures map back to the capture's own world frame (the
export frame), whichever unit-cube placement the scene box chose."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.scene_formats import ring_c2w, write_colmap_scene, write_llff
from trainer.data import load_scene
from trainer.inference.worldframe import cube_to_world, world_to_cube


@pytest.mark.parametrize("fmt", ["llff", "colmap"])
@pytest.mark.parametrize("near_far", [(1.0, 8.0), (3.0, 5.0)])
def test_camera_centres_return_to_the_source_world(tmp_path, fmt, near_far):
    c2w = ring_c2w(8, radius=4.0)
    if fmt == "llff":
        write_llff(tmp_path, c2w, near_far=near_far)
    else:
        write_colmap_scene(tmp_path, c2w)
    scene = load_scene(tmp_path, downscale=1, holdout_every=0)
    cube = np.stack([f.c2w[:3, 3] for f in scene.frames("train")])
    world = cube_to_world(cube, scene)
    np.testing.assert_allclose(world, c2w[:, :3, 3], atol=1e-6)
    np.testing.assert_allclose(world_to_cube(world, scene), cube, atol=1e-9)


def test_a_small_content_box_records_the_mapping_it_used():
    from trainer.data.scenebox import SceneBox, place_capture

    c2w = ring_c2w(8, radius=1.0)
    box = SceneBox(lo=np.full(3, -0.3), hi=np.full(3, 0.3), how="test box")
    placement = place_capture(c2w, box, None, "colmap")
    assert placement.aabb_scale == 1 and placement.world_scale != pytest.approx(0.33)
    p = c2w[:, :3, 3] * placement.world_scale + np.asarray(placement.world_offset)
    np.testing.assert_allclose(placement.c2w[:, :3, 3], p[:, [1, 2, 0]], atol=1e-12)

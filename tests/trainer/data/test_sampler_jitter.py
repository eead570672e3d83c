"""Sub-pixel jitter of training rays (instant-ngp trains on random points inside each pixel)."""

import torch

from trainer.data import load_scene
from trainer.data.demo import write_demo_scene
from trainer.data.images import load_pixel_table
from trainer.data.sampler import RaySampler


def _pixel_coordinates(batch, frames):
    """Back-project each ray direction onto its camera's image plane: (u, v) in pixels."""
    out = []
    for d, i in zip(batch.rays_d, batch.image_index.tolist()):
        f = frames[i]
        c2w = torch.as_tensor(f.c2w, dtype=torch.float64)
        cam = c2w[:3, :3].T @ d.double()
        x, y = cam[0] / -cam[2], cam[1] / -cam[2]
        k = f.intrinsics
        out.append((k.cx + x * k.fx, k.cy - y * k.fy))
    return torch.tensor(out)


def test_jittered_rays_stay_inside_their_pixel_and_are_reproducible(tmp_path):
    scene = load_scene(write_demo_scene(tmp_path / "s", resolution=16, n_train=4, n_val=1, n_test=1))
    frames = scene.frames("train")
    table = load_pixel_table(frames)
    batches = []
    for _ in range(2):
        with RaySampler(frames, table, placement="device", seed=3, subpixel_jitter=True) as s:
            batches.append(s.sample(256))
    assert torch.equal(batches[0].rays_d, batches[1].rays_d)
    uv = _pixel_coordinates(batches[0], frames)
    frac = uv - uv.floor()
    assert (frac > -1e-4).all() and (frac < 1 + 1e-4).all()
    assert frac.std() > 0.2  # spread over the pixel, not at its centre (0.5)
    with RaySampler(frames, table, placement="device", seed=3) as s:
        centred = _pixel_coordinates(s.sample(256), frames)
    assert torch.allclose(centred - centred.floor(), torch.full_like(centred, 0.5), atol=1e-3)

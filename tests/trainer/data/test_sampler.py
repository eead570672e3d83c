"""Ray batches from the pixel table (trainer/data/sampler.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from trainer.data.images import load_pixel_table
from trainer.data.rays import composite_background, distort_normalized
from trainer.data.sampler import RayBatch, RaySampler, choose_placement
from trainer.data.scene import Frame, Intrinsics
from trainer.contract.errors import ConfigError, SceneError

PLACEMENTS = ("device", "pinned", "stream")
MILD_DISTORTION = (-0.1, 0.02, 0.001, -0.002, 0.0, 0.01)  # k1 k2 p1 p2 k3 k4


def look_at_c2w(eye, target=(0.5, 0.5, 0.5)) -> np.ndarray:
    eye, target = np.asarray(eye, float), np.asarray(target, float)
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    c2w = np.eye(4)
    c2w[:3, :3] = np.stack([right, np.cross(right, forward), -forward], axis=1)
    c2w[:3, 3] = eye
    return c2w


def make_frames(tmp_path: Path, sizes, *, distortion=(0.0,) * 6, seed=0, alpha=False) -> list[Frame]:
    """PNG images of random colours with posed cameras around (0.5, 0.5, 0.5)."""
    rng = np.random.default_rng(seed)
    frames = []
    for i, (width, height) in enumerate(sizes):
        path = tmp_path / f"img{i}.png"
        rgba = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
        if not alpha:
            rgba[..., 3] = 255
        Image.fromarray(rgba, "RGBA").save(path)
        k1, k2, p1, p2, k3, k4 = distortion
        intrinsics = Intrinsics(
            width, height, fx=0.9 * width, fy=0.95 * width, cx=width / 2 + 0.3, cy=height / 2 - 0.2,
            k1=k1, k2=k2, p1=p1, p2=p2, k3=k3, k4=k4,
        )
        eye = 0.5 + 3.0 * np.array([np.cos(i + 0.3), np.sin(i + 0.3), 0.4 + 0.1 * i])
        frames.append(Frame(f"img{i}", path, look_at_c2w(eye), intrinsics))
    return frames


def pixel_of_ray(frame: Frame, direction: np.ndarray) -> tuple[float, float]:
    """Project a world direction back through the frame's camera (with its distortion)."""
    d_cam = frame.c2w[:3, :3].T @ direction
    xy = torch.tensor([[d_cam[0] / -d_cam[2], -d_cam[1] / -d_cam[2]]], dtype=torch.float64)
    xy_d = distort_normalized(xy, torch.tensor(frame.intrinsics.distortion, dtype=torch.float64))[0]
    i = frame.intrinsics
    return float(xy_d[0]) * i.fx + i.cx - 0.5, float(xy_d[1]) * i.fy + i.cy - 0.5


def assert_batch_matches_table(batch: RayBatch, n: int, frames, table) -> None:
    assert isinstance(batch, RayBatch) and len(batch) == n
    assert batch.rays_o.shape == (n, 3) and batch.rays_o.dtype == torch.float32
    assert batch.rays_d.shape == (n, 3) and batch.rays_d.dtype == torch.float32
    assert batch.rgb.shape == (n, 3) and batch.rgb.dtype == torch.float32
    assert batch.alpha.shape == (n, 1) and batch.alpha.dtype == torch.float32
    assert batch.image_index.shape == (n,) and batch.image_index.dtype == torch.int64
    torch.testing.assert_close(torch.linalg.vector_norm(batch.rays_d, dim=-1), torch.ones(n))
    scale = 255.0 if table.pixels.dtype == torch.uint8 else 1.0
    for k in range(min(n, 64)):
        image = int(batch.image_index[k])
        frame = frames[image]
        np.testing.assert_allclose(batch.rays_o[k].numpy(), frame.c2w[:3, 3], atol=1e-6)
        u, v = pixel_of_ray(frame, batch.rays_d[k].double().numpy())
        assert abs(u - round(u)) < 1e-3 and abs(v - round(v)) < 1e-3, (u, v)
        u, v = round(u), round(v)
        assert 0 <= u < frame.intrinsics.width and 0 <= v < frame.intrinsics.height
        expected = table.image(image)[v, u].float() / scale
        torch.testing.assert_close(batch.rgb[k], expected[:3], rtol=0, atol=0)
        torch.testing.assert_close(batch.alpha[k], expected[3:], rtol=0, atol=0)


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ray-sampler")]


# ----------------------------------------------------------------------------------- placements


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_batches_hold_the_table_colour_of_the_pixel_each_ray_goes_through(tmp_path, placement):
    frames = make_frames(tmp_path, [(12, 8), (7, 10), (9, 9)], distortion=MILD_DISTORTION)
    table = load_pixel_table(frames)
    with RaySampler(frames, table, placement, "cpu", seed=3, stream_window_images=2) as sampler:
        assert sampler.placement == placement
        seen = set()
        for n in (1, 300, 17, 1000, 5):  # the batch size changes every call
            batch = sampler.sample(n)
            assert_batch_matches_table(batch, n, frames, table)
            seen.update(batch.image_index.tolist())
        assert len(seen) >= 2  # rays come from several images (the stream window holds 2)
    assert not sampler_threads()  # closed cleanly


def test_device_placement_is_deterministic_given_the_seed(tmp_path):
    frames = make_frames(tmp_path, [(10, 6), (5, 5)])
    table = load_pixel_table(frames)

    def batches(seed):
        sampler = RaySampler(frames, table, "device", "cpu", seed=seed)
        return [sampler.sample(n) for n in (64, 7, 256)]

    first, again, other = batches(11), batches(11), batches(12)
    for a, b in zip(first, again):
        for name in ("rays_o", "rays_d", "rgb", "alpha", "image_index"):
            assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(first[2].rays_d, other[2].rays_d)


def test_pixels_are_drawn_uniformly_over_all_pixels(tmp_path):
    frames = make_frames(tmp_path, [(20, 10), (5, 4), (10, 6)])  # 200, 20 and 60 pixels
    sampler = RaySampler(frames, load_pixel_table(frames), "device", "cpu", seed=0)
    counts = torch.bincount(sampler.sample(280_000).image_index, minlength=3).double() / 280_000
    expected = torch.tensor([200, 20, 60], dtype=torch.float64) / 280
    torch.testing.assert_close(counts, expected, atol=4e-3, rtol=0)


def test_direction_maps_match_per_batch_undistortion(tmp_path):
    frames = make_frames(tmp_path, [(16, 12)] * 3, distortion=(-0.2, 0.05, 0.002, 0.001, -0.01, 0.03))
    table = load_pixel_table(frames)
    mapped = RaySampler(frames, table, "device", "cpu", seed=5, direction_maps=True).sample(500)
    direct = RaySampler(frames, table, "device", "cpu", seed=5, direction_maps=False).sample(500)
    assert torch.equal(mapped.image_index, direct.image_index) and torch.equal(mapped.rgb, direct.rgb)
    torch.testing.assert_close(mapped.rays_d, direct.rays_d, atol=1e-6, rtol=0)
    torch.testing.assert_close(mapped.rays_o, direct.rays_o)


def test_transparent_pixels_composite_to_the_background(tmp_path):
    rgba = np.zeros((6, 6, 4), np.uint8)
    rgba[..., :3] = [2, 240, 5]  # junk colour under alpha 0
    rgba[:3, :, :] = [10, 20, 30, 255]
    path = tmp_path / "a.png"
    Image.fromarray(rgba, "RGBA").save(path)
    frames = [Frame("a", path, look_at_c2w([3, 0, 1]), Intrinsics(6, 6, 5.0, 5.0, 3.0, 3.0))]
    batch = RaySampler(frames, load_pixel_table(frames), "device", "cpu", seed=0).sample(400)
    background = torch.rand(400, 3, generator=torch.Generator().manual_seed(0))
    composited = composite_background(batch.rgb, batch.alpha, background)
    clear = batch.alpha[:, 0] == 0
    assert 0 < int(clear.sum()) < 400
    assert torch.equal(composited[clear], background[clear])
    opaque_colour = torch.tensor([10.0, 20.0, 30.0]) / 255
    torch.testing.assert_close(composited[~clear], opaque_colour.expand(int((~clear).sum()), 3))


def test_16bit_table_is_sampled_in_float(tmp_path):
    rng = np.random.default_rng(7)
    frames = make_frames(tmp_path, [(6, 4)])
    cv2.imwrite(str(frames[0].image_path), rng.integers(0, 65536, (4, 6, 3), dtype=np.uint16))
    table = load_pixel_table(frames)
    assert table.pixels.dtype == torch.float16
    for placement in PLACEMENTS:
        with RaySampler(frames, table, placement, "cpu", seed=1) as sampler:
            assert_batch_matches_table(sampler.sample(50), 50, frames, table)


# ----------------------------------------------------------------------------------------- stream


def test_stream_window_turns_over_all_images(tmp_path):
    frames = make_frames(tmp_path, [(6, 5), (4, 4), (5, 3), (3, 3)])
    table = load_pixel_table(frames)
    seen: set[int] = set()
    with RaySampler(frames, None, "stream", "cpu", seed=2, stream_window_images=1) as sampler:
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            batch = sampler.sample(20)
            assert len(set(batch.image_index.tolist())) == 1  # a window of one image
            seen.update(batch.image_index.tolist())
        assert_batch_matches_table(batch, 20, frames, table)
    assert seen == {0, 1, 2, 3}
    assert not sampler_threads()


def test_stream_reports_a_bad_image_from_sample(tmp_path):
    frames = make_frames(tmp_path, [(4, 4), (4, 4)])
    data = frames[1].image_path.read_bytes()
    frames[1].image_path.write_bytes(data[: len(data) // 2])
    with RaySampler(frames, None, "stream", "cpu", seed=0, stream_window_images=1) as sampler:
        with pytest.raises(SceneError, match="img1.png: .*(truncated|not a readable)"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                sampler.sample(4)
    assert not sampler_threads()


# ------------------------------------------------------------------------------ auto and errors


def test_choose_placement_follows_the_budget():
    assert choose_placement(1000, "cpu", memory_budget_bytes=1000) == "device"
    assert choose_placement(1001, "cpu", memory_budget_bytes=1000) == "stream"
    assert choose_placement(1 << 20, "cpu") == "device"  # default: half the available host memory


def test_auto_placement_and_decoding_without_a_table(tmp_path):
    frames = make_frames(tmp_path, [(8, 8), (6, 4)])
    table = load_pixel_table(frames)
    with RaySampler(frames, table, "auto", "cpu", seed=0) as sampler:
        assert sampler.placement == "device" and sampler.generator is not None
    budget = table.nbytes - 1
    with RaySampler(frames, table, "auto", "cpu", seed=0, memory_budget_bytes=budget) as sampler:
        assert sampler.placement == "stream" and sampler.generator is None
    with RaySampler(frames, None, "device", "cpu", seed=0) as sampler:  # decodes the table itself
        assert_batch_matches_table(sampler.sample(100), 100, frames, table)


def test_bad_arguments(tmp_path):
    frames = make_frames(tmp_path, [(4, 4), (3, 3)])
    table = load_pixel_table(frames)
    message = "data.placement: expected one of auto, device, pinned, stream, got 'gpu'"
    with pytest.raises(ConfigError, match=message):
        RaySampler(frames, table, "gpu")
    with pytest.raises(SceneError, match="the pixel table has 2 images but 1 frames were given"):
        RaySampler(frames[:1], table, "device")
    message = "img0.png: pixel table image is 3x3 but frame 'img0' has intrinsics 4x4"
    with pytest.raises(SceneError, match=message):
        RaySampler([frames[0], frames[0]], table, "device")
    with RaySampler(frames, table, "pinned") as sampler:
        with pytest.raises(ConfigError, match="n_rays: expected a positive integer, got 0"):
            sampler.sample(0)
        sampler.close()  # closing twice is fine
    assert not sampler_threads()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_cuda_batches_match_cpu_table(tmp_path, placement):
    frames = make_frames(tmp_path, [(12, 8), (7, 10)], distortion=MILD_DISTORTION)
    table = load_pixel_table(frames)
    with RaySampler(frames, table, placement, "cuda", seed=3) as sampler:
        for n in (100, 3000, 7):
            batch = sampler.sample(n)
            fields = ("rays_o", "rays_d", "rgb", "alpha", "image_index")
            cpu = RayBatch(*(getattr(batch, name).cpu() for name in fields))
            assert_batch_matches_table(cpu, n, frames, table)


def test_a_memory_budget_too_small_for_the_pixels_says_so_and_names_a_downscale_that_fits(tmp_path):
    import json
    import warnings

    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    frames = []
    for i in range(3):  # three 8000 x 6000 photos: 549.3 MiB of RGBA pixels
        Image.new("RGB", (8000, 6000), (200, 100, 50)).save(tmp_path / f"{i}.png", compress_level=1)
        c2w = np.eye(4)
        c2w[:3, 3] = (0.2 * i, 0.0, 3.0)
        frames.append({"file_path": f"{i}.png", "transform_matrix": c2w.tolist()})
    (tmp_path / "transforms.json").write_text(json.dumps({"fl_x": 7000.0, "fl_y": 7000.0, "cx": 4000.0, "cy": 3000.0,
                                                          "w": 8000, "h": 6000, "frames": frames}))
    scene = load_scene(tmp_path, holdout_every=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(tiny_config(data__memory_budget_gib=0.1), scene)
        trainer.close()
    notes = [str(w.message) for w in caught if str(w.message).startswith("data.placement auto")]
    assert notes == ["data.placement auto: the training pixels take 549.3 MiB, more than data.memory_budget_gib 0.1 "
                     "(102.4 MiB); they are streamed: images decoded from disk as training runs, a window of them at a "
                     "time (slower, and rays come from fewer images at once); --downscale 4 would make it 34.3 MiB, "
                     "which fits"]

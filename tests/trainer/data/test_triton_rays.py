"""The one-launch Triton ray kernel against the sampler's PyTorch path (its slow twin).

Two observations, in Triton's interpreter (a fresh subprocess: TRITON_INTERPRET is read when the
kernel is defined) and on CUDA:

- kernel level: random pinhole cameras of different sizes (random rotations, focal lengths and
  principal points), random pixels of random frames, odd batch sizes (tails of the last block),
  uint8 / float16 / float32 colours, pixel centres and random sub-pixel points, against
  ``pixel_to_camera_dirs`` + ``camera_dirs_to_world`` and the reference decoding;
- kernel level with a direction map (distorted cameras): random camera-space directions per
  pixel of each distinct camera, frames pointing into the map at random bases, against
  ``camera_dirs_to_world`` of the looked-up directions (sub-pixel points unused, as the reference);
- sampler level: two :class:`RaySampler` of the demo scene from one seed, one with
  ``triton_rays``, draw the same pixels and the same batches; again with lens distortion, where
  both serve the rays from the sampler's direction map.

Directions agree to float32 rounding (the reference's sum over the rotated components is a torch
reduction), colours to one ulp (torch's CUDA division by a scalar), origins and pixels exactly. The seed is in the messages (``NGPTUNE_TEST_SEED`` replays).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed

SIZES = (1, 255, 257, 1000)
DIRECTION_TOL = 2e-6
# one float32 ulp at 1: torch's CUDA division by a scalar multiplies by its reciprocal, the kernel
# divides exactly (on the CPU both divide exactly)
COLOUR_TOL = 1.2e-7


def _random_cameras(generator: torch.Generator, n_frames: int):
    widths = torch.randint(3, 40, (n_frames,), generator=generator)
    heights = torch.randint(3, 40, (n_frames,), generator=generator)
    focal = torch.rand(n_frames, 2, generator=generator) * 50 + 5
    principal = torch.stack([widths, heights], 1).float() * (0.3 + 0.4 * torch.rand(n_frames, 2, generator=generator))
    q, _ = torch.linalg.qr(torch.randn(n_frames, 3, 3, generator=generator))
    c2w = torch.cat([q, torch.randn(n_frames, 3, 1, generator=generator)], dim=2)
    return widths, heights, focal, principal, c2w


def _reference(image_index, local_index, rgba, widths, focal, principal, c2w, subpixel):
    from trainer.data.rays import IntrinsicsTensors, camera_dirs_to_world, pixel_to_camera_dirs
    from trainer.data.sampler import _rgba_float

    intrinsics = IntrinsicsTensors(focal, principal, torch.zeros(focal.shape[0], 6, device=focal.device),
                                   has_distortion=False)
    width = widths[image_index]
    v = torch.div(local_index, width, rounding_mode="floor")
    u = local_index - v * width
    du, dv = (0.5, 0.5) if subpixel is None else (subpixel[:, 0], subpixel[:, 1])
    dirs = pixel_to_camera_dirs(u.float() + du, v.float() + dv, intrinsics[image_index])
    rays_o, rays_d = camera_dirs_to_world(c2w[image_index], dirs)
    colours = _rgba_float(rgba)
    return rays_o, rays_d, colours[:, :3], colours[:, 3:4]


def _kernel_cases(device: str, seed: int) -> list[dict]:
    from trainer.data.triton_rays import pinhole_rays_triton

    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n in SIZES:
        for dtype in (torch.uint8, torch.float16, torch.float32):
            for jitter in (False, True):
                n_frames = int(torch.randint(1, 6, (), generator=generator))
                widths, heights, focal, principal, c2w = _random_cameras(generator, n_frames)
                image_index = torch.randint(0, n_frames, (n,), generator=generator)
                local_index = (torch.rand(n, generator=generator) * (widths * heights)[image_index]).long()
                if dtype == torch.uint8:
                    rgba = torch.randint(0, 256, (n, 4), generator=generator, dtype=torch.uint8)
                else:
                    rgba = torch.rand(n, 4, generator=generator).to(dtype)
                subpixel = torch.rand(n, 2, generator=generator) if jitter else None
                inputs = [t.to(device) if t is not None else None
                          for t in (image_index, local_index, rgba, widths, focal, principal, c2w, subpixel)]
                with warnings.catch_warnings():  # lanes past n divide nothing by zero
                    warnings.simplefilter("error", RuntimeWarning)
                    fast = pinhole_rays_triton(*inputs)
                ref = _reference(*inputs)
                seen.append({
                    "n": n, "dtype": str(dtype), "jitter": jitter, "seed": seed,
                    "shapes": [list(t.shape) for t in fast], "dtypes": [str(t.dtype) for t in fast],
                    "origin_equal": bool(torch.equal(fast[0], ref[0])),
                    "direction_err": float((fast[1] - ref[1]).abs().max()),
                    "colour_err": float(max((fast[2] - ref[2]).abs().max(), (fast[3] - ref[3]).abs().max())),
                })
    return seen


def _map_cases(device: str, seed: int) -> list[dict]:
    from trainer.data.rays import camera_dirs_to_world
    from trainer.data.triton_rays import pinhole_rays_triton

    generator = torch.Generator().manual_seed(seed + 1)
    seen = []
    for n in SIZES:
        for jitter in (False, True):
            n_frames = int(torch.randint(1, 6, (), generator=generator))
            widths, heights, focal, principal, c2w = _random_cameras(generator, n_frames)
            pixels = widths * heights
            # one map entry per pixel of each frame's camera, at a random base per frame
            bases = torch.cumsum(pixels, 0) - pixels + torch.randint(0, 7, (n_frames,), generator=generator)
            direction_map = torch.randn(int(bases[-1] + pixels[-1]) + 3, 3, generator=generator)
            image_index = torch.randint(0, n_frames, (n,), generator=generator)
            local_index = (torch.rand(n, generator=generator) * pixels[image_index]).long()
            rgba = torch.randint(0, 256, (n, 4), generator=generator, dtype=torch.uint8)
            subpixel = torch.rand(n, 2, generator=generator) if jitter else None
            inputs = [t.to(device) if t is not None else None
                      for t in (image_index, local_index, rgba, widths, focal, principal, c2w, subpixel,
                                direction_map, bases)]
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                fast = pinhole_rays_triton(*inputs)
            image_index, local_index, c2w, direction_map, bases = (
                inputs[0], inputs[1], inputs[6], inputs[8], inputs[9])
            ref_o, ref_d = camera_dirs_to_world(c2w[image_index], direction_map[bases[image_index] + local_index])
            seen.append({"n": n, "jitter": jitter, "seed": seed,
                         "origin_equal": bool(torch.equal(fast[0], ref_o)),
                         "direction_err": float((fast[1] - ref_d).abs().max()) if n else 0.0,
                         "colour_err": float((fast[2] - inputs[2][:, :3].float() / 255).abs().max()) if n else 0.0})
    return seen


def _sampler_case(device: str) -> dict:
    from trainer.data.demo import write_demo_scene
    from trainer.data.sampler import RaySampler
    from trainer.data import load_scene

    with tempfile.TemporaryDirectory() as tmp:
        scene = load_scene(write_demo_scene(Path(tmp) / "scene", resolution=24, n_train=5, n_val=1, n_test=1))
        frames = scene.frames("train")
        out = {}
        for jitter in (False, True):
            batches = []
            for triton_rays in (False, True):
                sampler = RaySampler(frames, placement="device", device=device, seed=3, subpixel_jitter=jitter,
                                     triton_rays=triton_rays)
                out[f"uses_triton_{triton_rays}"] = sampler.triton_rays
                batches.append(sampler.sample(333))
                sampler.close()
            ref, fast = batches
            out[f"jitter_{jitter}"] = {
                "same_pixels": bool(torch.equal(ref.image_index, fast.image_index) and torch.equal(ref.rays_o, fast.rays_o)),
                "colour_err": float(max((ref.rgb - fast.rgb).abs().max(), (ref.alpha - fast.alpha).abs().max())),
                "direction_err": float((ref.rays_d - fast.rays_d).abs().max()),
            }
        # lens distortion: both serve the rays from the sampler's direction map
        distorted = [dataclasses.replace(f, intrinsics=dataclasses.replace(f.intrinsics, k1=0.1, p1=0.01))
                     for f in frames]
        batches = []
        for triton_rays in (False, True):
            sampler = RaySampler(distorted, placement="device", device=device, seed=3, triton_rays=triton_rays)
            out[f"distorted_uses_triton_{triton_rays}"] = sampler.triton_rays
            batches.append(sampler.sample(333))
            sampler.close()
        ref, fast = batches
        out["distorted"] = {
            "same_pixels": bool(torch.equal(ref.image_index, fast.image_index) and torch.equal(ref.rays_o, fast.rays_o)),
            "colour_err": float(max((ref.rgb - fast.rgb).abs().max(), (ref.alpha - fast.alpha).abs().max())),
            "direction_err": float((ref.rays_d - fast.rays_d).abs().max()),
        }
        # the distortion moved the rays away from the pinhole's (the map is not the pinhole rule)
        pinhole = RaySampler(frames, placement="device", device=device, seed=3)
        out["distorted"]["moved_from_pinhole"] = float((pinhole.sample(333).rays_d - fast.rays_d).abs().max())
        pinhole.close()
    return out


def observe(device: str, seed: int) -> dict:
    return {"kernel": _kernel_cases(device, seed), "map": _map_cases(device, seed), "sampler": _sampler_case(device)}


def _check(seen: dict) -> None:
    assert len(seen["kernel"]) == len(SIZES) * 6
    for r in seen["kernel"]:
        n = r["n"]
        assert r["shapes"] == [[n, 3], [n, 3], [n, 3], [n, 1]] and set(r["dtypes"]) == {"torch.float32"}, r
        assert r["origin_equal"] and r["colour_err"] <= COLOUR_TOL, r
        assert r["direction_err"] <= DIRECTION_TOL, r
    s = seen["sampler"]
    assert s["uses_triton_True"] and not s["uses_triton_False"]
    for jitter in (False, True):
        assert s[f"jitter_{jitter}"]["same_pixels"] and s[f"jitter_{jitter}"]["colour_err"] <= COLOUR_TOL, s
        assert s[f"jitter_{jitter}"]["direction_err"] <= DIRECTION_TOL, s
    assert len(seen["map"]) == len(SIZES) * 2
    for r in seen["map"]:
        assert r["origin_equal"] and r["colour_err"] <= COLOUR_TOL, r
        # the map's directions are not unit vectors: the normalisation's rounding scales with them
        assert r["direction_err"] <= 4 * DIRECTION_TOL, r
    assert s["distorted_uses_triton_True"] and not s["distorted_uses_triton_False"]
    d = s["distorted"]
    assert d["same_pixels"] and d["colour_err"] <= COLOUR_TOL and d["direction_err"] <= DIRECTION_TOL, d
    assert d["moved_from_pinhole"] > 1e-3, d


def test_triton_rays_match_the_reference_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_rays_match_the_reference_on_cuda():
    _check(observe("cuda", random_seed()))


def test_distorted_cameras_without_a_direction_map_keep_the_reference_path(tmp_path):
    from trainer.data.demo import write_demo_scene
    from trainer.data.sampler import RaySampler
    from trainer.data import load_scene

    frames = load_scene(write_demo_scene(tmp_path / "scene", resolution=16, n_train=2, n_val=1, n_test=1)).frames("train")
    frames = [dataclasses.replace(f, intrinsics=dataclasses.replace(f.intrinsics, k1=0.1)) for f in frames]
    sampler = RaySampler(frames, placement="device", device="cpu", triton_rays=True, direction_maps=False)
    assert not sampler.triton_rays  # distortion needs the reference's undistortion
    assert len(sampler.sample(10)) == 10
    sampler.close()
    with_maps = RaySampler(frames, placement="device", device="cpu", triton_rays=True)  # maps by default
    assert with_maps.triton_rays
    with_maps.close()


def test_triton_rays_asked_for_where_the_maps_would_be_too_large_warn_and_keep_the_reference(tmp_path, monkeypatch):
    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.data import sampler as sampler_module
    from trainer.data.demo import write_demo_scene
    from trainer.train import inputs

    frames = load_scene(write_demo_scene(tmp_path / "scene", resolution=16, n_train=2, n_val=1, n_test=1)).frames("train")
    frames = [dataclasses.replace(f, intrinsics=dataclasses.replace(f.intrinsics, k1=0.1)) for f in frames]
    monkeypatch.setattr(sampler_module, "MAX_DIRECTION_MAP_PIXELS", 100)  # 16 × 16 pixels will not fit
    monkeypatch.setattr(inputs, "use_triton_kernels", lambda key, backend, device: True)  # as under the interpreter
    cfg = tiny_config(training__rays_backend="triton")
    with pytest.warns(UserWarning, match=r"training.rays_backend: 'triton' does not apply to these cameras: they "
                                         r"have lens distortion and their direction maps would take more than"):
        sampler = inputs.build_sampler(cfg, frames, 1, torch.device("cpu"), seed=0)
    assert not sampler.triton_rays and len(sampler.sample(10)) == 10
    sampler.close()
    monkeypatch.setattr(sampler_module, "MAX_DIRECTION_MAP_PIXELS", 1 << 23)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with room for the maps: the kernel applies, nothing to say
        sampler = inputs.build_sampler(cfg, frames, 1, torch.device("cpu"), seed=0)
    assert sampler.triton_rays
    sampler.close()


def test_bad_inputs_are_refused_naming_the_argument():
    from trainer.data.triton_rays import pinhole_rays_triton

    idx = torch.zeros(4, dtype=torch.long)
    good = dict(image_index=idx, local_index=idx, rgba=torch.zeros(4, 4, dtype=torch.uint8),
                widths=torch.full((1,), 8), focal=torch.ones(1, 2), principal=torch.ones(1, 2), c2w=torch.zeros(1, 3, 4))
    for key, bad, message in [("rgba", torch.zeros(4, 3, dtype=torch.uint8), "rgba must be"),
                              ("local_index", idx.int(), "local_index must be"),
                              ("c2w", torch.zeros(2, 3, 4), "c2w must be")]:
        with pytest.raises(ValueError, match=message):
            pinhole_rays_triton(**{**good, key: bad})


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))

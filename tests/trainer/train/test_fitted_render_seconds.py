"""The render-time probe fits per-call and per-ray costs after a warm-up of both probe sizes: a
first call that compiles kernels for a size (a GPU) is no part of the estimate. A fake clock
advances by a modelled cost per render call, so the fit is checked exactly, without timing."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from trainer.train import eval_estimate, evaluate

PER_CALL_S, PER_RAY_S, FIRST_CALL_S = 0.01, 0.001, 5.0


class FakeTrainer:
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.field = torch.nn.Linear(1, 1)

    @contextlib.contextmanager
    def inference_weights(self):
        yield


@pytest.fixture
def fake_clock(monkeypatch):
    clock = {"now": 0.0, "seen": set(), "calls": []}

    def render_rays(trainer, rays_o, rays_d, background, spp=1, **kwargs):
        n = rays_o.shape[0]
        clock["calls"].append(n)
        clock["now"] += PER_CALL_S + PER_RAY_S * n + (0.0 if n in clock["seen"] else FIRST_CALL_S)
        clock["seen"].add(n)
        return torch.zeros(n, 3)

    monkeypatch.setattr(evaluate, "render_rays", render_rays)
    monkeypatch.setattr(eval_estimate.time, "perf_counter", lambda: clock["now"])
    return clock


@pytest.mark.parametrize("repeats", [1, 2])
def test_first_calls_of_each_size_are_left_out_of_the_fit(fake_clock, repeats: int) -> None:
    rays = torch.zeros(512, 3)
    sizes = [10_000, 3_000]
    seconds = eval_estimate.fitted_render_seconds(FakeTrainer(), rays, rays, sizes, repeats=repeats)
    chunk = evaluate.eval_chunk_rays(torch.device("cpu"))
    calls = sum(-(-size // chunk) for size in sizes)
    assert seconds == pytest.approx(calls * PER_CALL_S + sum(sizes) * PER_RAY_S, rel=1e-9)
    assert fake_clock["calls"] == [64, 512] + [64] * repeats + [512] * repeats


def test_the_probe_renders_thousands_of_rays_on_a_gpu_and_the_given_count_on_a_cpu() -> None:
    assert eval_estimate.probe_ray_count(512, torch.device("cpu")) == 512
    assert eval_estimate.probe_ray_count(512, torch.device("cuda")) == eval_estimate.PROBE_RAYS_CUDA >= 2**14


def test_no_pixels_cost_nothing(fake_clock) -> None:
    rays = torch.zeros(8, 3)
    assert eval_estimate.fitted_render_seconds(FakeTrainer(), rays, rays, [0]) == 0.0
    assert fake_clock["calls"] == []


def test_the_estimate_adds_the_work_besides_rendering_scaled_by_pixels(demo_scene, monkeypatch) -> None:
    """Decoding, scoring and encoding are timed twice on the largest view: the first time counts
    once, the second is scaled to the other views by their pixels; the PNG is encoded (in memory)
    only where the evaluation saves its renders."""
    import cv2

    from tests.support.scenes import tiny_config
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    trainer = Trainer(tiny_config(), load_scene(demo_scene))
    frames = trainer.scene.frames("test")
    encoded = []
    monkeypatch.setattr(cv2, "imencode", lambda ext, image: encoded.append((ext, image.shape, image.dtype)) or (True, b""))
    try:
        assert eval_estimate.view_overhead_seconds(trainer, frames[0], save_render=False) > 0 and encoded == []
        eval_estimate.view_overhead_seconds(trainer, frames[0], save_render=True)
        h, w = frames[0].intrinsics.height, frames[0].intrinsics.width
        assert encoded == [(".png", (h, w, 3), np.dtype(np.uint8))]
        seen = []
        monkeypatch.setattr(eval_estimate, "fitted_render_seconds", lambda *args, **kwargs: 2.0)
        # the first view pays for what is set up on first use, once; the others what a second costs
        monkeypatch.setattr(eval_estimate, "view_overhead_seconds",
                            lambda trainer_, frame, save_render: seen.append((frame, save_render)) or (
                                1.5 if len(seen) == 1 else 0.25))
        seconds = eval_estimate.measure_eval_seconds(trainer, frames, spp=3)
        assert len(frames) > 1
        assert seconds == pytest.approx(2.0 * 3 + 1.5 + 0.25 * (len(frames) - 1))  # the views share one size
        assert seen == [(frames[0], False)] * 2  # no run folder: nothing would be saved
        seen.clear()
        assert eval_estimate.measure_eval_seconds(trainer, frames[:1], spp=1) == pytest.approx(2.0 + 1.5)
        assert len(seen) == 1  # one view: no second timing
    finally:
        trainer.close()

"""The render-time probe fits per-call and per-ray costs after a warm-up of both probe sizes: a
first call that compiles kernels for a size (a GPU) is no part of the estimate. A fake clock
advances by a modelled cost per render call, so the fit is checked exactly, without timing."""

from __future__ import annotations

import contextlib

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

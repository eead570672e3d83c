"""The fixed-capacity step (training.cuda_graphs off) on the CPU: its march into fixed buffers,
its loss curve against the dynamic step's, and an exact resume."""

from __future__ import annotations

import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.render.fixed_march import MarchBuffers, march_fixed
from trainer.render.march import march_rays
from trainer.train.fixed_step import FixedCapacityStep
from trainer.train.loop import Trainer


def test_march_fixed_keeps_whole_rays_that_fit_and_counts_the_rest():
    g = torch.Generator().manual_seed(0)
    rays_o = torch.tensor([[-1.0, 0.5, 0.5]]).repeat(6, 1) + 0.01 * torch.rand(6, 3, generator=g)
    rays_d = torch.tensor([[1.0, 0.0, 0.0]]).repeat(6, 1)
    rays_o[4] = float("nan")  # a ray the step does not use
    box = torch.tensor([[0.0] * 3, [1.0] * 3])
    full = march_rays(rays_o, rays_d, box, None, step_size=0.1, max_step_size=0.1)
    counts = full.packed_info[:, 1]
    capacity = int(counts[:3].sum()) + 5  # three rays fit whole, the fourth does not
    buffers = MarchBuffers(capacity, torch.device("cpu"))
    out = march_fixed(rays_o, rays_d, box, None, buffers, step_size=0.1, cone_angle=0.0, max_steps=1024,
                      max_step_size=0.1, generator=None)
    n = int(counts[:3].sum())
    assert out.ray_fits.tolist() == [True, True, True, False, True, False]
    assert int(out.n_valid) == n and int(out.n_clipped) == int(counts[3] + counts[5])
    assert torch.equal(out.samples.t[:n], full.t[:n]) and torch.equal(out.samples.positions[:n], full.positions[:n])
    assert out.samples.t.shape == (capacity,)
    assert torch.all(out.samples.dt[n:] == 0) and torch.all(out.samples.ray_indices[n:] == 5)
    assert out.samples.packed_info[:, 1].tolist() == [*counts[:3].tolist(), 0, 0, 0]


def test_near_distance_skips_the_samples_in_front_of_the_camera(demo_scene):
    rays_o = torch.tensor([[-0.5, 0.5, 0.5], [0.2, 0.5, 0.5]])  # outside the box, and inside it
    rays_d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    box = torch.tensor([[0.0] * 3, [1.0] * 3])
    out = march_fixed(rays_o, rays_d, box, None, MarchBuffers(64, torch.device("cpu")), step_size=0.1,
                      cone_angle=0.0, max_steps=1024, max_step_size=0.1, generator=None, near=0.6)
    n = int(out.n_valid)
    t, ray = out.samples.t[:n], out.samples.ray_indices[:n]
    assert n > 0 and torch.all(t >= 0.6)
    assert float(t[ray == 0].min()) >= 0.6 and float(t[ray == 1].min()) >= 0.6  # not the box entry 0.5, 0.0
    trainer = Trainer(tiny_config(training__near_distance=0.3), load_scene(demo_scene), None)
    samples = trainer.march(rays_o, rays_d, jitter=False)
    assert torch.all(samples.t >= 0.3) and float(samples.t[samples.ray_indices == 1].min()) < 0.6
    trainer.close()


def _interval_losses(scene, mode: str, **overrides) -> tuple[list[float], Trainer]:
    trainer = Trainer(tiny_config(training__n_steps=30, training__log_every=10, **overrides), load_scene(scene), None)
    records: list[dict] = []
    trainer.train(on_log=records.append)
    trainer.close()
    return [r["loss"] for r in records], trainer


def test_fixed_capacity_eager_step_trains_like_the_dynamic_step(demo_scene):
    common = dict(training__compact_samples=False, training__capacity_headroom=8.0)
    dynamic, _ = _interval_losses(demo_scene, "auto", **common)
    fixed, trainer = _interval_losses(demo_scene, "off", training__cuda_graphs="off", **common)
    assert isinstance(trainer.stepper, FixedCapacityStep) and trainer.stepper.graph is None
    # Different random draws (ray_capacity pixels per step instead of n) and batch sizing one step
    # earlier: the curves agree within the noise of 10-step means of 64-ray batches (25 %), and
    # both fall.
    assert len(dynamic) == len(fixed) == 3
    for a, b in zip(dynamic, fixed):
        assert abs(a - b) <= 0.25 * max(a, b), (dynamic, fixed)
    assert fixed[-1] < fixed[0] and dynamic[-1] < dynamic[0]


def test_fixed_capacity_resume_is_bit_identical(demo_scene, tmp_path):
    cfg = tiny_config(training__cuda_graphs="off", training__n_steps=12)
    straight = Trainer(cfg, load_scene(demo_scene), None)
    straight.train()
    first = Trainer(cfg, load_scene(demo_scene), None)
    first.train(n_steps=6)
    path = first.save(tmp_path / "snap.pt")
    resumed = Trainer(cfg, load_scene(demo_scene), None)
    resumed.load(path)
    resumed.train()
    for p, q in zip(straight.field.parameters(), resumed.field.parameters()):
        assert torch.equal(p, q)
    assert int(straight.stepper.n_live) == int(resumed.stepper.n_live)


def test_capacities_that_fall_short_grow_at_the_interval_read(demo_scene):
    # room for one marched sample per target sample: compaction keeps fewer than it marches
    cfg = tiny_config(training__cuda_graphs="off", training__capacity_headroom=1.0, training__n_steps=40,
                      training__log_every=10)
    trainer = Trainer(cfg, load_scene(demo_scene), None)
    step = trainer.stepper
    start = (step.ray_capacity, step.march_capacity)
    assert start == (1024, 4096)  # min(max rays 2048, target 4096 / 4 kept per ray); 4096 · 1.0
    records: list[dict] = []
    trainer.train(on_log=records.append)
    grown = (step.ray_capacity, step.march_capacity)
    assert records[-1]["recaptures"] >= 1 and grown != start, (start, grown, records[-1])
    assert grown[0] >= start[0] and grown[1] >= start[1]
    assert grown[0] <= 2048  # never past training.max_rays_per_step
    assert records[-1]["ray_capacity"] == grown[0] and records[-1]["sample_capacity"] == grown[1]
    assert step.buffers.capacity == grown[1] and step.ray_slot.numel() == grown[0]
    trainer.close()


def test_start_up_steps_are_outside_the_training_clock(demo_scene, monkeypatch):
    """A first step slowed as kernel compilation slows it still leaves the whole time budget to
    training: the sleep is start-up, reported as such, and later steps fill the budget."""
    import time as time_module

    cfg = tiny_config(training__n_steps=10**6, training__time_budget_s=1.0, training__log_every=5)
    trainer = Trainer(cfg, load_scene(demo_scene), None)
    original = trainer.train_step
    calls = []

    def first_step_compiles():
        calls.append(1)
        if len(calls) == 1:
            time_module.sleep(4.0)  # "compilation"
        return original()

    monkeypatch.setattr(trainer, "train_step", first_step_compiles)
    records: list[dict] = []
    trainer.train(on_log=records.append)
    assert trainer.startup is not None and trainer.startup.startup_s >= 4.0
    assert trainer.startup.startup_steps == 1 and trainer.startup.step_kind == "dynamic"
    # steps trained after the 4 s of start-up, whose seconds are not on the 1 s training clock
    assert trainer.step >= 2 and 0.0 < trainer.train_time_s < trainer.startup.startup_s
    first = records[0]
    assert first["startup_s"] >= 4.0 and first["step_kind"] == "dynamic" and first["startup_steps"] == 1
    assert all("startup_s" not in r for r in records[1:])
    assert first["wall_time_s"] < first["startup_s"]  # the first interval's training time excludes the start-up
    trainer.close()

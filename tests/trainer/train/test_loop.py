"""End-to-end behaviour of the single-process trainer on the tiny demo scene (CPU)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.scenes import tiny_config
from trainer.data import load_scene
from trainer.contract.errors import SnapshotError, TrainingError
from trainer.contract.metrics import read_metrics
from trainer.contract.rundir import RunDir
from trainer.train.loop import Trainer
from trainer.train.optimization import lr_factor


def _trainer(scene_path, run_dir=None, **overrides):
    cfg = tiny_config(**overrides)
    return Trainer(cfg, load_scene(scene_path), run_dir)


def test_lr_schedule_is_tcnn_step_decay():
    assert lr_factor(0, 20000, 10000, 0.33) == 1.0
    assert lr_factor(19999, 20000, 10000, 0.33) == 1.0
    assert lr_factor(20000, 20000, 10000, 0.33) == pytest.approx(0.33)
    assert lr_factor(30000, 20000, 10000, 0.33) == pytest.approx(0.33**2)


def test_same_seed_gives_the_same_first_step_loss(demo_scene):
    losses = []
    for _ in range(2):
        trainer = _trainer(demo_scene)
        _, loss, _ = trainer.train_step()
        losses.append(float(loss))
        trainer.close()
    assert losses[0] == losses[1]
    other = _trainer(demo_scene, training__seed=7)
    _, loss, _ = other.train_step()
    other.close()
    assert float(loss) != losses[0]


def test_batch_size_adapts_towards_the_sample_target(demo_scene):
    trainer = _trainer(demo_scene)
    trainer.train(n_steps=12)
    per_ray = trainer.samples_per_ray_ema
    assert per_ray is not None and per_ray > 0
    expected = 4096 / per_ray
    assert trainer.n_rays % 64 == 0
    assert trainer.n_rays == min(2048, max(64, math.ceil(expected / 64) * 64))
    trainer.close()


def test_metrics_file_follows_the_schema_and_phases_cover_the_step(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run").create()
    trainer = _trainer(demo_scene, run)
    trainer.train(n_steps=10)
    trainer.close()
    records = read_metrics(run.metrics_path(0), require_contiguous_steps=True)
    assert [r["step"] for r in records] == [5, 10]
    last = records[-1]
    assert last["throughput_samples_per_s"] > 0 and last["samples_per_step"] > 0
    named = sum(last[f"{p}_ms"] for p in ("data", "march", "compact", "field_forward", "render", "backward", "optimizer", "occupancy_update"))
    assert named >= 0.9 * last["step_time_ms"], (named, last["step_time_ms"])


def test_resume_reproduces_the_uninterrupted_loss(demo_scene, tmp_path):
    straight = _trainer(demo_scene)
    straight.train(n_steps=12)
    _, loss_straight, _ = straight.train_step()
    straight.close()

    first = _trainer(demo_scene)
    first.train(n_steps=12)
    snap = first.save(tmp_path / "snap.pt")
    first.close()
    resumed = _trainer(demo_scene)
    resumed.load(snap)
    assert resumed.step == 12
    _, loss_resumed, _ = resumed.train_step()
    resumed.close()
    assert float(loss_resumed) == pytest.approx(float(loss_straight), rel=1e-6, abs=1e-9)


def test_snapshot_of_another_config_or_truncated_file_is_a_clear_error(demo_scene, tmp_path):
    trainer = _trainer(demo_scene)
    trainer.train(n_steps=2)
    snap = trainer.save(tmp_path / "snap.pt")
    trainer.close()
    other = _trainer(demo_scene, network__n_neurons=32)  # (another table size is refused before: its own check)
    with pytest.raises(SnapshotError, match=r"snap\.pt: model entry .* has shape .* another config"):
        other.load(snap)
    other.close()
    data = snap.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    fresh = _trainer(demo_scene)
    with pytest.raises(SnapshotError, match=r"cut\.pt: truncated or corrupt snapshot"):
        fresh.load(cut)
    fresh.close()


def test_zero_density_everywhere_is_a_clear_error_after_warmup(demo_scene):
    trainer = _trainer(demo_scene)
    original = trainer.field.density
    trainer.field.density = lambda positions: torch.zeros_like(original(positions))  # type: ignore[method-assign]
    with pytest.raises(TrainingError, match="no ray sample hit an occupied cell"):
        trainer.train(n_steps=40)
    assert trainer.step >= 16  # the warm-up ran before the error
    trainer.close()


def test_fp16_overflow_is_skipped_and_training_stays_finite(demo_scene):
    # every marched sample is trained: compaction would keep only the first sample of each ray
    # behind the now infinite densities, whose gradients stay finite
    trainer = _trainer(demo_scene, training__precision="fp16", training__compact_samples=False)
    trainer.train(n_steps=3)
    with torch.no_grad():
        weights = list(trainer.field.mlp_weight_parameters())
        weights[0].mul_(1e4)  # activations of the first layer now exceed fp16's 65504
    before = [p.detach().clone() for p in trainer.field.parameters()]
    scale_before = trainer.scaler.get_scale()
    stats, loss, _ = trainer.train_step()
    assert stats.skipped
    assert trainer.scaler.get_scale() < scale_before
    for p, q in zip(before, trainer.field.parameters()):
        assert torch.equal(p, q.detach())  # the overflowing step changed nothing
    with torch.no_grad():
        weights[0].div_(1e4)
    for _ in range(3):
        _, loss, _ = trainer.train_step()
        assert math.isfinite(float(loss))
    assert all(torch.isfinite(p).all() for p in trainer.field.parameters())
    trainer.close()


@pytest.mark.slow
def test_short_training_beats_the_untrained_model_by_a_wide_margin(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run").create()
    trainer = _trainer(demo_scene, run, training__n_steps=150, training__log_every=50)
    untrained = trainer.evaluate(max_images=2, save_renders=False)["mean_psnr_db"]
    trainer.train()
    trained = trainer.evaluate(max_images=2)
    trainer.close()
    # Measured on the 2-core CI machine: untrained ≈ 9-10 dB, after 150 steps ≈ 20 dB.
    assert trained["mean_psnr_db"] > untrained + 6.0, (untrained, trained["mean_psnr_db"])
    assert run.eval_path.is_file() and run.render_path("test", 0).is_file()


def test_periodic_evaluations_score_their_views_and_write_no_renders(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run").create()
    trainer = _trainer(demo_scene, run, training__n_steps=40, training__log_every=20,
                       training__eval_every_max_images=1)
    trainer.train(eval_every=20)
    trainer.close()
    marks = [r for r in read_metrics(run.metrics_path(0)) if r.get("eval_psnr_db") is not None]
    assert [r["step"] for r in marks] == [20]  # the last step is the final evaluation's, not a mark
    assert math.isfinite(marks[0]["eval_psnr_db"])
    assert run.eval_path.is_file() and not (run.root / "renders").exists()


def test_time_budget_stop_still_writes_the_last_interval(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run").create()
    trainer = _trainer(demo_scene, run, training__log_every=1000, training__n_steps=1000)
    trainer.train(time_budget_s=0.5)
    trainer.close()
    records = read_metrics(run.metrics_path(0))
    assert len(records) == 1 and 0 < records[0]["step"] < 1000
    assert records[0]["step"] == trainer.step


def test_a_step_expected_to_overrun_the_budget_is_not_started(demo_scene):
    """The budget rule on recorded step durations (no timing asserted): the next step's expected
    length is the last one of its kind, an occupancy-update step or an ordinary one."""
    trainer = _trainer(demo_scene, None, training__occupancy_update_every=8)
    try:
        assert trainer.projected_train_time_s() == 0.0  # nothing timed yet: the first step always runs
        trainer.train(n_steps=2)
        trainer.train_time_s = 5.0
        trainer.step_durations.by_kind = {True: 2.0, False: 0.1}
        trainer.step = 16  # updates the occupancy grid
        assert trainer.projected_train_time_s() == 7.0
        assert trainer.time_budget_spent(6.0) and not trainer.time_budget_spent(7.5)
        trainer.step = 17
        assert abs(trainer.projected_train_time_s() - 5.1) < 1e-12 and not trainer.time_budget_spent(6.0)
        trainer.step_durations.by_kind = {False: 0.1}  # no update step timed yet: the ordinary one stands in
        trainer.step = 24
        assert abs(trainer.projected_train_time_s() - 5.1) < 1e-12
    finally:
        trainer.close()


def test_evaluation_subset_is_spread_over_the_split():
    from trainer.train.evaluate import evaluation_frames

    frames = [f"r_{i}" for i in range(200)]
    chosen = evaluation_frames(frames, 20)
    assert [i for i, _ in chosen] == list(range(0, 200, 10))
    assert evaluation_frames(frames[:3], 20) == list(enumerate(frames[:3]))
    assert evaluation_frames(frames, None)[-1] == (199, "r_199")


def test_cpu_runs_of_gpu_sized_configs_get_a_hint():
    from trainer.contract.defaults import cpu_config_warning
    from trainer.contract.config import apply_overrides, load_config
    from trainer.contract.textlines import LINE_WIDTH, joined

    big = apply_overrides(load_config(None), {"training.device": "cpu"})
    lines = cpu_config_warning(big, on_cpu=True).splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_WIDTH for line in lines), lines  # was one line of 200
    assert joined(lines) == ("note: training on the CPU with 262,144 samples per "
                             "step, a GPU-sized config (seconds per step); for a quick CPU run use --config "
                             "configs/small.json (fewer samples, a smaller grid and fewer march steps)")
    assert cpu_config_warning(tiny_config(), on_cpu=True) is None
    assert cpu_config_warning(big, on_cpu=False) is None
    half = cpu_config_warning(tiny_config(training__precision="bf16"), on_cpu=True).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in half), half
    assert joined(half) == ("note: training.precision bf16 on the CPU: 16-bit products are slower than float32 "
                            "there (about half the samples/s); fp32 or tf32 (the default) trains faster")
    both = cpu_config_warning(apply_overrides(big, {"training.precision": "fp16"}), on_cpu=True).splitlines()
    assert [line for line in both if line.startswith("note: ")] == [lines[0], "note: training.precision fp16 on "
                                                                    "the CPU: 16-bit products are slower than"]
    assert cpu_config_warning(tiny_config(training__precision="bf16"), on_cpu=False) is None


def test_resume_into_the_same_run_keeps_one_record_per_interval(demo_scene, tmp_path):
    run = RunDir(tmp_path / "run").create()
    first = _trainer(demo_scene, run)
    first.train(n_steps=10)
    snap = first.save(run.snapshot_path(10))
    first.train(n_steps=15)  # progress after the snapshot that a kill would lose
    first.close()
    with open(run.metrics_path(0), "a") as f:
        f.write('{"step": 2')  # a line cut by the kill
    resumed = _trainer(demo_scene, run)
    resumed.load(snap)
    resumed.train(n_steps=20)
    resumed.close()
    steps = [r["step"] for r in read_metrics(run.metrics_path(0), require_contiguous_steps=True)]
    assert steps == [5, 10, 15, 20]


def test_warmup_steps_without_samples_log_no_loss(demo_scene, tmp_path):
    from trainer.train.step import StepStats

    run = RunDir(tmp_path / "run").create()
    trainer = _trainer(demo_scene, run)
    real_step = trainer.train_step

    def empty_step():
        stats, loss, mse = real_step()
        return StepStats(stats.n_rays, 0, skipped=True, trained=False), loss * 0, mse

    trainer.train_step = empty_step  # type: ignore[method-assign]
    trainer.train(n_steps=5)
    trainer.close()
    record = read_metrics(run.metrics_path(0))[0]
    assert record["loss"] is None and record["train_psnr_db"] is None


def test_an_fp16_overflow_step_leaves_the_logged_loss_finite(demo_scene):
    trainer = _trainer(demo_scene, training__precision="fp16", training__log_every=100,
                       training__compact_samples=False)  # (see the test above)
    records = []
    trainer.train(n_steps=2)
    real_step = trainer.train_step
    weights = list(trainer.field.mlp_weight_parameters())

    def step_with_one_overflow():
        if trainer.step == 3:
            with torch.no_grad():
                weights[0].mul_(1e4)
            try:
                return real_step()
            finally:
                with torch.no_grad():
                    weights[0].div_(1e4)
        return real_step()

    trainer.train_step = step_with_one_overflow  # type: ignore[method-assign]
    trainer.train(n_steps=6, on_log=records.append)
    trainer.close()
    (record,) = records
    assert record["skipped_steps"] == 1
    assert math.isfinite(record["loss"]) and math.isfinite(record["train_psnr_db"])


def test_persistent_fp16_overflow_stops_with_advice(demo_scene, monkeypatch):
    import trainer.train.optimization as optimization

    monkeypatch.setattr(optimization, "MAX_CONSECUTIVE_OVERFLOWS", 3)
    trainer = _trainer(demo_scene, training__precision="fp16")
    trainer.train(n_steps=2)
    with torch.no_grad():
        next(iter(trainer.field.mlp_weight_parameters())).mul_(1e6)
    with pytest.raises(TrainingError, match="overflowed on 3 consecutive steps.*bf16 or fp32"):
        trainer.train(n_steps=20)
    trainer.close()

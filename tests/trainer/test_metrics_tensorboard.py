"""Every run's metric records and evaluations as TensorBoard scalars, read back with the
tensorboard package's own event reader: the values of ``metrics.jsonl`` and ``eval.json`` at their
steps; ``training.tensorboard = false`` writes none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scenes import tiny_config

pytest.importorskip("tensorboard")

STEPS = 6


def _train(scene: Path, run_root: Path, eval_every: int = 0, **overrides: object):
    from trainer.data import load_scene
    from trainer.contract.rundir import RunDir
    from trainer.train.loop import Trainer

    run = RunDir(run_root).create()
    cfg = tiny_config(data__scene=str(scene), training__n_steps=STEPS, training__log_every=3, **overrides)
    trainer = Trainer(cfg, load_scene(scene), run)
    trainer.train(eval_every=eval_every)
    evaluation = trainer.evaluate(save_renders=False, max_images=1)
    trainer.close()
    return run, evaluation


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_a_run_writes_its_records_and_evaluation_as_tensorboard_scalars(demo_scene, tmp_path):  # noqa: F811
    run, evaluation = _train(demo_scene, tmp_path / "run")
    records = [json.loads(line) for line in run.metrics_path().read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 6]
    scalars = _scalars(run.tensorboard_dir)
    expected = {"train/loss": "loss", "train/psnr_db": "train_psnr_db", "speed/steps_per_s": "steps_per_s",
                "speed/samples_per_s": "throughput_samples_per_s", "batch/rays_per_step": "rays_per_step",
                "phase_ms/march": "march_ms", "phase_ms/backward": "backward_ms", "memory/host_rss_mib": "host_rss_mib",
                "model/occupancy_fraction": "occupancy_fraction"}
    for tag, column in expected.items():
        assert [step for step, _ in scalars[tag]] == [3, 6], tag
        assert [value for _, value in scalars[tag]] == pytest.approx([r[column] for r in records], rel=1e-6), tag
    assert [v for _, v in scalars["batch/samples_per_ray"]] == pytest.approx(
        [r["samples_per_step"] / r["rays_per_step"] for r in records], rel=1e-6)
    assert scalars["eval/psnr_db"] == [(STEPS, pytest.approx(evaluation["mean_psnr_db"], rel=1e-6))]
    assert scalars["eval/ssim"] == [(STEPS, pytest.approx(evaluation["mean_ssim"], rel=1e-6))]
    assert not any(tag.startswith("gpu/") for tag in scalars)  # NVML readings only on CUDA


def test_evaluations_during_training_go_into_the_trainings_event_file(demo_scene, tmp_path):  # noqa: F811
    run, evaluation = _train(demo_scene, tmp_path / "run", eval_every=2, training__eval_every_max_images=1)
    scalars = _scalars(run.tensorboard_dir)
    assert [step for step, _ in scalars["eval/psnr_db"]] == [2, 4, STEPS]
    # one file for the training's writer (its records and the marks at steps 2 and 4), one for the final evaluation
    assert len(list(run.tensorboard_dir.glob("events.out.tfevents.*"))) == 2


def test_a_run_resumed_in_its_folder_keeps_the_earlier_runs_scalars_up_to_the_resumed_step(demo_scene, tmp_path):  # noqa: F811
    from trainer.contract.rundir import RunDir
    from trainer.data import load_scene
    from trainer.train.loop import Trainer

    run = RunDir(tmp_path / "run").create()
    first = Trainer(tiny_config(data__scene=str(demo_scene), training__n_steps=STEPS, training__log_every=3),
                    load_scene(demo_scene), run)
    first.train()
    snapshot = first.save(run.snapshot_path(STEPS))
    first.close()
    again = Trainer(tiny_config(data__scene=str(demo_scene), training__n_steps=STEPS + 3, training__log_every=3),
                    load_scene(demo_scene), run)
    again.load(snapshot)
    again.train()
    again.close()
    assert [step for step, _ in _scalars(run.tensorboard_dir)["train/loss"]] == [3, STEPS, STEPS + 3]


def test_training_tensorboard_false_writes_no_events(demo_scene, tmp_path):  # noqa: F811
    run, _ = _train(demo_scene, tmp_path / "run", training__tensorboard=False)
    assert run.metrics_path().is_file()
    assert list(run.root.glob("events.out.tfevents.*")) == []


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA: NVML's readings are CUDA's")
def test_a_cuda_run_adds_nvml_utilisation_and_memory(demo_scene, tmp_path):  # noqa: F811
    run, _ = _train(demo_scene, tmp_path / "run", training__device="cuda")
    scalars = _scalars(run.tensorboard_dir)
    assert [step for step, _ in scalars["gpu/utilization_percent"]] == [3, 6]
    assert all(0.0 <= value <= 100.0 for _, value in scalars["gpu/utilization_percent"])
    assert all(value > 0.0 for _, value in scalars["gpu/memory_used_mib"])
    assert all(value > 0.0 for _, value in scalars["memory/device_allocated_mib"])
